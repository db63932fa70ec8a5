"""Issue 13, the first hour of a new user: what the commands print, read from real
subprocesses (``manage.py runworker``, ``check``, ``reapjobs``, ``prunejobs``).

2 the app missing; 3 a queue nobody uses; 9 SQLite; 10 the banner and --help;
11 an idle worker's exit on SIGTERM; 12 -v 0, one format, the throughput line;
13 plurals; 14 --reload; 18 the routers deciding where jobs go. The API's side is in
tests/integration/test_first_hour.py.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.core.management import load_command_class
from django.db import connection
from django.utils import timezone

from django_pgqueue.backend.compat import TASKS_APP, InvalidTask
from django_pgqueue.installed import NOT_INSTALLED
from django_pgqueue.management.commands.runworker import VERBOSITY_HELP
from django_pgqueue.models import Job
from tests.conftest import status_counts
from tests.testapp import djtasks
from tests.testapp.tasks import add, always_fails, flaky, tracked
from tests.worker.conftest import ROOT, WorkerProcess, django_command, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
Start = Callable[..., WorkerProcess]

#: The first line of a log record in the worker's own format.
STAMPED = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) ")


def settings_module(tmp_path: Path, name: str, body: str) -> dict[str, str]:
    """A settings module ``name`` in ``tmp_path``: the tests' settings, then ``body``.
    Returns the environment that finds it."""
    (tmp_path / f"{name}.py").write_text(f"from tests.settings import *  # noqa\n{body}\n")
    return {
        "DJANGO_SETTINGS_MODULE": name,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
    }


def manage(db_url: str, *args: str, env: dict[str, str] | None = None) -> str:
    """``python -m django ARGS`` to its end; stdout and stderr together."""
    done = django_command(db_url, *args, env=env)
    return done.stdout + done.stderr


#: With no LOGGING of the project's, the worker configures logging itself.
NO_LOGGING = "LOGGING = {}"


# -- 2 -----------------------------------------------------------------------------------------


def test_the_app_missing_is_reported_by_check_and_at_enqueue(db_url: str, tmp_path: Path) -> None:
    """Nothing of django-pgqueue is imported by ``check`` when the app is missing, so
    no check of ours can run then; a Task declared on our backend fails as it is
    declared (here: by the URLconf that ``check`` loads), and enqueue says it too."""
    (tmp_path / "fh_urls.py").write_text("import tests.testapp.djtasks  # noqa\nurlpatterns = []\n")
    env = settings_module(
        tmp_path,
        "fh_no_app",
        "INSTALLED_APPS = [a for a in INSTALLED_APPS if a != 'django_pgqueue']\n"
        "ROOT_URLCONF = 'fh_urls'",
    )
    output = manage(db_url, "check", env=env)
    # Django's InvalidTask; on Django 5.2 the backport's, which some releases name
    # InvalidTaskError.
    expected = (
        f"{InvalidTask.__name__}: {NOT_INSTALLED} "
        "(django_pgqueue.E101: TASKS['default'] uses PgQueueBackend)"
    )
    assert expected in output
    script = (
        "from django_pgqueue import enqueue\n"
        "try:\n    enqueue('tests.testapp.tasks.add', [1, 2])\nexcept Exception as exc:\n"
        "    print(type(exc).__name__ + ': ' + str(exc))\n"
    )
    output = manage(db_url, "shell", "-v", "0", "-c", script, env=env)
    assert output.strip() == f"ImproperlyConfigured: {NOT_INSTALLED}"


def test_tasks_left_unset_makes_e005_say_that_no_backend_is_ours(
    db_url: str, tmp_path: Path
) -> None:
    """TASKS left out: Django's ImmediateBackend declares every task and refuses a
    queue it does not list. E005 gave Django's bare "Queue 'emails' is not valid for
    backend." and the mistake (TASKS itself) went unsaid."""
    env = settings_module(tmp_path, "fh_no_tasks", "del TASKS")
    output = manage(db_url, "check", env=env)
    (line,) = [line for line in output.splitlines() if "django_pgqueue.E005" in line]
    assert line.endswith(
        "is not valid for backend. No TASKS entry is PgQueueBackend (TASKS is not set), so "
        "another backend declares these tasks, and no worker would run them: set "
        "TASKS['default']['BACKEND'] to 'django_pgqueue.backend.PgQueueBackend' and list the "
        "queues in its QUEUES."
    ), line


def test_the_app_missing_is_reported_by_a_urlconf_that_mounts_the_metrics_view(
    db_url: str, tmp_path: Path
) -> None:
    """Django's "doesn't declare an explicit app_label" named neither the app nor the fix."""
    (tmp_path / "fh_metrics_urls.py").write_text(
        "from django.urls import include, path\n"
        'urlpatterns = [path("pgqueue/", include("django_pgqueue.urls"))]\n'
    )
    env = settings_module(
        tmp_path,
        "fh_no_app_metrics",
        "INSTALLED_APPS = [a for a in INSTALLED_APPS if a not in "
        "('django_pgqueue', 'tests.testapp', 'example_project.shop')]\n"
        "ROOT_URLCONF = 'fh_metrics_urls'",
    )
    output = manage(db_url, "check", env=env)
    assert f"ImproperlyConfigured: {NOT_INSTALLED}" in output, output
    assert "explicit app_label" not in output


# -- 3 and 10 ----------------------------------------------------------------------------------


def test_the_banner_lists_queues_and_tasks_and_a_queue_nobody_uses_is_named(db_url: str) -> None:
    waiting = add.using(queue="emails").enqueue(1, 1)
    output = manage(db_url, "runworker", "--burst", "--no-listen", "--queues", "emials")
    assert "\n[queues]\n  . emials\n[tasks] " in output
    assert (
        "\n  . tests.testapp.tasks.add  (queue default, which this worker does not serve)\n"
        in output
    )
    assert (
        "\n  . example_project.shop.tasks.send_confirmation  (queue emails, which this worker "
        "does not serve)\n"
    ) in output
    assert (
        "queue 'emials' is in no TASKS['QUEUES'], is used by no registered task and no job "
        "names it: this worker may wait for ever (did you mean 'emails'?)"
    ) in output
    assert Job.objects.get(pk=waiting.pk).status == "queued"
    # A queue only rows name is known too: no warning, and its job runs.
    fresh = add.using(queue="brand-new").enqueue(2, 2)
    output = manage(db_url, "runworker", "--burst", "--no-listen", "--queues", "brand-new")
    assert "  . brand-new\n" in output
    assert "may wait for ever" not in output
    assert Job.objects.get(pk=fresh.pk).status == "done"
    # A queue whose jobs have all finished is known too.
    output = manage(db_url, "runworker", "--burst", "--no-listen", "--queues", "brand-new")
    assert "may wait for ever" not in output
    # So is a queue only a periodic schedule enqueues to (this worker's scheduler).
    schedule = {"task": "tests.testapp.tasks.noop", "every": 3600, "queue": "cron-only"}
    env = {"PGQUEUE_TEST_PGQUEUE": json.dumps({"PERIODIC": {"hourly": schedule}})}
    output = manage(db_url, "runworker", "--burst", "--no-listen", "--queues", "cron-only", env=env)
    assert "  . cron-only\n" in output
    assert "may wait for ever" not in output


def test_the_banner_lists_a_framework_task_a_tasks_module_imports_from_another_module(
    db_url: str, tmp_path: Path
) -> None:
    """A django.tasks Task defined in another module of an app (imported into a module
    the worker imports) ran, but the banner left it out; one from outside the apps is
    not the worker's, and stays out."""
    (tmp_path / "fh_imports_tasks.py").write_text(
        "from tests.testapp.djtasks import echo  # noqa: F401\n"
        "from fh_elsewhere import stray  # noqa: F401\n"
    )
    (tmp_path / "fh_elsewhere.py").write_text(
        "from django_pgqueue.backend.compat import task\n\n@task\ndef stray() -> None:\n    pass\n"
    )
    env = settings_module(
        tmp_path, "fh_imports", 'PGQUEUE = {**PGQUEUE, "TASK_MODULES": ["fh_imports_tasks"]}'
    )
    output = manage(db_url, "runworker", "--burst", "--no-listen", env=env)
    assert "\n  . tests.testapp.djtasks.echo  (queue default)\n" in output, output
    assert "stray" not in output


def test_version_is_django_pgqueues_own(db_url: str) -> None:
    from django_pgqueue import __version__

    for command in ("runworker", "reapjobs", "queuestats"):
        assert manage(db_url, command, "--version").strip() == __version__  # not Django's


def test_help_shows_every_default_and_what_each_verbosity_prints(db_url: str) -> None:
    output = manage(db_url, "runworker", "--help")
    flat = " ".join(output.split())
    for text in (
        "(default: PGQUEUE['CONCURRENCY'], now 10)",
        "(default: PGQUEUE['LEASE'], now 30)",
        "(default: PGQUEUE['SHUTDOWN_TIMEOUT'], now 30)",
        "(default: PGQUEUE['QUEUES'], now none; none means every queue)",
        "(default: host:pid:random)",
        "For development only, never in production",
        " ".join(VERBOSITY_HELP.split()),
    ):
        assert text in flat, text
    parser = load_command_class("django_pgqueue", "runworker").create_parser("manage.py", "x")
    ours = [a for a in parser._actions if a.option_strings[0].startswith("--")]
    undocumented = [
        a.option_strings[0]
        for a in ours
        if a.dest not in {"help", "version", "settings", "pythonpath", "traceback"}
        and a.dest not in {"no_color", "force_color", "skip_checks"}
        and "default" not in (a.help or "")
    ]
    assert undocumented == []


# -- 9 -----------------------------------------------------------------------------------------


def test_sqlite_is_one_error_with_a_hint_that_says_what_to_do(db_url: str, tmp_path: Path) -> None:
    env = settings_module(
        tmp_path,
        "fh_sqlite",
        "DATABASES = {'default': {'ENGINE': 'django.db.backends.sqlite3', 'NAME': ':memory:'}}",
    )
    output = manage(db_url, "check", env=env)
    assert re.findall(r"django_pgqueue\.E\d{3}", output) == ["django_pgqueue.E002"]
    flat = " ".join(output.split())
    assert (
        "django-pgqueue needs PostgreSQL, but the database the routers pick for jobs "
        "(db_for_write), 'default', is sqlite"
    ) in flat
    assert "HINT: Use PostgreSQL for the database your application writes to" in flat
    assert "every job commits on its own, apart from your data" in flat
    # Where no check runs (shell, a script), enqueue says it too, on both APIs: it
    # was an AttributeError about prepare_threshold.
    script = (
        "from tests.testapp.tasks import add\n"
        "from tests.testapp.djtasks import noop_task\n"
        "for enqueue in (lambda: add.enqueue(1, 2), noop_task.enqueue):\n"
        "    try:\n"
        "        enqueue()\n"
        "    except Exception as exc:\n"
        "        print(type(exc).__name__, exc)\n"
    )
    said = manage(db_url, "shell", "-v", "0", "-c", script, env=env).splitlines()
    refused = (
        "ImproperlyConfigured django-pgqueue needs PostgreSQL, but database 'default' is "
        "sqlite: see manage.py check (django_pgqueue.E002)"
    )
    assert said == [refused, refused], said


def test_a_django_connection_pool_too_small_for_the_worker_is_refused_at_start(
    db_url: str, tmp_path: Path
) -> None:
    """With OPTIONS["pool"] at its default size (4), the worker hung: its threads
    keep their connections, and the completer waited 30 s at a time for one, so
    ``--burst`` never ended and jobs stayed running. A large enough pool works."""
    pool = "DATABASES['default'].setdefault('OPTIONS', {})['pool'] = %s"
    small = settings_module(tmp_path, "fh_pool_small", pool % "True")
    job = add.enqueue(2, 3)
    done = django_command(db_url, "runworker", "--burst", "--concurrency", "8", env=small)
    assert done.returncode == 1, done.stdout + done.stderr
    flat = " ".join((done.stdout + done.stderr).split())
    assert (
        "database 'default' uses Django's connection pool with at most 4 connections, and "
        "this worker may hold 14 at once: one for each of its 8 job threads (--concurrency) "
        "and 6 for its own. Set DATABASES['default']['OPTIONS']['pool'] = {'max_size': 14} "
        "(or more)"
    ) in flat
    assert Job.objects.get(pk=job.pk).status == "queued"
    big = settings_module(tmp_path, "fh_pool_big", pool % "{'min_size': 1, 'max_size': 14}")
    done = django_command(db_url, "runworker", "--burst", "--concurrency", "8", env=big)
    assert done.returncode == 0, done.stdout + done.stderr
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.result) == ("done", 5)


# -- 18 (router support) ---------------------------------------------------------------------

ROUTER = """
class JobsToRouted:
    def db_for_write(self, model, **hints):
        return "routed" if model._meta.app_label == "django_pgqueue" else None
"""

ROUTED = """
from django.db import transaction
from django.test import override_settings
from django_pgqueue import conf
from django_pgqueue.models import Job
from django_pgqueue.worker.config import WorkerConfig
from tests.testapp.djtasks import noop_task
from tests.testapp.tasks import add

print(conf.database(), WorkerConfig.from_settings().database)
with transaction.atomic():  # on "default"
    direct = add.enqueue(1, 2)
    framework = noop_task.enqueue()
    transaction.set_rollback(True)
print(sorted(Job.objects.values_list("id", flat=True)) == sorted([direct.pk, int(framework.id)]))
with override_settings(PGQUEUE={"DATABASE": "default"}), transaction.atomic():
    pinned = add.enqueue(3, 4)
    transaction.set_rollback(True)
print(Job.objects.filter(pk=pinned.pk).exists())
"""


def test_routers_decide_where_jobs_go_when_database_is_unset(db_url: str, tmp_path: Path) -> None:
    (tmp_path / "fh_router.py").write_text(ROUTER)
    env = settings_module(
        tmp_path,
        "fh_routed",
        "DATABASES['routed'] = dict(DATABASES['default'])  # the same database, its own "
        "connection\nDATABASE_ROUTERS = ['fh_router.JobsToRouted']",
    )
    output = manage(db_url, "shell", "-v", "0", "-c", ROUTED, env=env)
    # Both APIs wrote through "routed", the worker claims there, and the jobs
    # committed on their own: the rollback on "default" did not undo them (the cost
    # the docs name). An explicit PGQUEUE["DATABASE"] wins over the routers.
    assert output.split() == ["routed", "routed", "True", "False"], output


# -- 11 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("serving", [(), ("--metrics-port", "0")], ids=["plain", "metrics"])
def test_an_idle_worker_exits_within_a_fifth_of_a_second_of_sigterm(
    start_worker: Start, serving: tuple[str, ...]
) -> None:
    # Serving metrics, it took 0.52 s: stopping the server waited out a 0.5 s poll.
    took_each: list[float] = []
    while len(took_each) < 5 and not any(took < 0.2 for took in took_each):
        worker = start_worker("--worker-id", "idle", *serving)
        worker.wait_for_output("listening for new jobs")
        time.sleep(0.3)  # idle: its first polls are done, it sleeps until woken
        signalled = time.monotonic()
        worker.signal(signal.SIGTERM)
        worker.proc.wait(5)
        took = time.monotonic() - signalled
        assert worker.wait(5) == 0
        # Waiting out a poll (0.5 s) fails every try; a busy host may slow one.
        assert took < 0.45, f"exited {took:.3f}s after SIGTERM:\n{worker.output}"
        assert "send SIGTERM again to exit now (running jobs are given back first)" in (
            worker.output
        )
        took_each.append(took)
    # The target is 0.2 s; it takes about 0.06 s here. A shared CI host once took
    # 0.216 s for one exit, and a full run beside other work 0.215 s for the best
    # of three, so the target holds for the best of up to five tries.
    assert min(took_each) < 0.2, took_each


# -- 12 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("logging_setting", ["the tests' LOGGING", NO_LOGGING])
def test_verbosity_zero_prints_only_warnings_and_errors(
    db_url: str, tmp_path: Path, logging_setting: str
) -> None:
    env = settings_module(tmp_path, "fh_quiet", logging_setting if "=" in logging_setting else "")
    add.enqueue(1, 2)
    always_fails.using(max_attempts=1).enqueue("fh-quiet")
    options_with_one_attempt()
    output = manage(db_url, "runworker", "--burst", "--no-listen", "-v", "0", env=env)
    # Only the two buried jobs (ERROR, with their tracebacks): no banner, no per-job lines.
    assert output.count("buried dead after attempt 1 of 1") == 2, output
    for quiet in ("starting", "[queues]", "succeeded"):
        assert quiet not in output
    # None of Django's task-signal lines. On Django 5.2 the backport logs to
    # "django_tasks", which the tests' LOGGING leaves alone (Django's own logger
    # is "django.tasks", under "django"): Python's last-resort handler prints the
    # failed run's ERROR line there, and nothing below it.
    lines = re.findall(r"state=\w+", output)
    if TASKS_APP is not None and logging_setting != NO_LOGGING:
        assert lines == ["state=FAILED"], output
    else:
        assert lines == [], output
    assert status_counts() == {"done": 1, "dead": 2}


def test_djangos_task_lines_and_ours_share_one_timestamped_format(
    db_url: str, tmp_path: Path
) -> None:
    env = settings_module(tmp_path, "fh_format", NO_LOGGING)
    ok = djtasks.echo.enqueue(1)
    output = manage(db_url, "runworker", "--burst", "--no-listen", "-v", "2", env=env)
    records = [line for line in output.splitlines() if not line.startswith(("[", "  "))]
    assert records
    assert all(STAMPED.match(line) for line in records), output
    assert any(
        line.endswith(f"Task id={ok.id} path=tests.testapp.djtasks.echo state=RUNNING")
        for line in records
    )  # Django's own line
    assert any(
        line.endswith(f"job {ok.id} tests.testapp.djtasks.echo succeeded") for line in records
    )
    # -v 1: Django's line for a failed run, with its traceback; none for each success.
    failed = options_with_one_attempt()
    djtasks.echo.enqueue(2)
    output = manage(db_url, "runworker", "--burst", "--no-listen", env=env)
    assert f"ERROR Task id={failed} path=tests.testapp.djtasks.failing_task_value_error " in output
    assert "ValueError: This Task failed due to ValueError" in output
    assert "state=SUCCESSFUL" not in output


def options_with_one_attempt() -> str:
    from django_pgqueue.backend import options

    return options(djtasks.failing_task_value_error, max_attempts=1).enqueue().id


def test_the_throughput_line_counts_retries_and_names_long_runs(start_worker: Start) -> None:
    flaky.enqueue("fh-flaky", failures=1)
    long = tracked.enqueue("fh-long", sleep=3.0)
    worker = start_worker("--stats-interval", "0.5", "--no-listen", "--shutdown-timeout", "0")
    worker.wait_for_output("1 retried")
    line = re.compile(
        rf"throughput: \d+ jobs? in [\d.]+s \([\d.]+/s\): \d+ succeeded, \d+ retried, 0 buried; "
        rf"1 running, for over 0\.5s: job {long.pk} tests\.testapp\.tasks\.tracked \(\d s\); "
        r"claims \d+ \(avg [\d.]+ ms\), queue lag [^;]+; "
        r"totals: claimed \d+, succeeded \d+, retried 1, buried 0"
    )
    wait_for(lambda: bool(line.search(worker.output)), 10, "a line naming the long run")
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    assert "shutdown: put 1 job back in the queue" in worker.output


# -- 13 ----------------------------------------------------------------------------------------


def test_counts_are_worded_with_their_plural(db_url: str) -> None:
    job = add.enqueue(1, 1)
    Job.objects.claim("gone", lease=0.01)
    time.sleep(0.05)
    done = django_command(db_url, "reapjobs")
    assert done.stdout == "returned 1 job to the queue, buried 0\n"
    # The job's failed attempt, on stderr (no LOGGING: Python's last-resort handler).
    assert done.stderr.startswith(f"job {job.pk} ({add.path}) failed on attempt 1 of "), done.stderr
    old = timezone.now() - dt.timedelta(days=9)
    Job.objects.update(status="done", done_at=old, locked_until=None)
    assert manage(db_url, "prunejobs", "--older-than", "7d", "--dry-run") == (
        "would delete 1 job (done,dead,cancelled)\n"
    )


# -- 14 ----------------------------------------------------------------------------------------

RELOADED = """
from django_pgqueue import task


@task
def answer() -> int:
    return {answer}


@task
def slow() -> None:
    import time

    time.sleep(30)
"""


def insert_raw(task: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_job (task, args, kwargs, errors, worker_ids) "
            "VALUES (%s, '[]', '{}', '[]', '[]') RETURNING id",
            [task],
        )
        (job_id,) = cursor.fetchone()
    return int(job_id)


def rewrite(path: Path, text: str) -> None:
    """Write a file a running reloader watches in one step: ``write_text`` empties it
    first, and a worker restarting in between imported an empty module (a check's
    "no such task" where the test looks for the NameError of the whole file)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


@pytest.fixture
def start_reloading(start_worker: Start, tmp_path: Path) -> Callable[..., WorkerProcess]:
    """Start ``runworker --reload`` (polling every 0.2 s, no LISTEN) on settings whose
    ``TASK_MODULES`` is ``tasks``, a module the test writes in ``tmp_path``;
    ``scheduled``: with an hourly schedule of its ``answer``."""

    def start(tasks: str, *, scheduled: bool = False) -> WorkerProcess:
        pgqueue = f'"TASK_MODULES": ["{tasks}"]'
        if scheduled:
            pgqueue += f', "PERIODIC": {{"hourly": {{"task": "{tasks}.answer", "every": 3600}}}}'
        env = settings_module(tmp_path, "fh_reload", f"PGQUEUE = {{**PGQUEUE, {pgqueue}}}")
        args = ("--reload", "--no-listen", "--poll-interval", "0.2", "--settings=fh_reload")
        return start_worker(*args, env=env)

    return start


def test_reload_restarts_the_worker_when_code_changes(
    start_reloading: Start, tmp_path: Path
) -> None:
    module = tmp_path / "fh_reloaded_tasks.py"
    module.write_text(RELOADED.format(answer=1))
    worker = start_reloading("fh_reloaded_tasks")
    worker.wait_for_output("watching for code changes with")
    worker.wait_for_output("  . fh_reloaded_tasks.answer")
    slow = insert_raw("fh_reloaded_tasks.slow")
    wait_for(lambda: Job.objects.get(pk=slow).status == "running", 20, "the slow job to start")
    # The reloader compares each file's mtime with its last look, once a second.
    deadline = time.monotonic() + 30
    while "changed: restarting" not in worker.output:
        assert time.monotonic() < deadline, worker.output
        rewrite(module, RELOADED.format(answer=2))
        time.sleep(0.5)
    wait_for(lambda: worker.output.count("watching for code changes with") == 2, 30, "a restart")
    assert "shutdown: put 1 job back in the queue" in worker.output  # not left to its lease
    answer = insert_raw("fh_reloaded_tasks.answer")
    wait_for(lambda: Job.objects.get(pk=answer).status == "done", 20, "the new code to run")
    assert Job.objects.get(pk=answer).result == 2
    worker.signal(signal.SIGTERM)  # to the parent, which passes it on
    worker.wait_for_output("SIGTERM: finishing running jobs")  # two at once would be one
    worker.signal(signal.SIGTERM)  # the second: give the slow job back, exit now
    assert worker.wait(20) == 128 + signal.SIGTERM
    assert Job.objects.get(pk=slow).status == "queued"


MISQUEUED = """
from django_pgqueue.backend.compat import task


@task(queue_name="emials")
def answer() -> int:
    return 0
"""


def test_reload_keeps_watching_after_an_error_in_a_tasks_module(
    start_reloading: Start, tmp_path: Path
) -> None:
    """A NameError in a tasks module ended ``runworker --reload`` for good (status 1);
    runserver keeps watching, and so does the worker now: fixed, it starts."""
    module = tmp_path / "fh_broken_tasks.py"
    module.write_text(RELOADED.format(answer="undefined_name"))
    module.write_text(module.read_text() + "\nundefined_name + 1\n")  # fails on import
    worker = start_reloading("fh_broken_tasks")
    worker.wait_for_output("the worker restarts when a file changes")
    assert "NameError: name 'undefined_name' is not defined" in worker.output
    assert worker.proc.poll() is None  # still watching
    # A task on a queue TASKS does not have: refused where it is declared, the
    # module never imported, so not watched unless the worker watches it itself.
    rewrite(module, MISQUEUED)
    deadline = time.monotonic() + 30
    while worker.output.count("the worker restarts when a file changes") < 2:
        assert time.monotonic() < deadline, worker.output
        rewrite(module, MISQUEUED + f"# {time.monotonic()}\n")
        time.sleep(0.5)
    assert "did you mean 'emails'?" in worker.output
    assert worker.proc.poll() is None  # still watching
    deadline = time.monotonic() + 30
    while worker.output.count("changed: restarting") < 2:
        assert time.monotonic() < deadline, worker.output
        rewrite(module, RELOADED.format(answer=3))
        time.sleep(0.5)
    worker.wait_for_output("  . fh_broken_tasks.answer")
    answer = insert_raw("fh_broken_tasks.answer")
    wait_for(lambda: Job.objects.get(pk=answer).status == "done", 20, "the fixed code to run")
    assert Job.objects.get(pk=answer).result == 3
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0


SCHEDULED = """
from django_pgqueue.backend.compat import task


@task
def answer() -> int:
    return {answer}
"""


def test_reload_keeps_watching_after_an_error_in_a_scheduled_tasks_module(
    start_reloading: Start, tmp_path: Path
) -> None:
    """A schedule naming a Task of the module made the worker's build refuse it (E010,
    as a CommandError) before anything was watched: a typo saved in that module while
    ``runworker --reload`` ran ended it for good (status 1), fix or no fix. (A
    ``django_pgqueue.task`` above the typo is registered all the same, so the build
    finds it: the Tasks framework's are module attributes, lost with the module.)"""
    module = tmp_path / "fh_sched_tasks.py"
    module.write_text(SCHEDULED.format(answer=4))
    worker = start_reloading("fh_sched_tasks", scheduled=True)
    worker.wait_for_output("  . fh_sched_tasks.answer")
    deadline = time.monotonic() + 30
    while "the worker restarts when a file changes" not in worker.output:
        assert time.monotonic() < deadline, worker.output
        assert worker.proc.poll() is None, worker.output  # still watching
        rewrite(module, SCHEDULED.format(answer=4) + f"\nundefined_name  # {time.monotonic()}\n")
        time.sleep(0.5)
    assert "NameError: name 'undefined_name' is not defined" in worker.output
    assert "django_pgqueue.E010" in worker.output, (
        worker.output
    )  # the check's words, as without --reload
    deadline = time.monotonic() + 30
    while worker.output.count("  . fh_sched_tasks.answer") < 2:
        assert time.monotonic() < deadline, worker.output
        rewrite(module, SCHEDULED.format(answer=5) + f"# {time.monotonic()}\n")
        time.sleep(0.5)
    answer = insert_raw("fh_sched_tasks.answer")
    wait_for(lambda: Job.objects.get(pk=answer).status == "done", 20, "the fixed code to run")
    assert Job.objects.get(pk=answer).result == 5
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0


def test_reload_started_on_a_typo_in_a_scheduled_tasks_module_waits_for_the_fix(
    start_reloading: Start, tmp_path: Path
) -> None:
    """The parent ran the system checks before starting the child, so E010 for the
    schedule's task ended ``runworker --reload`` at once, where runserver (and the
    worker with no schedule on that module) shows the error and watches the files:
    the typo's own file too, a helper the tasks module imports, which a failed
    import leaves out of the modules watched."""
    helper = tmp_path / "fh_typo_helper.py"
    helper.write_text("ANSWER = undefined_name\n")
    module = tmp_path / "fh_typo_tasks.py"
    module.write_text("from fh_typo_helper import ANSWER  # noqa\n" + SCHEDULED.format(answer=6))
    worker = start_reloading("fh_typo_tasks", scheduled=True)
    worker.wait_for_output("the worker restarts when a file changes")
    assert "django_pgqueue.E010" in worker.output
    assert "NameError: name 'undefined_name' is not defined" in worker.output
    assert worker.proc.poll() is None, worker.output  # still watching
    deadline = time.monotonic() + 30
    while "  . fh_typo_tasks.answer" not in worker.output:
        assert time.monotonic() < deadline, worker.output
        rewrite(helper, f"ANSWER = 6  # {time.monotonic()}\n")
        time.sleep(0.5)
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0


def the_child_of(pid: int) -> int:
    """The pid of the process ``pid`` started (the reloading child), once it has."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    wait_for(lambda: bool(children.read_text().split()), 20, "the reloading child to start")
    return int(children.read_text().split()[0])


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc for the child")
def test_reload_stops_cleanly_on_a_sigterm_however_early(
    start_reloading: Start, tmp_path: Path
) -> None:
    """The parent passed SIGTERM on to a child that had not yet installed its handlers
    (its first second: Python, Django's setup, the checks, the worker's build), which
    it killed: status 143 and no shutdown, where a started child stops cleanly (0)."""
    (tmp_path / "fh_early_tasks.py").write_text(SCHEDULED.format(answer=7))
    for delay in (0.0, 0.0, 0.2, 0.5, 1.0):  # from the child's very start to its banner
        worker = start_reloading("fh_early_tasks")
        the_child_of(worker.proc.pid)
        time.sleep(delay)
        worker.signal(signal.SIGTERM)
        status = worker.wait(30)
        assert status == 0, f"SIGTERM {delay}s after the child started: {status}\n{worker.output}"
        assert "Traceback" not in worker.output
