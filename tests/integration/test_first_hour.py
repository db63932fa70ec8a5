"""Issue 13, the first hour of a new user: each mistake gets its clear answer where it is
made. The API's side, against PostgreSQL; what the commands print is in
tests/worker/test_first_hour.py.

1 arguments checked against the signature at enqueue; 2 the app missing (enqueue);
4 run_jobs() in a TestCase, runworker refusing to run in one; 5 non-JSON arguments
through the Tasks API; 6 a non-JSON return value; 7 run_after with a timedelta;
8 retry()/cancel() with ids, jobs or a queryset.
"""

from __future__ import annotations

import datetime as dt
import logging
from functools import partial

import psycopg
import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from django_pgqueue import enqueue
from django_pgqueue.backend import call, enqueue_many, options
from django_pgqueue.backend.compat import InvalidTask, TaskResultStatus
from django_pgqueue.exceptions import InvalidJob, InvalidJobArguments
from django_pgqueue.installed import NOT_INSTALLED
from django_pgqueue.models import Job
from django_pgqueue.records import JobSpec
from django_pgqueue.testing import run_jobs
from django_pgqueue.worker.banner import unknown_queues
from tests.conftest import status_counts
from tests.testapp import djtasks
from tests.testapp.djtasks import pgq
from tests.testapp.tasks import add, always_fails, flaky, leaks_transaction, mark, returns_a_set
from tests.unit.test_backend import WITHOUT_THE_APP

pytestmark = pytest.mark.django_db

# -- 1: the call is checked against the function's signature at enqueue -------------------


def test_a_direct_task_refuses_a_call_its_function_cannot_take() -> None:
    with pytest.raises(InvalidJobArguments) as raised:
        add.enqueue(1, 2, 3)  # type: ignore[call-arg]
    assert str(raised.value) == (
        "arguments do not match the task's signature add(a, b): too many positional arguments"
    )
    assert isinstance(raised.value, TypeError)
    with pytest.raises(InvalidJobArguments, match=r"add\(a, b\): missing a required argument: 'b'"):
        enqueue("tests.testapp.tasks.add", [1])  # by path: the task is registered here
    with pytest.raises(InvalidJobArguments, match="unexpected keyword argument 'c'"):
        Job.objects.enqueue_many([JobSpec.build(add, [1, 2]), JobSpec.build(add, [1, 2], {"c": 3})])
    assert Job.objects.count() == 0
    mark.enqueue("fits", sleep=0)  # keywords the function takes are fine
    assert Job.objects.count() == 1


def test_a_tasks_framework_task_refuses_a_call_its_function_cannot_take() -> None:
    with pytest.raises(InvalidJobArguments) as raised:
        djtasks.calculate_meaning_of_life.enqueue(1)  # type: ignore[call-arg]
    assert str(raised.value) == (
        "arguments do not match the task's signature calculate_meaning_of_life(): too many "
        "positional arguments (tests.testapp.djtasks.calculate_meaning_of_life)"
    )
    assert isinstance(raised.value, TypeError)
    # A context task: the context is the worker's to pass, not the caller's.
    with pytest.raises(TypeError, match=r"check_context\(context, attempt\): missing a required"):
        djtasks.check_context.enqueue()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="too many positional arguments"):
        enqueue_many(djtasks.add_async, [call(1, 2), call(1, 2, 3)])
    assert Job.objects.count() == 0
    djtasks.check_context.enqueue(attempt=1)
    djtasks.add_async.enqueue(1, b=2)
    assert Job.objects.count() == 2


# -- 2: enqueue without the app says what to add ----------------------------------------------


def test_enqueue_without_the_app_says_what_to_add() -> None:
    assert 'add "django_pgqueue" to INSTALLED_APPS and run `python manage.py migrate`' in (
        NOT_INSTALLED
    )
    with override_settings(INSTALLED_APPS=[*WITHOUT_THE_APP, "example_project.shop"]):
        with pytest.raises(InvalidTask, match="django_pgqueue is not in INSTALLED_APPS") as raised:
            djtasks.noop_task.enqueue()
        assert (
            str(raised.value)
            == f"{NOT_INSTALLED} (django_pgqueue.E101: TASKS['default'] uses PgQueueBackend)"
        )
        with pytest.raises(ImproperlyConfigured, match="django_pgqueue is not in INSTALLED_APPS"):
            add.enqueue(1, 2)
        with pytest.raises(ImproperlyConfigured, match="django_pgqueue is not in INSTALLED_APPS"):
            djtasks.noop_task.get_result("1")


# -- 4: tests: run_jobs() works in a TestCase; runworker refuses to run in one -----------------


def test_runworker_inside_a_test_transaction_says_use_transactiontestcase() -> None:
    add.enqueue(1, 2)
    with pytest.raises(CommandError) as raised:
        call_command("runworker", "--burst", verbosity=0)
    message = str(raised.value)
    assert "inside an open transaction on database 'default'" in message
    assert "use TransactionTestCase" in message
    assert "django_pgqueue.testing.run_jobs()" in message
    assert status_counts() == {"queued": 1}  # nothing claimed, nothing failed


def test_run_jobs_runs_queued_jobs_through_the_queue_inside_a_test_transaction() -> None:
    done = add.enqueue(2, 3)
    tasks_job = djtasks.echo.enqueue(1, k="v")
    buried = always_fails.enqueue("fh-dead")
    retried = flaky.enqueue("fh-flaky", failures=1)
    later = add.using(delay=3600).enqueue(0, 0)
    ran = run_jobs()
    assert sorted(ran.done) == sorted([done.pk, int(tasks_job.id)])
    # Failed with attempts left (always_fails has two): queued again for after the
    # backoff, which is not waited for; inside the test's transaction now() stands still.
    assert ran.retried == [buried.pk, retried.pk]
    assert ran.dead == []
    assert len(run_jobs()) == 0
    assert Job.objects.get(pk=done.pk).result == 5
    result = djtasks.echo.get_result(tasks_job.id)
    assert (result.status, result.return_value) == (
        TaskResultStatus.SUCCESSFUL,
        {"args": [1], "kwargs": {"k": "v"}},
    )
    assert Job.objects.get(pk=later.pk).status == "queued"  # not ready: not run
    Job.objects.retry([buried.pk])  # ready now
    assert run_jobs(max_jobs=1).retried == [buried.pk]


def test_run_jobs_keeps_the_test_transaction_usable_when_a_job_breaks_it() -> None:
    leaky = leaks_transaction.enqueue("fh-leak")
    broken = returns_a_set.enqueue()
    ran = run_jobs()
    assert sorted(ran.dead) == sorted([leaky.pk, broken.pk])
    job = Job.objects.get(pk=leaky.pk)  # the test's transaction still works
    assert job.last_error.startswith("django_pgqueue.jobdb.TransactionLeftOpen: the task returned")


@pytest.mark.parametrize("max_jobs", [-1, "2", 1.5, True])
def test_run_jobs_refuses_a_max_jobs_that_is_not_a_count(max_jobs: object) -> None:
    """-1 ran nothing without a word, and "2" failed with a bare comparison TypeError."""
    add.enqueue(1, 1)
    with pytest.raises(InvalidJob, match=r"max_jobs must be a whole number, 0 or more"):
        run_jobs(max_jobs=max_jobs)  # type: ignore[arg-type]
    assert status_counts() == {"queued": 1}


@pytest.mark.django_db(transaction=True)
def test_run_jobs_in_autocommit_commits_as_a_worker_would() -> None:
    job = add.enqueue(40, 2)
    failing = always_fails.using(max_attempts=1).enqueue("fh-autocommit")
    ran = run_jobs(queues=["default"])
    assert (ran.done, ran.dead) == ([job.pk], [failing.pk])
    assert status_counts() == {"done": 1, "dead": 1}
    assert Job.objects.get(pk=job.pk).worker_ids[0].startswith("run_jobs:")


# -- 5: non-JSON arguments through the Tasks API ---------------------------------------------------


def test_tasks_api_names_a_non_json_argument_and_keeps_djangos_words() -> None:
    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    with pytest.raises(TypeError) as raised:
        djtasks.noop_task.enqueue(7, when=when)
    assert isinstance(raised.value, InvalidJobArguments)
    message = str(raised.value)
    assert message.startswith("kwargs['when'] is datetime.datetime datetime.datetime(2026, 1, 1")
    assert "which is not JSON; pass only str, int, float, bool, None, lists and dicts" in message
    assert "(for example an id or an ISO date string)" in message
    assert "Unsupported type" in message  # Django's own error, kept
    assert Job.objects.count() == 0


# -- 6: a non-JSON return value ----------------------------------------------------------------


def test_a_non_json_return_value_is_logged_and_reported_as_a_plain_type_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad = djtasks.complex_return_value.enqueue()
    with caplog.at_level(logging.WARNING, logger="django_pgqueue"):
        assert run_jobs().dead == [int(bad.id)]
    (record,) = [r for r in caplog.records if r.name == "django_pgqueue"]
    line = record.getMessage()
    assert record.levelno == logging.ERROR  # a buried job is an error, for error trackers
    assert line.startswith(
        f"job {bad.id} (tests.testapp.djtasks.complex_return_value) buried dead: "
        "it cannot succeed by retrying: "
    )
    assert "the return value is builtins.function" in line
    assert "which is not JSON; return only str, int" in line  # worded for a return value
    bad.refresh()
    (error,) = bad.errors
    assert error.exception_class_path == "builtins.TypeError"
    assert error.exception_class is TypeError  # Django's own class, not a subclass
    job = Job.objects.get(pk=bad.id)
    assert job.last_error.startswith("TypeError: the return value is builtins.function")
    direct = returns_a_set.enqueue()
    run_jobs()
    assert Job.objects.get(pk=direct.pk).last_error == (
        "TypeError: the return value is builtins.set {1}, which is not JSON; return only str, "
        "int, float, bool, None, lists and dicts with string keys (for example an id, or a "
        "dict of plain values)"
    )


# -- 7: one way to delay a Tasks job: run_after, a datetime or a timedelta ---------------------


def test_run_after_takes_a_timedelta_on_our_tasks() -> None:
    before = timezone.now()
    result = pgq(djtasks.noop_task).using(run_after=dt.timedelta(minutes=5)).enqueue()
    typed = options(djtasks.noop_task, run_after=dt.timedelta(seconds=30)).enqueue()
    after = timezone.now()
    job = Job.objects.get(pk=result.id)
    assert before + dt.timedelta(minutes=5) <= job.run_at <= after + dt.timedelta(minutes=5)
    assert Job.objects.get(pk=typed.id).run_at >= before + dt.timedelta(seconds=30)
    assert result.task.run_after == job.run_at  # the Task carries the moment, as Django's does
    assert run_jobs() == run_jobs()  # neither is ready
    when = timezone.now() + dt.timedelta(hours=1)
    assert Job.objects.get(pk=djtasks.noop_task.using(run_after=when).enqueue().id).run_at == when


def test_a_delay_keyword_points_at_run_after() -> None:
    with pytest.raises(TypeError) as raised:
        pgq(djtasks.noop_task).using(delay=60)
    assert str(raised.value) == (
        "PgQueueTask.using() got unexpected keyword argument(s) delay: it takes priority, "
        "queue_name, run_after, backend, max_attempts, unique_key, concurrency_key, backoff, "
        "retry_on, discard_on; "
        "to delay a job, pass run_after=timedelta(seconds=...) or an aware datetime"
    )
    with pytest.raises(
        InvalidTask, match=r"run_after datetime.timedelta\(days=-1, seconds=86340\) must be a num"
    ):
        pgq(djtasks.noop_task).using(run_after=dt.timedelta(minutes=-1))
    with pytest.raises(TypeError) as raised:
        options(djtasks.noop_task, delay=60)  # type: ignore[arg-type]
    assert str(raised.value) == (
        "options() got unexpected keyword argument(s) delay: it takes run_after, max_attempts, "
        "unique_key, concurrency_key, backoff, retry_on, discard_on; "
        "to delay a job, pass run_after=timedelta(seconds=...) or an aware datetime"
    )


# -- 8: retry() and cancel() take ids, jobs or a queryset --------------------------------------


def test_retry_and_cancel_take_ids_jobs_a_queryset_or_one_job() -> None:
    jobs = [add.using(delay=3600).enqueue(n, n) for n in range(4)]
    assert Job.objects.retry(jobs[0]) == [jobs[0].pk]  # one Job: waiting, it runs now
    assert Job.objects.retry(jobs[0]) == []  # ready now: nothing left to do
    assert Job.objects.retry(Job.objects.filter(pk=jobs[1].pk)) == [jobs[1].pk]
    assert Job.objects.cancel([jobs[1], jobs[2].pk], reason="mixed") == [jobs[1].pk, jobs[2].pk]
    assert Job.objects.cancel(Job.objects.queued(), reason="rest") == [jobs[0].pk, jobs[3].pk]
    assert Job.objects.retry(Job.objects.cancelled()) == sorted(j.pk for j in jobs)
    with pytest.raises(InvalidJob, match="expected job ids, Job instances or a queryset of jobs, "):
        Job.objects.retry(["seven"])
    # Bytes iterate as small ints: b"1" cancelled job 49 (and b"\x07" job 7).
    for given in (b"1", bytearray(b"1"), memoryview(b"1")):
        with pytest.raises(InvalidJob, match="expected job ids, Job instances or a queryset"):
            Job.objects.cancel(given, reason="bytes")
    # A Tasks-framework result's id (the job's id as text) is taken as that id.
    assert Job.objects.cancel([str(jobs[3].pk)], reason="by id") == [jobs[3].pk]
    # By keyword too, as the issue spells it: cancel(ids, reason=...).
    assert Job.objects.retry(ids=[jobs[3].pk]) == [jobs[3].pk]
    assert Job.objects.cancel(ids=[jobs[3].pk], reason="named") == [jobs[3].pk]


def test_retry_and_cancel_take_a_slice_and_refuse_rows_of_another_model() -> None:
    """A sliced queryset raised Django's "Cannot reorder a query once a slice has
    been taken"; rows of another model had their primary keys taken as job ids,
    cancelling whichever jobs had them."""
    jobs = [add.using(delay=3600).enqueue(n, n) for n in range(3)]
    first_two = Job.objects.filter(status="queued").order_by("id")[:2]
    assert Job.objects.cancel(first_two, reason="sliced") == [jobs[0].pk, jobs[1].pk]
    assert Job.objects.retry(Job.objects.cancelled().order_by("-id")[:1]) == [jobs[1].pk]
    user = User.objects.create(pk=jobs[2].pk, username="same-id")
    for given, what in (
        (user, "an instance"),
        ([user], "an instance"),
        (User.objects.all(), "a queryset"),
    ):
        for act in (Job.objects.retry, partial(Job.objects.cancel, reason="wrong")):
            with pytest.raises(InvalidJob, match=f"got {what} of auth.User: its primary keys"):
                act(given)
    assert Job.objects.get(pk=jobs[2].pk).status == "queued"


# -- 3: a queue nothing names, looked for in the job table -------------------------------


def test_looking_for_a_queues_jobs_is_bounded_and_leaves_the_callers_timeout(
    db_url: str,
) -> None:
    """The look runs in the caller's transaction here (a TestCase's, or pausequeue
    called inside one): its statement timeout must not outlive it, and a table it
    cannot read at once (locked; on a big table, read to the end) answers "no job"."""

    def timeout() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SHOW statement_timeout")
            return str(cursor.fetchone()[0])

    before = timeout()
    with psycopg.connect(db_url) as other:
        other.execute("LOCK TABLE pgqueue_job IN ACCESS EXCLUSIVE MODE")
        assert unknown_queues(["emials"], "default") == {"emials": " (did you mean 'emails'?)"}
    assert timeout() == before
    Job.objects.filter(pk=add.using(queue="emials").enqueue(1, 1).pk).update(status="done")
    assert unknown_queues(["emials"], "default") == {}  # a finished job names it
    assert timeout() == before
