"""Issue 15's promises kept by running workers (real ``runworker`` processes, or a
``Worker`` in a thread of the test): catch-up after every worker stopped, as
``catch_up`` says; settings changes applied at a restart; a six-field cron; the
command's switch obeyed by a running worker without a restart."""

from __future__ import annotations

import datetime as dt
import json
import re
import signal
from collections.abc import Callable

import pytest
from django.test import override_settings

from django_pgqueue.models import Job, Schedule
from tests.periodic.test_contract_periodic import ELSEWHERE, listing, tick_of
from tests.worker.conftest import WorkerProcess, wait_for
from tests.worker.conftest import start_worker as start_worker  # the fixture
from tests.worker.inprocess import worker_thread
from tests.worker.test_periodic import PING, periodic_env, ticks

pytestmark = pytest.mark.django_db(transaction=True)


#: Seconds every worker stays down: that many ticks of an every-second schedule missed.
OUTAGE = 4


@pytest.mark.slow
@pytest.mark.parametrize(
    ("catch_up", "enqueued"), [(None, 1), ("latest", 1), ("none", 0), ("all", None)]
)
def test_after_every_worker_stopped_catch_up_decides_how_many_missed_ticks_run(
    start_worker: Callable[..., WorkerProcess], catch_up: str | None, enqueued: int | None
) -> None:
    entry = dict(PING) if catch_up is None else {**PING, "catch_up": catch_up}
    env = periodic_env({"ping": entry})
    first = start_worker("--worker-id", "first", env=env)
    wait_for(lambda: len(ticks("ping")) >= 2, 30, "2 ticks")
    first.signal(signal.SIGTERM)
    assert first.wait(30) == 0, first.output
    last = ticks("ping")[-1]
    wait_for(
        lambda: (
            Job.objects.filter(schedule="ping").exists()
            and dt.datetime.now(dt.UTC) > last + dt.timedelta(seconds=OUTAGE + 0.5)
        ),
        30,
        f"{OUTAGE} ticks with no worker up",
    )
    second = start_worker("--worker-id", "second", env=env)
    wait_for(lambda: len([t for t in ticks("ping") if t > last]) >= 4, 30, "4 more ticks")
    second.signal(signal.SIGTERM)
    assert second.wait(30) == 0, second.output
    said = re.search(
        r"schedule ping: (\d+) ticks missed while no worker running it was up, "
        rf"catch_up='{catch_up or 'latest'}' enqueues (\d+)",
        second.output,
    )
    after = [t for t in ticks("ping") if t > last]
    # From its first on, one job a second: none doubled, none skipped.
    assert after == [after[0] + dt.timedelta(seconds=n) for n in range(len(after))]
    if enqueued is None:  # all: the missed ticks too, so none is lost
        assert after[0] == last + dt.timedelta(seconds=1)
        assert said is None or said.group(1) == said.group(2), second.output
        return
    assert said is not None, second.output
    missed = int(said.group(1))
    assert missed >= OUTAGE
    assert int(said.group(2)) == enqueued
    # The missed ticks but the last `enqueued` of them have no job.
    assert after[0] == last + dt.timedelta(seconds=missed + 1 - enqueued)


def test_settings_changes_apply_when_a_worker_restarts() -> None:
    """Added, changed and removed entries, each applied by a worker restarted with
    the new settings: a removed one stops and keeps its row and its jobs."""
    pong = {**PING, "kwargs": {"label": "pong"}}
    with (
        override_settings(PGQUEUE={"PERIODIC": {"ping": PING}}),
        worker_thread(queues=[ELSEWHERE]) as worker,
    ):
        worker.wait("scheduled", 2, timeout=15, where=lambda d: d["job_id"] is not None)
        assert worker.stop() == 0
    kept = sorted(ticks("ping"))
    assert kept
    assert ticks("pong") == []
    changed = {"ping": {**PING, "every": 2}, "pong": pong}
    with (
        override_settings(PGQUEUE={"PERIODIC": changed}),
        worker_thread(queues=[ELSEWHERE], worker_id="second") as worker,
    ):
        for name in changed:
            worker.wait("scheduled", 2, timeout=15, where=tick_of(name))
        assert worker.stop() == 0
    later = [t for t in ticks("ping") if t > kept[-1]]
    assert later
    assert all(t.second % 2 == 0 for t in later)  # every 2 s now
    assert Schedule.objects.get(pk="ping").expression == "every 2s"
    assert len(ticks("pong")) >= 2
    with override_settings(PGQUEUE={"PERIODIC": {"pong": pong}}):
        with worker_thread(queues=[ELSEWHERE], worker_id="third") as worker:
            worker.wait("scheduled", 2, timeout=15, where=lambda d: d["job_id"] is not None)
            assert worker.stop() == 0
        assert {d["schedule"] for s, d in worker.recorder.seen if s == "scheduled"} == {"pong"}
        views = {view["name"]: view for view in json.loads(listing("--json"))}
    row = Schedule.objects.get(pk="ping")
    assert (row.configured, row.ticks) == (False, len(ticks("ping")))
    assert views["ping"]["state"] == "removed"
    assert views["ping"]["next_tick"] is None
    assert views["ping"]["last_job_id"] == row.last_job_id


def test_a_six_field_cron_ticks_on_its_seconds_in_a_real_worker() -> None:
    """Six fields: seconds first, as cronsim reads them."""
    even = {"task": "tests.testapp.tasks.mark", "cron": "*/2 * * * * *", "kwargs": {"label": "e"}}
    with (
        override_settings(PGQUEUE={"PERIODIC": {"even": even}}),
        worker_thread(queues=[ELSEWHERE]) as worker,
    ):
        worker.wait("scheduled", 3, timeout=15, where=lambda d: d["job_id"] is not None)
        assert worker.stop() == 0
    found = ticks("even")
    assert len(found) >= 3
    assert found == [found[0] + dt.timedelta(seconds=2 * n) for n in range(len(found))]
    assert all(t.second % 2 == 0 and t.microsecond == 0 for t in found)


def test_a_running_worker_obeys_the_commands_switch_at_once() -> None:
    with (
        override_settings(PGQUEUE={"PERIODIC": {"ping": PING}}),
        worker_thread(queues=[ELSEWHERE]) as worker,
    ):
        worker.wait("scheduled", 1, timeout=15, where=lambda d: d["job_id"] is not None)
        assert listing("--disable", "ping") == "schedule 'ping' was disabled\n"
        off = dt.datetime.now(dt.UTC)
        # Three ticks fall while it is off: none is enqueued (nor caught up later).
        wait_for(lambda: dt.datetime.now(dt.UTC) > off + dt.timedelta(seconds=3), 10, "3 ticks")
        assert [t for t in ticks("ping") if t > off] == []
        # Read before the switch: it goes on from its next tick after the switch's
        # now(), and a whole second may fall before the command returns.
        on = dt.datetime.now(dt.UTC)
        assert listing("--enable", "ping") == "schedule 'ping' was enabled\n"
        worker.wait("scheduled", 1, timeout=15, where=lambda d: d["tick"] > on)
        assert worker.stop() == 0
    assert [t for t in ticks("ping") if off < t <= on] == []
    assert Schedule.objects.get(pk="ping").enabled
