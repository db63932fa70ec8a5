"""Enqueue: the caller's transaction, JSON-only arguments, dedupe, NOTIFY after commit."""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg
import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_pgqueue import enqueue
from django_pgqueue.exceptions import InvalidJob, InvalidJobArguments
from django_pgqueue.models import Job
from django_pgqueue.queue.enqueue import COPY_THRESHOLD
from django_pgqueue.records import JobSpec
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)


class Boom(Exception):
    pass


def test_enqueue_returns_a_queued_job_with_defaults() -> None:
    job = add.enqueue(2, 3)
    row = Job.objects.get(pk=job.pk)
    assert (row.task, row.args, row.kwargs) == ("tests.testapp.tasks.add", [2, 3], {})
    assert (row.status, row.queue, row.priority, row.attempts, row.max_attempts) == (
        "queued",
        "default",
        0,
        0,
        3,
    )
    assert row.run_at <= timezone.now()
    assert job.duplicate is False


def test_the_returned_job_is_what_the_keyword_constructor_makes() -> None:
    from django_pgqueue.models import _loaded

    job = add.using(queue="emails", priority=5, unique_key="k").enqueue(2, b=3)
    by_keyword = Job(
        id=job.id, task=job.task, args=[2], kwargs={"b": 3}, queue="emails", priority=5,
        max_attempts=job.max_attempts, run_at=job.run_at, created_at=job.created_at,
        unique_key="k", concurrency_key=None, backoff=job.backoff, status="queued",
        attempts=0,
    )  # fmt: skip
    assert [getattr(job, f.attname) for f in Job._meta.concrete_fields] == [
        getattr(by_keyword, f.attname) for f in Job._meta.concrete_fields
    ]
    assert (job._state.adding, job._state.db, job.pk) == (False, "default", by_keyword.pk)
    assert job.errors is not add.enqueue(1, b=1).errors  # a fresh default per instance
    with pytest.raises(TypeError, match=r"Job has no field \['nope'\]"):
        _loaded(Job, "default", nope=1)


def test_rollback_leaves_no_job_and_commit_keeps_it() -> None:
    with pytest.raises(Boom), transaction.atomic():
        add.enqueue(1, 1)
        assert Job.objects.count() == 1  # visible inside its own transaction
        raise Boom
    assert Job.objects.count() == 0

    with transaction.atomic():
        add.enqueue(1, 1)
    assert Job.objects.count() == 1


def test_savepoint_rollback_only_drops_the_inner_job() -> None:
    with transaction.atomic():
        add.enqueue(1, 0)
        with pytest.raises(Boom), transaction.atomic():
            add.enqueue(2, 0)
            raise Boom
    assert list(Job.objects.values_list("args", flat=True)) == [[1, 0]]


def test_job_is_invisible_to_other_connections_until_commit(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as other, transaction.atomic():
        add.enqueue(1, 2)
        assert other.execute("SELECT count(*) FROM pgqueue_job").fetchone() == (0,)
    with psycopg.connect(db_url, autocommit=True) as other:
        assert other.execute("SELECT count(*) FROM pgqueue_job").fetchone() == (1,)


def test_notification_arrives_only_after_commit(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN pgqueue_jobs")
        with transaction.atomic():
            enqueue("tests.testapp.tasks.add", [1, 2], queue="emails")
            assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
        heard = list(listener.notifies(timeout=2, stop_after=1))
        assert [(n.channel, n.payload) for n in heard] == [("pgqueue_jobs", "emails")]

        with pytest.raises(Boom), transaction.atomic():
            enqueue("tests.testapp.tasks.add", [1, 2], queue="emails")
            raise Boom
        assert list(listener.notifies(timeout=0.3, stop_after=1)) == []


def test_using_is_honoured() -> None:
    job = Job.objects.enqueue(add, [1, 2], using="default")
    assert Job.objects.using("default").filter(pk=job.pk).exists()


def test_jobs_are_written_to_the_queue_database_setting() -> None:
    """Workers claim from PGQUEUE["DATABASE"], so enqueue writes there too."""
    from django.test import override_settings
    from django.utils.connection import ConnectionDoesNotExist

    with (
        override_settings(PGQUEUE={"DATABASE": "jobs"}),
        pytest.raises(ConnectionDoesNotExist, match="The connection 'jobs' doesn't exist"),
    ):
        add.enqueue(1, 2)
    assert Job.objects.count() == 0


def test_options_are_stored() -> None:
    at = timezone.now() + dt.timedelta(hours=1)
    job = add.using(
        queue="q1", priority=7, max_attempts=9, run_at=at, unique_key="u1", concurrency_key="c1"
    ).enqueue(1, 2)
    row = Job.objects.get(pk=job.pk)
    assert (row.queue, row.priority, row.max_attempts, row.run_at) == ("q1", 7, 9, at)
    assert (row.unique_key, row.concurrency_key) == ("u1", "c1")
    assert row.backoff is None  # PGQUEUE["BACKOFF_BASE"] applies
    assert (
        Job.objects.get(pk=add.using(backoff=dt.timedelta(minutes=2)).enqueue(1, 2).pk).backoff
        == 120
    )


def test_delay_sets_run_at_in_the_future() -> None:
    before = timezone.now()
    job = add.using(delay=dt.timedelta(seconds=30)).enqueue(1, 2)
    row = Job.objects.get(pk=job.pk)
    assert before + dt.timedelta(seconds=29) < row.run_at < before + dt.timedelta(seconds=32)


def test_duplicate_unique_key_of_live_job_is_not_inserted_and_caller_can_tell() -> None:
    first = add.using(unique_key="welcome:42").enqueue(1, 2)
    second = add.using(unique_key="welcome:42").enqueue(3, 4)
    assert second.duplicate is True
    assert first.duplicate is False
    assert second.pk == first.pk
    assert Job.objects.count() == 1
    # The live job as stored, not the refused call's values: saving the returned
    # object wrote those over the live job.
    Job.objects.claim("w1")
    again = Job.objects.enqueue(add, [7, 8], queue="other", priority=-3, unique_key="welcome:42")
    assert (again.duplicate, again.args, again.queue, again.priority, again.status) == (
        True,
        [1, 2],
        "default",
        0,
        "running",
    )
    assert (again.attempts, again.locked_by) == (1, "w1")
    again.save()
    assert Job.objects.values_list("args", "queue").get() == ([1, 2], "default")
    Job.objects.filter(pk=first.pk).update(status="queued", locked_by=None)
    # Once the job is finished the key is free again.
    Job.objects.filter(pk=first.pk).update(status="done", done_at=timezone.now())
    third = add.using(unique_key="welcome:42").enqueue(5, 6)
    assert third.duplicate is False
    assert third.pk != first.pk
    assert Job.objects.count() == 2


def test_a_duplicate_of_a_live_job_whose_json_python_cannot_read_is_still_returned() -> None:
    """The live job's arguments are past what Python reads (a 5,000-digit number):
    the duplicate enqueue raised ValueError. It returns the live job, with the
    JSON it cannot read left unloaded; saving it leaves that JSON as stored."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (task, args, kwargs, status, unique_key, errors, worker_ids) "
            "VALUES ('tests.testapp.tasks.add', '[1e5000]'::jsonb, '{}', 'queued', 'huge', "
            "'[]', '[]') RETURNING id"
        )
        planted = cursor.fetchone()[0]
    again = Job.objects.enqueue(add, [7, 8], queue="other", priority=-3, unique_key="huge")
    assert (again.pk, again.duplicate, again.queue, again.priority, again.status) == (
        planted,
        True,
        "default",
        0,
        "queued",
    )
    assert {"args", "kwargs"} <= again.get_deferred_fields()
    again.save()
    with connection.cursor() as cursor:
        cursor.execute("SELECT args::text, queue FROM pgqueue_job WHERE id = %s", [planted])
        assert cursor.fetchone() == ("[1" + "0" * 5000 + "]", "default")
    assert Job.objects.count() == 1


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ([timezone.now()], None, "args[0] is datetime.datetime"),
        ([1, {"when": dt.date(2026, 1, 1)}], None, "args[1]['when'] is datetime.date"),
        ([], {"obj": object()}, "kwargs['obj'] is builtins.object"),
        ([], {"n": float("nan")}, "kwargs['n'] is builtins.float nan"),
        ([{1: "a"}], None, "args[0] key 1 is builtins.int"),
        ([b"bytes"], None, "args[0] is builtins.bytes"),
        (["a\x00b"], None, "args[0] is the string"),
        ([], {"name": "caf\udcff"}, "kwargs['name'] is the string"),
    ],
)
def test_non_json_arguments_are_refused_before_anything_is_written(
    args: list[object], kwargs: dict[str, object] | None, message: str
) -> None:
    with pytest.raises(InvalidJobArguments, match=message.replace("[", r"\[")):
        Job.objects.enqueue(add, args, kwargs)
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"priority": 101}, "priority 101 must be a whole number from -100 to 100"),
        ({"priority": -101}, "priority -101"),
        ({"priority": True}, "priority True"),
        ({"queue": ""}, "queue '' is not a valid queue name"),
        ({"queue": "has space"}, "queue 'has space'"),
        ({"max_attempts": 0}, "max_attempts 0"),
        ({"max_attempts": 2**31}, "max_attempts 2147483648 must be a whole number from 1 to"),
        ({"delay": float("inf")}, "delay inf must be a number of seconds from 0 to"),
        ({"delay": 1e12}, "delay 1000000000000.0"),
        ({"delay": -1}, "delay -1"),
        ({"run_at": dt.datetime(2026, 1, 1)}, "must be a timezone-aware datetime"),
        # In UTC these are 0001-12-31 BC and the year 10000: PostgreSQL stored them,
        # then the row could not be read back (a DataError after the insert).
        (
            {"run_at": dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=14)))},
            "from 0001-01-02 to 9999-12-30 UTC",
        ),
        (
            {"run_at": dt.datetime(9999, 12, 31, 23, tzinfo=dt.timezone(-dt.timedelta(hours=14)))},
            "from 0001-01-02 to 9999-12-30 UTC",
        ),
        ({"run_at": dt.datetime.max.replace(tzinfo=dt.UTC)}, "from 0001-01-02"),
        ({"delay": 1, "run_at": timezone.now()}, "give run_at or delay, not both"),
        ({"unique_key": ""}, "unique_key ''"),
        ({"backoff": -1}, "backoff -1 must be a number of seconds from 0 to"),
        ({"backoff": 1e13}, "backoff 10000000000000.0 must be a number of seconds from 0 to"),
        ({"backoff": float("inf")}, "backoff inf"),
    ],
)
def test_bad_options_raise_a_clear_error(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidJob, match=message):
        Job.objects.enqueue(add, [1, 2], **options)
    assert Job.objects.count() == 0


def test_bad_option_values_are_refused_where_they_are_declared() -> None:
    """``@task(...)`` and ``.using(...)`` check their values at once: a bad one would
    otherwise make every later enqueue fail, far from the mistake."""
    from django_pgqueue import task

    def func() -> None: ...

    cases: list[tuple[dict[str, Any], str]] = [
        ({"queue": 1}, "queue 1 is not a valid queue name"),
        ({"priority": 500}, "priority 500 must be a whole number"),
        ({"retry_on": "ValueError"}, "retry_on 'ValueError' must be an exception class"),
        ({"unique_key": ""}, "unique_key ''"),
    ]
    for options, message in cases:
        with pytest.raises(InvalidJob, match=message):
            task(name="tests.never.registered", **options)(func)
        with pytest.raises(InvalidJob, match=message):
            add.using(**options)


@pytest.mark.parametrize(
    "give",
    [
        lambda **o: Job.objects.enqueue(add, [1, 2], **o),
        lambda **o: Job.objects.enqueue("tests.testapp.tasks.add", [1, 2], **o),
        lambda **o: add.using(**o).enqueue(1, 2),
        lambda **o: JobSpec.build(add, [1, 2], **o),
    ],
)
def test_an_unknown_option_is_named_with_the_ones_there_are(give: Any) -> None:
    with pytest.raises(InvalidJob, match=r"unknown option 'bogus': the options are queue, prio"):
        give(bogus=1)
    with pytest.raises(InvalidJob, match=r"'run_after' \(Django's run_after is run_at= or del"):
        give(run_after=timezone.now())
    with pytest.raises(InvalidJob, match=r"'queue_name' \(Django's queue_name is queue= here\)"):
        give(queue_name="emails")
    with pytest.raises(InvalidJob, match=r"'max_attempt' \(did you mean 'max_attempts'\?\)"):
        give(max_attempt=2)
    assert Job.objects.count() == 0


def test_a_decorator_with_an_unknown_option_fails_where_it_is_written() -> None:
    from django_pgqueue import task

    with pytest.raises(InvalidJob, match="unknown option 'max_retries'"):

        @task(max_retries=3)
        def never() -> None: ...


def test_a_path_naming_a_registered_task_takes_its_options_and_retry_policy() -> None:
    """By path as by the task itself: the task's @task(...) options are the defaults."""
    from tests.testapp.tasks import always_fails, retries_io_only

    by_path = Job.objects.enqueue(always_fails.path, ["x"])
    as_itself = always_fails.enqueue("x")
    assert (by_path.max_attempts, by_path.queue) == (as_itself.max_attempts, as_itself.queue)
    assert by_path.max_attempts == always_fails.options["max_attempts"] != 3
    assert Job.objects.enqueue(always_fails.path, ["x"], max_attempts=7).max_attempts == 7
    row = Job.objects.get(pk=Job.objects.enqueue(retries_io_only.path, ["y", "e"]).pk)
    assert row.retry_policy == Job.objects.get(pk=retries_io_only.enqueue("y", "e").pk).retry_policy
    assert row.retry_policy is not None


def test_by_path_the_options_do_not_depend_on_what_was_imported_before() -> None:
    """The path's module is imported first if a worker would import it: the same
    call gets the task's options in every process, not only where something else
    imported the module already."""
    import sys

    from django.test import override_settings

    from django_pgqueue import registry

    path = "tests.outside.late.late_task"
    sys.modules.pop("tests.outside.late", None)
    registry._registry.pop(path, None)
    with override_settings(PGQUEUE={"TASK_MODULES": ["tests.outside.late"]}):
        job = Job.objects.enqueue(path, [])
    assert (job.queue, job.max_attempts) == ("emails", 4)


def test_a_task_defined_in_a_script_or_the_shell_is_refused_with_where_to_put_it() -> None:
    from django_pgqueue import task

    def in_shell() -> None: ...

    in_shell.__module__ = "django.core.management.commands.shell"
    in_shell.__qualname__ = "in_shell"  # as a def at the prompt has it
    with pytest.raises(InvalidJob, match=r"defined in a script or the shell .*installed app"):
        Job.objects.enqueue(task(in_shell), [])


def test_before_migrate_the_enqueue_error_says_to_migrate() -> None:
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE pgqueue_job RENAME TO pgqueue_job_away")
    try:
        with pytest.raises(DatabaseError, match="pgqueue_job") as raised:
            add.enqueue(1, 2)
        assert any("run `manage.py migrate`" in note for note in raised.value.__notes__)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE pgqueue_job_away RENAME TO pgqueue_job")


def test_a_path_is_checked_against_the_tasks_framework_task_it_names() -> None:
    """The direct API enqueuing a Tasks-framework Task by path: the call is checked
    against the Task declared here, as a @django_pgqueue.task's is."""
    from tests.testapp import djtasks

    path = djtasks.add_async.module_path
    with pytest.raises(InvalidJobArguments, match=r"add_async\(a, b\): too many positional"):
        enqueue(path, [1, 2, 3])
    assert Job.objects.count() == 0
    assert enqueue(path, [1, 2]).task == path
    with pytest.raises(InvalidJobArguments, match="too many positional"):
        enqueue(add.path, [1, 2, 3])  # a direct task by path, as before


def test_task_must_be_a_dotted_path() -> None:
    with pytest.raises(InvalidJob, match="dotted path"):
        enqueue("nodots")
    with pytest.raises(InvalidJob, match="at most 255 chars"):
        enqueue("a." + "b" * 300)
    with pytest.raises(InvalidJob, match="args must be a list"):
        enqueue(add, "12")


def test_enqueue_many_below_the_copy_threshold_is_one_statement() -> None:
    specs = [JobSpec.build(add, [i, i]) for i in range(COPY_THRESHOLD - 1)]
    with CaptureQueriesContext(connection) as queries:
        ids = Job.objects.enqueue_many(specs)
    assert len(queries) == 1
    assert len(ids) == COPY_THRESHOLD - 1 == Job.objects.queued().count()
    assert ids == sorted(ids)
    assert Job.objects.get(pk=ids[123]).args == [123, 123]


def test_enqueue_many_copies_ten_thousand_jobs_in_a_constant_number_of_statements(
    db_url: str,
) -> None:
    specs = [
        JobSpec.build(
            add,
            [i, i],
            queue="bulk" if i % 2 else "default",
            concurrency_key="k" if i == 7 else None,
            backoff=2 if i == 8 else None,
        )
        for i in range(10_000)
    ]
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN pgqueue_jobs")
        with CaptureQueriesContext(connection) as queries, transaction.atomic():
            before = timezone.now()
            ids = Job.objects.enqueue_many(specs)
            assert list(listener.notifies(timeout=0.2, stop_after=1)) == []  # not before commit
        heard = sorted(n.payload for n in listener.notifies(timeout=2, stop_after=2))
    ours = [
        q["sql"].split("*/")[0]
        for q in queries.captured_queries
        if q["sql"].startswith("/* pgqueue:")
    ]
    # Three statements, not one per job: reserve the ids, COPY, notify.
    assert ours == [
        "/* pgqueue: reserve_ids ",
        "/* pgqueue: copy_jobs ",
        "/* pgqueue: notify_queues ",
    ]
    assert heard == ["bulk", "default"]
    assert len(ids) == 10_000 == Job.objects.queued().count()
    assert ids == sorted(ids)
    rows = {job.pk: job for job in Job.objects.filter(pk__in=[ids[0], ids[7], ids[8], ids[9]])}
    assert (rows[ids[9]].args, rows[ids[9]].queue, rows[ids[9]].status) == (
        [9, 9],
        "bulk",
        "queued",
    )
    assert rows[ids[7]].concurrency_key == "k"
    assert rows[ids[8]].backoff == 2
    assert rows[ids[0]].run_at >= before - dt.timedelta(seconds=1)
    assert rows[ids[0]].run_at <= timezone.now()
    assert Job.objects.claim("w", limit=3) != []  # ready to claim


def test_a_rolled_back_bulk_copy_leaves_nothing() -> None:
    specs = [JobSpec.build(add, [i, i]) for i in range(COPY_THRESHOLD)]
    with pytest.raises(Boom), transaction.atomic():
        Job.objects.enqueue_many(specs)
        raise Boom
    assert Job.objects.count() == 0


def test_enqueue_many_skips_live_duplicates_and_notifies_once_per_queue(db_url: str) -> None:
    add.using(unique_key="k1").enqueue(0, 0)
    specs = [
        JobSpec.build(add, [1, 1], unique_key="k1"),
        JobSpec.build(add, [2, 2], unique_key="k2", queue="a"),
        JobSpec.build(add, [3, 3], unique_key="k2", queue="a"),
        JobSpec.build(add, [4, 4], queue="b"),
    ]
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN pgqueue_jobs")
        ids = Job.objects.enqueue_many(specs)
        heard = sorted(n.payload for n in listener.notifies(timeout=1, stop_after=2))
    assert len(ids) == 2
    assert sorted(Job.objects.filter(pk__in=ids).values_list("args", flat=True)) == [[2, 2], [4, 4]]
    assert heard == ["a", "b"]


def test_floats_of_any_size_come_back_as_floats_in_arguments_and_results() -> None:
    """jsonb keeps numbers as numeric and wrote 1e+16 back as 10000000000000000: the
    task got an int, and so did a reader of its result."""
    from django_pgqueue.testing import run_jobs
    from tests.testapp.djtasks import echo
    from tests.testapp.tasks import noop

    sent = [1e16, -1.5e300, 1.7976931348623157e308, 1.0, 2.5e-8, 10**20, "1e+16", {"k": 3e22}]
    direct = Job.objects.get(pk=noop.enqueue(*sent).pk)
    assert direct.args == sent
    assert [type(v) for v in direct.args] == [type(v) for v in sent]
    assert type(direct.args[-1]["k"]) is float
    # The Tasks path encodes its own way, and so do large batches (COPY).
    framework = echo.enqueue(4e18)
    assert [type(v) for v in Job.objects.get(pk=int(framework.id)).args] == [float]
    many = Job.objects.enqueue_many([JobSpec.build(add, [3e20, 0.5])] * COPY_THRESHOLD)
    assert {type(job.args[0]) for job in Job.objects.filter(pk__in=many)} == {float}
    summed = Job.objects.enqueue(add, [1e16, 2.0])
    run_jobs(max_jobs=10**4)
    result = Job.objects.get(pk=summed.pk).result
    assert (type(result), result) == (float, 1e16 + 2.0)
    framework.refresh()
    assert framework.return_value == {"args": [4e18], "kwargs": {}}
    assert type(framework.return_value["args"][0]) is float


def test_a_tasks_framework_task_given_to_the_direct_api_says_how_to_enqueue_it() -> None:
    from tests.testapp.djtasks import echo

    with pytest.raises(InvalidJob, match=r"'tests.testapp.djtasks.echo' is a django.tasks Task"):
        enqueue(echo, [1])
    assert Job.objects.count() == 0
    assert enqueue(echo.module_path, [1]).task == "tests.testapp.djtasks.echo"


def test_a_row_written_by_hand_needs_only_its_task() -> None:
    """Every column but task has a database default: a fixture or another program can
    insert a job with plain SQL, and it runs."""
    from django_pgqueue.testing import run_jobs

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (task) VALUES ('tests.testapp.tasks.noop') RETURNING id"
        )
        (job_id,) = cursor.fetchone()
    row = Job.objects.get(pk=job_id)
    assert (row.args, row.kwargs, row.errors, row.worker_ids, row.status) == (
        [],
        {},
        [],
        [],
        "queued",
    )
    run_jobs()
    assert Job.objects.values_list("status", "attempts").get(pk=job_id) == ("done", 1)


def test_a_negative_zero_reads_back_as_the_zero_jsonb_keeps() -> None:
    """numeric has no negative zero, so jsonb keeps -0.0 as 0.0: the enqueue's result
    said -0.0 while get_result(), and the task, had 0.0."""
    from django_pgqueue.backend.compat import task_backends
    from tests.testapp.djtasks import echo
    from tests.testapp.tasks import noop

    framework = echo.enqueue(-0.0, "-0.0", -0.05, [-0.0])
    stored = task_backends["default"].get_result(framework.id)
    assert repr(framework.args) == repr(stored.args) == "[0.0, '-0.0', -0.05, [0.0]]"
    direct = noop.enqueue(-0.0, {"k": -0.0})  # (its Job holds the caller's own values)
    assert repr(Job.objects.get(pk=direct.pk).args) == "[0.0, {'k': 0.0}]"
