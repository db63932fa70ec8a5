"""The worker's own threads, and the guard that keeps each one honest.

Every long-lived thread of a worker (completer, heartbeat, maintenance,
listener) is a :class:`ServiceThread`: one loop guard that retries what a
database outage causes, ends the worker for a schema older than the code, and
logs anything else with its traceback. A *critical* thread (the heartbeat and
the completer, without which leases lapse or outcomes are lost) then stops the
worker, which gives its jobs back and exits non-zero for its supervisor to
restart it; any other is restarted after a pause. No thread can die silently
while the process looks alive.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from django.db import connections

from django_pgqueue import wording
from django_pgqueue.dberrors import first_line, is_transient, schema_problem
from django_pgqueue.sql import runner
from django_pgqueue.worker.repeats import RepeatedFailure

logger = logging.getLogger("django_pgqueue")


def bookkeeping_thread(on: bool = True) -> None:
    """Mark (or unmark) this thread as one of the worker's own: with
    ``ASYNC_COMMIT``, its bookkeeping statements commit without waiting for the
    WAL flush (transaction-local, see queries.sql). Job threads are never marked."""
    runner.bookkeeping(on)


def reset_connection(alias: str) -> None:
    """Drop this thread's connection after an error, so the next call reconnects. One
    the server closed is a lost connection for the worker (:class:`ConnectionEpoch`),
    whichever statement met it: a give-back's that failed keeps its runs to start."""
    conn = connections[alias]
    runner.count_if_hung_up(conn.connection)
    try:
        conn.close()
    except Exception:  # the socket is already gone: nothing to close cleanly
        logger.debug("closing a broken connection failed", exc_info=True)


class Pool(Protocol):
    def start(self) -> None: ...
    def stop(self, timeout: float = 0.0) -> None: ...


def start_threads(threads: Iterable[ServiceThread | None], pool: Pool) -> bool:
    """Start ``threads``, then the job ``pool``'s; False (logged) if one could not
    start (``can't start new thread``: a limit on processes or threads, or memory),
    once those already started are stopped. Nothing is claimed yet: nothing to give back."""
    started: list[ServiceThread] = []
    what = "job threads"
    try:
        for thread in filter(None, threads):
            what = f"thread {thread.name}"
            thread.start()
            started.append(thread)
        what = "job threads"
        pool.start()
    except Exception as exc:
        logger.error(
            "could not start the worker's %s: %s: %s (a limit on processes or threads, "
            "or memory?); stopping",
            *(what, type(exc).__name__, first_line(exc)),
        )
        pool.stop(timeout=1.0)  # the job threads that started exit
        for thread in started:
            thread.stop()
        for thread in started:
            thread.join(2.0)
        return False
    return True


def claim_failed(exc: Exception, alias: str, supervision: Supervision) -> bool:
    """Log a claim that failed with ``exc``; False when the worker must stop (the
    tables missing or out of date: ``supervision.fatal`` is told). Any error but the
    schema's or a lost connection's is a bug of ours: raised again."""
    problem = schema_problem(exc, alias)
    if problem:
        supervision.fatal(problem)
        return False
    reset_connection(alias)
    if is_transient(exc):
        supervision.epoch.bump()
        logger.warning("claim failed, retrying: %s", first_line(exc))
        return True
    raise exc


class ConnectionEpoch:
    """Counts the worker's lost connections, so job threads know theirs may be stale.

    After the server restarts, every pooled connection is dead, and the first
    query of each would fail the job that happens to run next. The worker's own
    threads notice first (they query all the time, and find a connection closed
    while idle before a statement) and bump the epoch; a job thread that sees a new
    epoch drops its connections before the job starts. A run claimed in an older
    epoch is not started until a heartbeat finds it still ours (ledger.py): the
    server may have crashed and lost the claim's commit (``ASYNC_COMMIT``).
    """

    def __init__(self) -> None:
        self._bumps = 0

    @property
    def value(self) -> int:
        return self._bumps + runner.hangups()

    def bump(self) -> None:
        self._bumps += 1  # one writer at a time matters little: any change is seen


class Backoff:
    """Doubling sleep for retrying a database call, interruptible by ``stop``."""

    def __init__(self, first: float = 0.2, cap: float = 5.0) -> None:
        self.first = self.delay = first
        self.cap = cap

    def reset(self) -> None:
        self.delay = self.first

    def sleep(self, stop: threading.Event) -> None:
        stop.wait(self.delay)
        self.delay = min(self.cap, self.delay * 2)


@dataclasses.dataclass(frozen=True)
class Supervision:
    """What a service thread reports to its worker."""

    fatal: Callable[[str], None]  # stop the worker: the reason
    epoch: ConnectionEpoch


class ServiceThread(threading.Thread):
    """A supervised worker thread. Subclasses implement :meth:`step`, one unit of
    work that returns the seconds to wait before the next; :meth:`stop` ends it.

    The thread is marked for ``ASYNC_COMMIT`` and closes its own connections on
    exit, which no other thread can close.
    """

    #: A critical thread's unexpected error stops the worker; any other restarts.
    critical = False

    def __init__(self, alias: str, name: str, supervision: Supervision) -> None:
        super().__init__(name=name, daemon=True)
        self.alias = alias
        self.supervision = supervision
        self._halt = threading.Event()
        self._wake = threading.Event()  # ends the pause between steps early
        #: monotonic time of the last step that returned normally, while nothing
        #: it does is failing (liveness, for /healthz).
        self.last_ok = time.monotonic()
        self.repeats = RepeatedFailure()  # an outage is said every 5 s, not each retry

    def stop(self) -> None:
        self._halt.set()
        self._wake.set()

    def poke(self) -> None:
        """Run the next step now rather than after the pause (any thread)."""
        self._wake.set()

    @property
    def stopped(self) -> bool:
        return self._halt.is_set()

    def step(self) -> float:
        raise NotImplementedError

    def failing(self) -> bool:
        """Whether a step that returned leaves work failing (which keeps ``last_ok``)."""
        return False

    def run(self) -> None:
        backoff = Backoff()
        try:
            bookkeeping_thread()
            while not self._halt.is_set():
                try:
                    pause = self.step()
                except Exception as exc:
                    if not self._survive(exc):
                        return
                    backoff.sleep(self._halt)
                    continue
                backoff.reset()
                if not self.failing():
                    self.last_ok = time.monotonic()
                    self.repeats.clear()
                if pause > 0:
                    self._wake.wait(pause)
                self._wake.clear()
        except BaseException:  # even the guard failed: never die without a word
            logger.exception("%s: the thread failed outside its loop", self.name)
            self.supervision.fatal(f"the {self.name} thread failed")
        finally:
            connections.close_all()

    def _survive(self, exc: Exception) -> bool:
        """Log ``exc`` and say whether the loop goes on."""
        problem = schema_problem(exc, self.alias)
        if problem:
            self.supervision.fatal(problem)
            return False
        if is_transient(exc):
            line = first_line(exc)
            held = self.repeats.held_back(line)
            if held is not None:
                since = f" (failed {wording.count(held, 'more time')} since the last line)"
                logger.warning("%s: %s; retrying%s", self.name, line, since if held else "")
            reset_connection(self.alias)
            self.supervision.epoch.bump()
            return True
        logger.exception("%s: unexpected error", self.name)
        reset_connection(self.alias)
        if self.critical:
            self.supervision.fatal(
                f"the {self.name} thread failed: {type(exc).__name__}: {first_line(exc)}"
            )
            return False
        logger.warning("%s: restarting", self.name)
        return True


@dataclasses.dataclass(frozen=True, slots=True)
class RunAgainIn:
    """What a timer's action returns to run again sooner than its interval.

    A type of its own, not a bare float: an action that returned a count by
    mistake would otherwise be read as seconds (mypy takes an int for a float).
    """

    seconds: float


@dataclasses.dataclass
class Timer:
    """One periodic action of a :class:`Timers` thread."""

    name: str
    interval: float
    #: Returns None, or :class:`RunAgainIn` (capped at the interval).
    action: Callable[[], RunAgainIn | None]
    due: float = 0.0  # monotonic time of the next run; 0 runs it at start
    #: Run at the next step, whatever ``due`` says (set by ``Timers.hurry``).
    urgent: bool = False


class Timers(ServiceThread):
    """Runs each timer's action when it is due.

    One failing action does not delay the others: its error goes through the
    thread's guard, and it is tried again after a short pause while the rest
    keep their schedule.
    """

    def __init__(
        self,
        alias: str,
        timers: list[Timer],
        supervision: Supervision,
        *,
        name: str,
        critical: bool = False,
    ) -> None:
        super().__init__(alias, name, supervision)
        self.timers = timers
        self.critical = critical
        #: Timers whose last run raised: until they succeed again, the steps in
        #: between (nothing due) do not count as the thread being well.
        self._failed: set[str] = set()

    def failing(self) -> bool:
        return bool(self._failed)

    def hurry(self, name: str) -> None:
        """Run timer ``name`` now, ahead of its schedule (any thread)."""
        for timer in self.timers:
            if timer.name == name:
                timer.urgent = True
        self.poke()

    def step(self) -> float:
        now = time.monotonic()
        for timer in self.timers:
            if timer.due <= now or timer.urgent:
                # A hurry that comes while the action runs calls for another run.
                timer.urgent = False
                # Before the action: a failing one is retried in a second, not at once.
                timer.due = now + min(timer.interval, 1.0)
                try:
                    sooner = timer.action()
                except BaseException:
                    self._failed.add(timer.name)
                    raise
                self._failed.discard(timer.name)
                timer.due = now + (
                    timer.interval if sooner is None else min(sooner.seconds, timer.interval)
                )
        if any(timer.urgent for timer in self.timers):
            return 0.0
        return max(0.01, min(t.due for t in self.timers) - time.monotonic())
