"""The job pool's threads (worker/pool.py), with real threads and no database.

The jobs are built by hand and name tasks registered here; the pool runs them
through the real executor and reports each outcome.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django_pgqueue import task
from django_pgqueue.control import RunningJob
from django_pgqueue.records import ClaimedJob, Outcome, Success
from django_pgqueue.worker.pacing import HANDOFF, Pacing
from django_pgqueue.worker.pool import JobPool
from django_pgqueue.worker.services import ConnectionEpoch

_ids = itertools.count(1)
_running_lock = threading.Lock()
_running = 0
_most_at_once = 0
_threads_used: collections.Counter[int] = collections.Counter()
_gates: dict[str, threading.Event] = {}
_barriers: dict[str, threading.Barrier] = {}


@contextmanager
def _counted() -> Iterator[None]:
    global _running, _most_at_once
    with _running_lock:
        _running += 1
        _most_at_once = max(_most_at_once, _running)
        _threads_used[threading.get_ident()] += 1
    try:
        yield
    finally:
        with _running_lock:
            _running -= 1


@task
def spin(seconds: float) -> None:
    """Keep the interpreter busy (no I/O) for ``seconds``."""
    with _counted():
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass


@task
def meet(name: str) -> None:
    """Wait at barrier ``name`` (its parties all running at once), then return."""
    with _counted():
        _barriers[name].wait(timeout=10)


@task
def wait_for(name: str) -> None:
    with _counted():
        assert _gates[name].wait(timeout=10)


@task
def say_then_wait_for(name: str) -> None:
    """Tell the test it started (gate ``name-started``), then wait for gate ``name``."""
    with _counted():
        _gates[f"{name}-started"].set()
        assert _gates[name].wait(timeout=10)


def job(func: object, *args: object) -> ClaimedJob:
    return ClaimedJob(
        id=next(_ids),
        run=1,
        task=func.path,  # type: ignore[attr-defined]
        args=list(args),
        kwargs={},
        queue="default",
        priority=0,
        attempt=1,
        max_attempts=1,
        concurrency_key=None,
        unique_key=None,
    )


class Pool:
    """A started JobPool and what it reported."""

    def __init__(self, size: int, handoff: float = HANDOFF) -> None:
        global _most_at_once
        _most_at_once = 0
        _threads_used.clear()
        self.outcomes: dict[int, Outcome] = {}
        self._done = threading.Condition()
        pacing = Pacing(size, handoff=handoff)
        self.pool = JobPool(size, RunningJob, self._on_done, ConnectionEpoch(), pacing)
        self.pool.start()

    def _on_done(self, claimed: ClaimedJob, outcome: Outcome) -> None:
        with self._done:
            self.outcomes[claimed.id] = outcome
            self._done.notify_all()

    def run(self, jobs: list[ClaimedJob], timeout: float = 20.0) -> None:
        """Submit ``jobs`` and wait until each has an outcome, all of them successes."""
        self.pool.submit(jobs)
        self.wait_done([j.id for j in jobs], timeout)

    def wait_done(self, ids: list[int], timeout: float = 20.0) -> None:
        with self._done:
            assert self._done.wait_for(lambda: all(i in self.outcomes for i in ids), timeout), (
                f"{sum(i in self.outcomes for i in ids)} of {len(ids)} jobs finished"
            )
            failed = [self.outcomes[i] for i in ids if not isinstance(self.outcomes[i], Success)]
        assert not failed, failed

    def stop(self) -> None:
        self.pool.stop(timeout=5)


def test_jobs_that_wait_for_each_other_all_run_at_once() -> None:
    """The pool starts at a width of one: a job that blocks hands the next one to
    another thread, so four jobs that meet at a barrier all get a thread."""
    _barriers["four"] = threading.Barrier(4)
    pool = Pool(4)
    try:
        pool.run([job(meet, "four") for _ in range(4)])
    finally:
        pool.stop()
    assert _most_at_once == 4


def test_never_more_jobs_at_once_than_threads() -> None:
    _barriers["three"] = threading.Barrier(3)
    pool = Pool(3)
    try:
        pool.run([job(meet, "three") for _ in range(9)])  # three groups of three
    finally:
        pool.stop()
    assert _most_at_once == 3


def test_short_busy_jobs_run_back_to_back_on_one_thread() -> None:
    """Eight threads taking turns at the GIL would only add switches: jobs that
    keep the interpreter busy run on one hot thread. (With a long handoff: on a
    busy machine a job may stall past the usual 2 ms, and another thread would
    rightly take the next one.)"""
    pool = Pool(8, handoff=0.25)
    try:
        pool.run([job(spin, 0.0002) for _ in range(300)])
        assert pool.pool.pacing.width == 1
    finally:
        pool.stop()
    assert _threads_used.most_common(1)[0][1] >= 295, _threads_used  # the old pool: ~40 each


def test_a_blocked_job_does_not_hold_up_the_jobs_behind_it() -> None:
    pool = Pool(2)
    try:
        pool.run([job(spin, 0.0002) for _ in range(40)])
        assert pool.pool.pacing.width == 1
        _gates["stuck"] = threading.Event()
        stuck = job(wait_for, "stuck")
        behind = [job(spin, 0.0002) for _ in range(20)]
        pool.pool.submit([stuck, *behind])
        pool.wait_done([j.id for j in behind])  # while the first still waits
        assert stuck.id not in pool.outcomes
        _gates["stuck"].set()
        pool.wait_done([stuck.id])
    finally:
        pool.stop()


def test_a_job_submitted_while_the_only_hot_thread_starts_a_slow_one_is_watched() -> None:
    """The width was full (one hot thread, its job just started) when the next job
    came: no idle thread was woken, none watched, and the job waited behind the
    slow one to its end. An idle thread now watches and takes it once the slow
    job is past the handoff."""
    _gates["slow"], _gates["slow-started"] = threading.Event(), threading.Event()
    pool = Pool(2, handoff=1.0)  # a wide window to submit in while the slow job is hot
    try:
        assert pool.pool.pacing.width == 1
        slow = job(say_then_wait_for, "slow")
        pool.pool.submit([slow])
        assert _gates["slow-started"].wait(5)
        behind = job(spin, 0.0001)
        pool.pool.submit([behind])
        pool.wait_done([behind.id], timeout=5)  # while the slow job still waits
        assert slow.id not in pool.outcomes
        _gates["slow"].set()
        pool.wait_done([slow.id])
    finally:
        _gates["slow"].set()
        pool.stop()


def test_stop_returns_with_no_job_left_and_idle_threads_gone() -> None:
    pool = Pool(4)
    pool.run([job(spin, 0.0001) for _ in range(10)])
    assert pool.pool.take_waiting() == []
    pool.stop()
    assert not any(t.is_alive() for t in pool.pool._threads)


def test_a_closed_pool_returns_the_waiting_jobs_and_refuses_more() -> None:
    """At a shutdown the pool hands back the jobs no thread started, and refuses those
    submitted after (a heartbeat confirming runs held back): they are given back."""
    _gates["busy"], _gates["busy-started"] = threading.Event(), threading.Event()
    pool = Pool(1)
    try:
        busy = job(say_then_wait_for, "busy")
        waiting = job(spin, 0.0001)
        assert pool.pool.submit([busy, waiting]) == []
        assert _gates["busy-started"].wait(5)
        assert pool.pool.close() == [waiting]
        late = job(spin, 0.0001)
        assert pool.pool.submit([late]) == [late]
        _gates["busy"].set()
        pool.wait_done([busy.id])
        pool.stop()
        assert set(pool.outcomes) == {busy.id}  # neither the waiting job nor the late one ran
        assert pool.pool.take_waiting() == []
    finally:
        _gates["busy"].set()
        pool.stop()
