"""More of issue 17's contract behind a real PgBouncer (transaction mode): the
pooler checks of ``manage.py check --database default`` beside a silenced warning,
and workers that come back by themselves when the pooler drops its connections.
The rest is in test_contract_scale_out.py (this file and that one split at 330 lines)."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest
from django.db import connection

from devtools.pgbouncer import PgBouncer
from django_pgqueue.models import Job
from django_pgqueue.records import JobSpec
from tests.cluster.conftest import pgbouncer, pooled_env
from tests.conftest import run_counts, status_counts
from tests.testapp.tasks import tracked
from tests.worker.conftest import WorkerProcess, django_command, start_worker, wait_for

__all__ = ["pgbouncer", "start_worker"]  # the fixtures, for these tests too

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Bouncer = Callable[..., PgBouncer]
Start = Callable[..., WorkerProcess]


def test_the_pooler_warnings_do_not_hang_on_an_unrelated_silenced_warning(
    pgbouncer: Bouncer, db_url: str
) -> None:
    """W001 and W002 were left out whenever another check of ours had anything to
    say, even a warning the project silenced: W004, which its hint says to silence
    where only the workers can import a tasks module (a web host, say)."""
    bouncer = pgbouncer(pool_size=2)
    env = pooled_env(
        bouncer,
        db_url,
        PREPARE=True,
        LISTEN_DATABASE=None,
        TASK_MODULES=["tests.outside.broken_import"],
    )
    # The tests' settings read SILENCED_SYSTEM_CHECKS from nowhere: a settings module.
    env["DJANGO_SETTINGS_MODULE"] = "tests.integration.silenced_w004"
    done = django_command(env["DATABASE_URL"], "check", "--database", "default", env=env)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert "django_pgqueue.W004" not in said, said  # silenced
    assert "django_pgqueue.W001" in said, said
    assert "django_pgqueue.W002" in said, said


def test_workers_come_back_by_themselves_when_the_pooler_drops_every_connection(
    pgbouncer: Bouncer, db_url: str, start_worker: Start
) -> None:
    """PgBouncer's KILL drops every client and server connection of the database (as
    a pooler restart does) mid-drain; after RESUME the same workers carry on, and a
    job runs again only after an entry in its error history."""
    bouncer = pgbouncer(pool_size=4)
    name = connection.settings_dict["NAME"]
    env = pooled_env(bouncer, db_url)
    Job.objects.enqueue_many(
        JobSpec.build(tracked, [f"kill-{i}"], {"sleep": 0.02}) for i in range(600)
    )
    workers = [
        start_worker("--concurrency", "4", "--worker-id", f"killed-{n}", env=env) for n in range(2)
    ]
    wait_for(lambda: Job.objects.filter(status="done").count() >= 100, 30, "a drain under way")
    bouncer.admin(f"KILL {name}")
    # Paused by the KILL until RESUME: nothing is recorded in between.
    assert Job.objects.filter(status="done").count() < 600, "drained before the drop"
    bouncer.admin(f"RESUME {name}")
    wait_for(lambda: status_counts() == {"done": 600}, 60, "every job, after the pooler's drop")
    for worker in workers:
        assert worker.proc.poll() is None, worker.output  # never restarted
        worker.signal(signal.SIGTERM)
    assert [worker.wait(30) for worker in workers] == [0, 0]
    runs = run_counts("kill-")
    assert set(runs) == {f"kill-{i}" for i in range(600)}
    for label, errors in Job.objects.values_list("args__0", "errors"):
        assert 1 <= runs[label] <= 1 + len(errors), (label, runs[label], errors)
    # The drop was met: by a claim under way, or seen before one (the server's goodbye).
    said = "".join(w.output for w in workers)
    assert "claim failed, retrying" in said or "was closed while idle; reconnecting" in said
    for worker in workers:
        assert "unexpected error" not in worker.output, worker.output
