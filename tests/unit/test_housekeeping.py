"""What a worker's own reaper spares: the runs it holds, while its heartbeat keeps up."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from django_pgqueue.worker.events import Events
from django_pgqueue.worker.housekeeping import Housekeeping
from django_pgqueue.worker.ledger import Ledger
from tests.unit.test_ledger import job


def housekeeping(lease: float = 3.0) -> tuple[Housekeeping, Ledger]:
    ledger = Ledger(lease)
    config: Any = SimpleNamespace(lease=lease, heartbeat_interval=lease / 3, reap_interval=0.1)
    return Housekeeping(config, ledger, Events(), pool=None, waker=None), ledger  # type: ignore[arg-type]


def test_the_reaper_spares_the_runs_this_worker_holds_while_its_heartbeat_keeps_up() -> None:
    keeper, ledger = housekeeping()
    running, waiting, lost = job(1), job(2), job(3)
    ledger.add([running, waiting, lost])
    assert ledger.start(running)
    ledger.renewed(kept={running.key, waiting.key}, asked=[lost.key], lease_until=0.0)
    assert sorted(keeper.spared()) == [running.key, waiting.key]  # not the lost one


def test_resumed_after_a_pause_the_reaper_spares_them_until_the_heartbeat_renews() -> None:
    keeper, ledger = housekeeping()
    ledger.add([job(1)])
    keeper._beat_at -= 60  # the process was stopped for a minute: both timers are due
    assert keeper.spared() == [(1, 1)]
    keeper._beat_at = time.monotonic()  # the heartbeat renewed the expired leases
    assert keeper.spared() == [(1, 1)]
    assert keeper._behind_since is None


def test_a_heartbeat_behind_for_a_whole_lease_no_longer_keeps_its_runs_from_the_reaper() -> None:
    keeper, ledger = housekeeping()
    ledger.add([job(1)])
    keeper._beat_at -= 60  # hung: it never renews again
    assert keeper.spared() == [(1, 1)]  # first seen behind: perhaps a pause that just ended
    assert keeper._behind_since is not None
    keeper._behind_since -= 2.9  # behind for less than the lease (3 s)
    assert keeper.spared() == [(1, 1)]
    keeper._behind_since -= 0.1
    assert keeper.spared() == []  # reaped as any other worker's would be
    keeper._beat_at = time.monotonic()  # it renews again: spared again
    assert keeper.spared() == [(1, 1)]


def test_a_second_pause_soon_after_a_first_is_spared_too() -> None:
    """Behind is measured from the beat the reaper found late: a heartbeat that beat
    since is no longer behind, though no reaper looked in between (a second pause
    before the reaper's next look) and those runs are spared again."""
    keeper, ledger = housekeeping()
    ledger.add([job(1)])
    keeper._beat_at -= 60  # a first pause: the reaper comes first, then the heartbeat
    assert keeper.spared() == [(1, 1)]
    keeper._beat_at = time.monotonic()  # renewed
    # A second pause of a minute, before the reaper's next look: as if all that the
    # process saw happened a minute earlier.
    keeper._beat_at -= 60
    assert keeper._behind_since is not None
    keeper._behind_since -= 60
    assert keeper.spared() == [(1, 1)]  # first seen behind again: spared


def test_a_spell_seen_just_before_the_process_stopped_does_not_count_the_stop() -> None:
    """The reaper found the heartbeat behind (a loaded host) just before a SIGSTOP that
    outlasted the lease: resumed, and looking before the heartbeat, it must not take
    the stop for a heartbeat a lease behind and give back the runs still running."""
    keeper, ledger = housekeeping()
    ledger.add([job(1)])
    keeper._beat_at -= 2.1  # a loaded host: behind by more than two intervals (2 s)...
    assert keeper.spared() == [(1, 1)]  # ...seen: a spell begins
    # Then the process stood still for 5 s (longer than the lease of 3 s): as if the
    # look and the last beat both happened 5 s earlier.
    assert keeper._behind_since is not None
    keeper._behind_since -= 5
    keeper._beat_at -= 5
    keeper._behind_beat = keeper._beat_at
    keeper._looked_at -= 5
    assert keeper.spared() == [(1, 1)]  # spared: the stop is not a heartbeat behind
    keeper._behind_since -= 2.9  # behind for less than a lease, this thread looking on
    keeper._looked_at = time.monotonic()
    assert keeper.spared() == [(1, 1)]
    keeper._behind_since -= 0.1
    keeper._looked_at = time.monotonic()
    assert keeper.spared() == []  # a whole lease behind while the process ran: reaped


def test_a_stop_just_past_a_short_lease_is_not_counted_either() -> None:
    """LEASE = 30 (heartbeat 10 s) with the default REAP_INTERVAL of 15 s: a look 35 s
    after the last (15 + 2 x 10) was not far enough late to count as a stop, though a
    spell seen just before a stop of 32 s then counted a whole lease: resumed, the
    reaper gave back the runs still running. One gap between looks as long as a lease
    is a stop, whatever its length beside REAP_INTERVAL."""
    ledger = Ledger(30.0)
    config: Any = SimpleNamespace(lease=30.0, heartbeat_interval=10.0, reap_interval=15.0)
    keeper = Housekeeping(config, ledger, Events(), pool=None, waker=None)  # type: ignore[arg-type]
    ledger.add([job(1)])
    keeper._beat_at -= 21  # a loaded host: behind by more than two intervals...
    keeper._behind_beat = keeper._beat_at
    assert keeper.spared() == [(1, 1)]  # ...seen: a spell begins
    assert keeper._behind_since is not None
    for stamp in ("_behind_since", "_beat_at", "_behind_beat", "_looked_at"):
        setattr(keeper, stamp, getattr(keeper, stamp) - 32)  # then stopped for 32 s
    assert keeper.spared() == [(1, 1)]  # spared: the stop is not a heartbeat behind
    # Looks every REAP_INTERVAL while the heartbeat stays stuck: a lease, then reaped.
    keeper._behind_since -= 15
    keeper._looked_at -= 15
    assert keeper.spared() == [(1, 1)]
    keeper._behind_since -= 15
    keeper._looked_at -= 15
    assert keeper.spared() == []
