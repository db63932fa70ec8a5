"""The pool's width: how many threads run jobs back to back (worker/pacing.py)."""

from __future__ import annotations

import time

from django_pgqueue.worker.pacing import PARALLEL, SAMPLES, WINDOW, Pacing


class FakeCpu:
    """The process's CPU clock, moved by the test."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> float:
        return self.seconds


def test_it_starts_at_one_thread_and_stays_there_for_jobs_that_keep_the_cpu_busy() -> None:
    pacing = Pacing(8, FakeCpu())
    assert pacing.width == 1
    for _ in range(50):
        pacing.observe(wall=0.0003, cpu=0.00028, now=time.monotonic())
    assert pacing.width == 1


def test_jobs_that_wait_get_as_many_threads_as_fit_in_one_run() -> None:
    pacing = Pacing(8, FakeCpu())
    pacing.observe(wall=0.010, cpu=0.002, now=time.monotonic())  # 2 ms of work in 10 ms
    assert pacing.width == 5
    for _ in range(SAMPLES):
        pacing.observe(wall=0.010, cpu=0.0001, now=time.monotonic())  # mostly waiting
    assert pacing.width == 8  # no more than the pool has


def test_runs_slowed_by_taking_turns_do_not_widen_it() -> None:
    """Threads taking turns at the GIL only add wall time: the least contended
    runs say what the jobs need, so a minority of slow ones changes nothing."""
    pacing = Pacing(8, FakeCpu())
    for n in range(SAMPLES):
        slowed = n % 2 == 0  # half the runs waited for the GIL
        pacing.observe(wall=0.0024 if slowed else 0.0003, cpu=0.0003, now=time.monotonic())
    assert pacing.width == 1


def test_jobs_that_run_outside_the_gil_get_every_thread() -> None:
    cpu = FakeCpu()
    pacing = Pacing(4, cpu)
    start = time.monotonic()
    pacing.observe(wall=0.004, cpu=0.004, now=start)
    assert pacing.width == 1
    cpu.seconds += (PARALLEL + 0.2) * WINDOW  # more CPUs than the GIL allows
    pacing.observe(wall=0.004, cpu=0.004, now=start + WINDOW + 0.001)
    assert pacing.width == 4
    cpu.seconds += 0.5 * WINDOW  # back to less than one
    pacing.observe(wall=0.004, cpu=0.004, now=start + 2 * WINDOW + 0.002)
    assert pacing.width == 1


def test_a_pool_of_one_is_one() -> None:
    pacing = Pacing(1, FakeCpu())
    pacing.observe(wall=1.0, cpu=0.0, now=time.monotonic())  # no CPU at all: a finite ratio
    assert pacing.width == 1
