"""The worker's ledger: slots, runs, leases and timeouts, without a database."""

from __future__ import annotations

import time

from django_pgqueue.records import ClaimedJob
from django_pgqueue.worker.ledger import Ledger


def job(job_id: int = 1, run: int = 1, attempt: int = 1) -> ClaimedJob:
    return ClaimedJob(
        id=job_id,
        run=run,
        task="t.t",
        args=[],
        kwargs={},
        queue="default",
        priority=0,
        attempt=attempt,
        max_attempts=3,
        concurrency_key=None,
        unique_key=None,
    )


def test_a_reclaimed_job_is_a_new_entry_the_old_run_cannot_touch() -> None:
    ledger = Ledger()
    first = job(run=1)
    ledger.add([first])
    assert ledger.start(first)
    lost = ledger.renewed(kept=set(), asked=[first.key], lease_until=0.0)  # the lease is gone
    assert lost == [first.key]
    second = job(run=2)  # the same worker claims it again
    ledger.add([second])
    assert ledger.start(second)
    assert ledger.finish(first) is None  # the old thread returns at last: dropped
    ledger.settled([first.key], succeeded=0, buried=0)  # a stale settle changes nothing
    assert ledger.lease_keys() == [(1, 2)]  # run 2's lease is still renewed
    assert ledger.finish(second) is not None
    ledger.settled([second.key], succeeded=1, buried=0)
    assert (ledger.lease_keys(), ledger.busy, ledger.succeeded) == ([], 0, 1)


def test_a_run_whose_outcome_is_being_settled_is_not_reported_lost() -> None:
    """A heartbeat between the completer's commit (the row is done: the heartbeat
    no longer keeps it) and its settle warned "lost the lease" for a recorded run."""
    ledger = Ledger()
    done = job()
    ledger.add([done])
    assert ledger.start(done)
    assert ledger.finish(done) is not None  # returned; its outcome is being written
    assert ledger.renewed(kept=set(), asked=[done.key], lease_until=0.0) == []
    ledger.settled([done.key], succeeded=1, buried=0)
    assert (ledger.lease_keys(), ledger.succeeded) == ([], 1)


def test_an_overdue_run_keeps_its_slot_and_its_lease_until_its_thread_returns() -> None:
    ledger = Ledger()
    slow = job()
    ledger.add([slow])
    assert ledger.start(slow)
    assert ledger.mark_overdue(started_before=time.monotonic() + 1) == [slow]
    assert ledger.mark_overdue(started_before=time.monotonic() + 1) == []  # marked once
    assert (ledger.busy, ledger.lease_keys()) == (1, [slow.key])
    held = ledger.finish(slow)
    assert held is not None
    assert held.overdue
    assert ledger.busy == 0
    assert ledger.lease_keys() == [slow.key]  # held until the outcome is written
    ledger.settled([slow.key], succeeded=0, buried=1)
    assert ledger.lease_keys() == []


def test_a_prefetched_job_is_not_timed_out_before_it_runs() -> None:
    ledger = Ledger()
    waiting = job()
    ledger.add([waiting])
    assert ledger.mark_overdue(started_before=time.monotonic() + 3600) == []
    assert not ledger.running_own()
    assert ledger.own_work_left()  # burst mode waits for it
    assert ledger.lease_keys() == [(1, 1)]  # and its lease is renewed while it waits
    assert ledger.start(waiting)
    assert ledger.running_own()


def test_forgotten_jobs_free_their_slots_once() -> None:
    ledger = Ledger()
    a, b = job(1), job(2)
    ledger.add([a, b])
    ledger.forget([b])  # given back at shutdown before any thread took it
    assert (ledger.busy, ledger.claimed) == (1, 1)  # b no longer counts as claimed
    assert ledger.start(b) is False
    assert ledger.busy == 1
    assert ledger.start(a)
    assert ledger.finish(a) is not None
    assert ledger.busy == 0


def test_a_run_given_back_drops_its_late_outcome() -> None:
    ledger = Ledger()
    a = job()
    ledger.add([a])
    assert ledger.start(a)
    ledger.give_back([a.key])
    assert ledger.lease_keys() == []
    assert ledger.finish(a) is None
    assert (ledger.busy, ledger.own_work_left()) == (0, False)


def test_a_prefetched_run_whose_lease_lapsed_unrenewed_is_not_started() -> None:
    """A worker paused past its lease: the heartbeat had not yet learned that the
    lease was lost when a thread took the next prefetched run (the reaper may have
    given the job to another worker). One renewed in time starts as usual."""
    ledger = Ledger(lease=10)
    late, renewed = job(1), job(2)
    ledger.add([late, renewed])
    now = time.monotonic()
    ledger.renewed(kept={renewed.key}, asked=[renewed.key], lease_until=now + 10)
    with ledger._lock:  # the claim's lease ran out 9.5 s ago: within the margin (1 s)
        ledger._held[late.key].lease_until = now + 0.5
    assert ledger.start(late) == "lapsed"
    assert (ledger.busy, ledger.claimed) == (1, 1)  # dropped, and no longer claimed
    assert ledger.lease_keys() == [renewed.key]
    assert ledger.start(renewed) not in (False, "lapsed")


def test_the_earliest_lease_end_follows_renewals() -> None:
    ledger = Ledger(lease=10)
    a, b = job(1), job(2)
    before = time.monotonic()
    ledger.add([a, b])
    end = ledger.earliest_lease_end()
    assert end is not None
    assert before + 10 <= end <= time.monotonic() + 10
    ledger.renewed(kept={a.key, b.key}, asked=[a.key], lease_until=end + 5)
    assert ledger.earliest_lease_end() == end  # b was not renewed


def test_adaptive_prefetch_runs_ahead_for_short_jobs_and_not_for_long_ones() -> None:
    from django_pgqueue.worker.prefetch import MAX_PER_THREAD, TARGET_WAIT, Prefetch

    prefetch = Prefetch(concurrency=8, fixed=None)
    assert prefetch.limit() == 0  # nothing known yet: no more than the threads
    for _ in range(50):
        prefetch.observe(0.002)
    assert prefetch.limit() == min(MAX_PER_THREAD * 8, int(8 * TARGET_WAIT / 0.002))
    for _ in range(50):
        prefetch.observe(0.0001)
    assert prefetch.limit() == MAX_PER_THREAD * 8  # ...capped for tiny ones
    for _ in range(50):
        prefetch.observe(2.0)
    assert prefetch.limit() == 0  # long jobs: nobody waits behind them
    fixed = Prefetch(concurrency=8, fixed=3)
    fixed.observe(0.001)
    assert fixed.limit() == 3


def test_a_stalled_prefetch_stops_running_ahead_until_jobs_say_otherwise() -> None:
    from django_pgqueue.worker.prefetch import Prefetch

    prefetch = Prefetch(concurrency=2, fixed=None)
    for _ in range(50):
        prefetch.observe(0.001)
    assert prefetch.limit() == 16
    prefetch.stalled(1.2)  # prefetched jobs waited 1.2 s behind long ones
    assert prefetch.limit() == 0
    prefetch.observe(3.0)  # the long job finishing keeps it there
    assert prefetch.limit() == 0
    for _ in range(80):
        prefetch.observe(0.001)  # short again: it runs ahead again
    assert prefetch.limit() == 16


def test_waiting_since_is_the_claim_of_the_oldest_prefetched_run_still_ours() -> None:
    ledger = Ledger()
    assert ledger.waiting_since() is None
    before = time.monotonic()
    first, second = job(1), job(2)
    ledger.add([first, second])
    since = ledger.waiting_since()
    assert since is not None
    assert before <= since <= time.monotonic()
    ledger.start(first)
    assert ledger.waiting_since() == since  # the second still waits
    ledger.forget([second])  # given back
    assert ledger.waiting_since() is None


def test_adaptive_prefetch_counts_the_threads_that_run_jobs_back_to_back() -> None:
    """Jobs that keep the interpreter busy run on fewer threads (the pool's width):
    the prefetch holds what those threads start within the target wait."""
    from django_pgqueue.worker.prefetch import TARGET_WAIT, Prefetch

    width = 4
    prefetch = Prefetch(concurrency=8, fixed=None, width=lambda: width)
    prefetch.observe(0.01)
    assert prefetch.limit() == int(4 * TARGET_WAIT / 0.01) == 20
    width = 1
    prefetch.observe(0.01)
    assert prefetch.limit() == int(1 * TARGET_WAIT / 0.01) == 5


def test_a_failed_give_back_keeps_only_the_runs_whose_leases_still_hold() -> None:
    """While the release was tried the heartbeat skipped them: one whose lease is
    about to lapse may be another worker's by now, so it is left to the reaper."""
    for lease, kept in ((60.0, True), (0.5, False)):
        ledger = Ledger(lease=lease)
        waiting = job()
        ledger.add([waiting])
        ledger.give_back([waiting.key])
        assert ledger.lease_keys() == []  # not renewed while it goes back
        assert ledger.take_back([waiting], margin=1.0) == ([waiting] if kept else [])
        assert (ledger.lease_keys(), ledger.busy, ledger.claimed) == (
            ([waiting.key], 1, 1) if kept else ([], 0, 0)
        )
