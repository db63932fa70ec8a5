"""The names the issues give are the contract: each interface an issue names exists
with exactly that spelling, and, where it is cheap, does what the issue says.

One test per kind of name (public API, manager operations, commands and their
flags, settings keys, periodic entry keys, metrics, the Tasks backend, make
targets, worker events), and a few that drive them against the database. The
docs' own examples that quote an output are checked against the code's output.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
import re
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command, get_commands, load_command_class
from django.core.management.base import CommandError
from django.test import override_settings

import django_pgqueue
from django_pgqueue import conf
from django_pgqueue.models import Job, JobStatus
from django_pgqueue.records import FINISHED, LIVE, RunOutcome
from django_pgqueue.worker.events import NAMES

ROOT = Path(__file__).resolve().parents[2]

# -- issue 2, 14: the public API and the manager's operations --------------------------


def test_the_public_api_has_the_names_the_issues_give() -> None:
    for name in ("task", "enqueue", "Snooze", "Cancel", "current_job"):
        assert callable(getattr(django_pgqueue, name)), name
    for name in ("InvalidJob", "InvalidJobArguments", "UnknownTask", "PgQueueError"):
        assert issubclass(getattr(django_pgqueue, name), Exception), name
    assert inspect.signature(django_pgqueue.Snooze).parameters.keys() == {"seconds"}
    assert inspect.signature(django_pgqueue.Cancel).parameters.keys() == {"reason"}
    assert django_pgqueue.current_job() is None  # outside a job
    assert django_pgqueue.Cancel("gone").reason == "gone"


def test_the_job_table_and_its_states_are_spelt_as_the_issues_spell_them() -> None:
    assert Job._meta.db_table == "pgqueue_job"
    assert [s.value for s in JobStatus] == ["queued", "running", "done", "dead", "cancelled"]
    assert set(FINISHED) == {"done", "dead", "cancelled"}
    assert set(LIVE) == {"queued", "running"}
    columns = {f.column for f in Job._meta.get_fields() if hasattr(f, "column")}
    assert {
        "id", "task", "args", "kwargs", "queue", "priority", "status", "attempts",
        "max_attempts", "run_at", "locked_until", "locked_by", "created_at", "started_at",
        "done_at", "last_error", "errors", "unique_key", "concurrency_key", "result",
    } <= columns  # fmt: skip


@pytest.mark.parametrize(
    ("operation", "keywords"),
    [
        ("enqueue", {"using"}),
        ("enqueue_many", {"using"}),
        ("claim", {"limit", "queues", "lease"}),
        ("complete", set()),
        ("fail", set()),
        ("heartbeat", {"lease"}),
        ("reap", set()),
        ("retry", set()),
        ("cancel", {"reason"}),
        ("prune", {"older_than"}),
        ("stats", set()),
        ("pause_queue", {"name"}),
        ("resume_queue", {"name"}),
    ],
)
def test_every_manager_operation_an_issue_names_exists(operation: str, keywords: set[str]) -> None:
    method = getattr(Job.objects, operation)
    assert keywords <= inspect.signature(method).parameters.keys()


def test_the_enqueue_options_of_issue_2_are_accepted_by_name() -> None:
    from tests.testapp.tasks import add

    spec_options: dict[str, Any] = {
        "queue": "emails",
        "priority": 100,
        "run_at": dt.datetime(2030, 1, 1, tzinfo=dt.UTC),
        "max_attempts": 2,
        "unique_key": "u",
        "concurrency_key": "c",
    }
    from django_pgqueue.records import JobSpec

    spec = JobSpec.build(add, [1, 2], **spec_options)
    assert (spec.queue, spec.priority, spec.max_attempts) == ("emails", 100, 2)
    assert (spec.unique_key, spec.concurrency_key) == ("u", "c")
    assert JobSpec.build(add, [1, 2], delay=60).run_at is not None


# -- issues 3, 14, 15, 16: commands and their flags -------------------------------------


COMMAND_FLAGS = {
    "runworker": [
        "--queues", "--concurrency", "--burst", "--max-jobs", "--lease", "--poll-interval",
        "--shutdown-timeout", "--worker-id", "-v", "--job-timeout", "--reload",
        "--metrics-port", "--metrics-addr",
    ],
    "reapjobs": ["--loop", "--interval"],
    "prunejobs": ["--older-than", "--status", "--dry-run"],
    "queuestats": ["--json", "--check", "--max-ready-age", "--max-dead"],
    "pausequeue": [],
    "resumequeue": [],
    "schedules": [],
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(COMMAND_FLAGS))
def test_every_command_and_flag_an_issue_names_exists(command: str) -> None:
    assert get_commands()[command] == "django_pgqueue"
    parser = load_command_class("django_pgqueue", command).create_parser("manage.py", command)
    flags = {s for action in parser._actions for s in action.option_strings}
    assert set(COMMAND_FLAGS[command]) <= flags


# -- settings keys (PGQUEUE and the TASKS OPTIONS) --------------------------------------


def test_every_settings_key_an_issue_names_exists_with_its_documented_default() -> None:
    fields = {f.name: f for f in dataclasses.fields(conf.Settings)}
    for key in (
        "DATABASE", "CHANNEL", "ASYNC_COMMIT", "PREPARE", "METRICS_PORT", "METRICS_ADDR",
        "PERIODIC", "LISTEN_DATABASE",
    ):  # fmt: skip
        assert key in fields, key
    assert fields["METRICS_ADDR"].default == "127.0.0.1"  # issue 16
    assert fields["METRICS_PORT"].default is None  # no metrics unless asked


def test_the_periodic_entry_of_issue_15_is_read_as_written() -> None:
    periodic = {
        "nightly-report": {
            "task": "tests.testapp.tasks.add",
            "cron": "0 3 * * *",
            "timezone": "Europe/Paris",
            "kwargs": {"a": 1, "b": 2},
        },
        "ping": {"task": "tests.testapp.tasks.noop", "every": 30},
        "pong": {
            "task": "tests.testapp.tasks.add",
            "every": dt.timedelta(hours=6),
            "args": [1, 2],
            "queue": "emails",
            "priority": 5,
            "max_attempts": 2,
            "enabled": False,
        },
    }
    with override_settings(PGQUEUE={"PERIODIC": periodic}):
        specs = {s.name: s for s in conf.get().schedules}
    assert (specs["nightly-report"].cron, specs["nightly-report"].timezone) == (
        "0 3 * * *",
        "Europe/Paris",
    )
    assert specs["ping"].every == 30
    assert specs["pong"].every == 6 * 3600
    assert (specs["pong"].queue, specs["pong"].priority, specs["pong"].max_attempts) == (
        "emails",
        5,
        2,
    )
    assert specs["pong"].enabled is False


# -- issue 4, 12, 14: the Tasks backend ---------------------------------------------------


def test_the_tasks_backend_has_the_names_the_issues_give() -> None:
    from django_pgqueue.backend import PgQueueBackend, call, enqueue_many, options

    backend = PgQueueBackend(
        "default", {"QUEUES": ["default"], "OPTIONS": {"MAX_ATTEMPTS": 5, "BACKOFF": 2}}
    )
    flags = ("supports_defer", "supports_priority", "supports_get_result", "supports_async_task")
    assert [getattr(backend, flag) for flag in flags] == [True, True, True, True]
    assert {
        "max_attempts", "unique_key", "concurrency_key", "backoff", "retry_on", "discard_on",
    } <= inspect.signature(options).parameters.keys()  # fmt: skip
    assert call(1, notify=True) == ((1,), {"notify": True})
    assert callable(enqueue_many)


# -- issue 16: metrics, with their labels ---------------------------------------------


def test_the_metrics_of_issue_16_have_their_names_and_labels() -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from django_pgqueue.monitoring.gauges import QueueGauges
    from django_pgqueue.monitoring.metrics import WorkerMetrics

    registry = prometheus_client.CollectorRegistry()
    WorkerMetrics(registry, slots=4)
    registry.register(QueueGauges())
    labels: dict[str, set[str]] = {}
    for family in registry.collect():
        for sample in family.samples:
            labels.setdefault(family.name, set()).update(sample.labels)
    labels |= {  # a labelled family has no sample before its first value
        m._name: set(m._labelnames)
        for m in vars(WorkerMetrics(prometheus_client.CollectorRegistry(), slots=1)).values()
        if hasattr(m, "_labelnames")
    }
    expected = {
        "pgqueue_jobs_completed": {"queue", "task", "outcome"},
        "pgqueue_job_duration_seconds": {"queue", "task"},
        "pgqueue_job_wait_seconds": {"queue"},
        "pgqueue_jobs_running": set(),
        "pgqueue_worker_slots": set(),
        "pgqueue_claims": set(),
        "pgqueue_claim_duration_seconds": set(),
        "pgqueue_lease_lost": set(),
        "pgqueue_reaped": {"result"},
    }
    for name, wanted in expected.items():
        assert wanted <= labels[name], name
    assert {v.value for v in RunOutcome} == {
        "succeeded",
        "retried",
        "dead",
        "cancelled",
        "released",
    }
    gauges = QueueGauges()
    gauges.update([], paused=())
    assert {m.name for m in gauges.collect()} >= {
        "pgqueue_queue_jobs",
        "pgqueue_queue_oldest_ready_age_seconds",
    }


# -- issue 11: the worker's events; issues 2-7, 11: make targets -----------------------


def test_the_worker_events_of_issue_11_exist_and_the_docs_list_every_one() -> None:
    assert {"claimed", "started", "finished", "heartbeat", "listening"} <= NAMES
    api = (ROOT / "docs/reference/api.md").read_text()
    section = api[api.index("## Worker events") :]
    listed = set(re.findall(r"`([a-z_]+)`", section))
    assert sorted(NAMES - listed) == []


def test_the_make_targets_the_issues_name_exist() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, re.M))
    assert {"test", "demo", "admin", "bench", "docs", "lint", "check-wheel"} <= targets


# -- the docs' quoted outputs match the code's -----------------------------------------


def test_the_settings_reference_quotes_the_unknown_key_message_as_it_starts() -> None:
    doc = (ROOT / "docs/reference/settings.md").read_text()
    quoted = re.findall(r"^(PGQUEUE has unknown key\(s\) '(\w+)'.*)$", doc, re.M)
    assert [key for _, key in quoted] == ["LEASE_SECONDS", "BACKOFF", "CONCURRENCY_KEY"]
    for line, key in quoted:
        with (
            override_settings(PGQUEUE={key: 1}),
            pytest.raises(ImproperlyConfigured) as raised,
        ):
            conf.get()
        assert str(raised.value).startswith(line.removesuffix("...")), line


# -- driven against the database --------------------------------------------------------


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_the_commands_of_issues_3_and_14_do_what_the_issues_say() -> None:
    from tests.testapp.tasks import add

    job = add.enqueue(1, 2)
    assert run("prunejobs", "--older-than", "7d", "--status", "done,dead", "--dry-run") == (
        "would delete 0 jobs (done,dead)\n"
    )
    assert run("reapjobs") == "returned 0 jobs to the queue, buried 0\n"
    assert run("pausequeue", "default") == "paused queue 'default'\n"
    assert Job.objects.paused_queues() == ["default"]
    assert "paused queues: default" in run("queuestats")
    assert run("resumequeue", "default") == "resumed queue 'default'\n"
    assert Job.objects.pause_queue("default") is True
    assert Job.objects.resume_queue("default") is True
    assert Job.objects.cancel([job.id], reason="no longer wanted") == [job.id]
    job.refresh_from_db()
    assert (job.status, job.last_error) == ("cancelled", "Cancelled: no longer wanted")
    # done_at is now(), the test transaction's start: not older than an hour (a second
    # was a bound on how long the test had run, passed on a slow machine).
    assert run("prunejobs", "--older-than", "1h", "--status", "cancelled", "--dry-run") == (
        "would delete 0 jobs (cancelled)\n"
    )
    assert '"queues"' in run("queuestats", "--json")
    assert run("queuestats", "--check", "--max-ready-age", "5m", "--max-dead", "0") == "ok\n"
    add.enqueue(3, 4)  # ready, and no worker serves its queue
    with pytest.raises(CommandError) as raised:
        run("queuestats", "--check", "--max-ready-age", "5m", "--max-dead", "0")
    assert raised.value.returncode == 1
    assert "queue default: jobs are ready" in str(raised.value)
    assert "no live worker serves it" in str(raised.value)
