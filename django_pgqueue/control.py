"""Task code steering its own job, and the job's line to the worker that runs it.

- ``raise Snooze(seconds)``: run again later, the attempt not spent;
- ``raise Cancel(reason)``: give up for good, the job ends ``cancelled``;
- ``current_job()``: the :class:`RunningJob` this code runs in, whose
  ``cancel_requested`` turns true once an operator asked the job to stop
  (``Job.objects.cancel``) and the worker heard of it (at its next heartbeat, or
  at once when a NOTIFY wakes it).

The worker's executor makes the job current (a context variable, so that an
``async def`` task sees it too) and runs coroutines with :func:`run_coroutine`,
which lets an abort cancel the coroutine: ``asyncio.CancelledError`` is raised
at its next ``await``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import inspect
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync

from django_pgqueue import validation
from django_pgqueue.exceptions import JobTimeout

if TYPE_CHECKING:
    from django_pgqueue.records import ClaimedJob

#: The exception name a cancellation has in the error history (queries.sql writes it
#: too): "Cancelled: <reason>" is the job's last_error.
CANCELLED = "Cancelled"


class Snooze(Exception):
    """Raised by a task to be run again later: ``raise django_pgqueue.Snooze(60)``.

    The job goes back to ``queued`` with ``run_at`` moved ``seconds`` ahead (a
    number or a ``timedelta``, up to ten years); the attempt is not spent and no
    failure is recorded. A job snoozed more than ``PGQUEUE["MAX_SNOOZES"]``
    times is buried instead (``TooManySnoozes``). A bad ``seconds`` raises
    :class:`~django_pgqueue.exceptions.InvalidJob` here, where the mistake is.
    """

    #: Also when a subclass's ``__init__`` does not call this one's: at once.
    seconds: float = 0.0

    def __init__(self, seconds: float | dt.timedelta = 0.0) -> None:
        self.seconds = validation.DELAY(seconds, "Snooze seconds")
        super().__init__(self.seconds)

    def __str__(self) -> str:
        return f"snoozed for {self.seconds:g}s"


class Cancel(Exception):
    """Raised by a task to give up for good: ``raise django_pgqueue.Cancel("order gone")``.

    The job ends ``cancelled`` at once with the reason, whatever attempts are
    left and whatever its retry policy says; without one, "cancelled by the task".
    Raised after an operator asked the job to stop (``cancel_requested`` is true),
    it ends the job with the operator's reason, as anything a task raises or
    returns then does; its own reason is kept in the traceback of the job's entry.
    """

    #: Also when a subclass's ``__init__`` does not call this one's.
    reason: str | None = None

    def __init__(self, reason: object = None) -> None:
        # Any reason is taken as its text (``Cancel(42)``): the task meant to give up.
        self.reason = None if reason is None else str(reason)
        super().__init__(*(() if self.reason is None else (self.reason,)))


class RunningJob:
    """The job the current code runs in; see :func:`current_job`.

    ``id``, ``task``, ``queue``, ``attempt`` and ``max_attempts`` describe the
    run. ``cancel_requested`` is true from the moment the worker learns that
    an operator asked the job to stop. A task that sees it true and then
    returns (or raises) has stopped because of the request: its run ends
    ``cancelled`` with the operator's reason, and what it returned is
    discarded. One that never looks, and finishes, ends as it finished.
    """

    __slots__ = (
        "_aio",
        "_deadline",
        "_decided",
        "_late",
        "_lock",
        "_prepared",
        "_reason",
        "_refused",
        "_seen",
        "_skip",
        "_verdict",
        "attempt",
        "id",
        "max_attempts",
        "queue",
        "run",
        "task",
    )

    def __init__(self, job: ClaimedJob) -> None:
        self.id = job.id
        self.run = job.run
        self.task = job.task
        self.queue = job.queue
        self.attempt = job.attempt
        self.max_attempts = job.max_attempts
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._seen = False
        #: (loop, task) of the coroutine running this job, while it runs.
        self._aio: tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]] | None = None
        #: (started, timeout): monotonic start of its thread, and the job timeout.
        self._deadline: tuple[float, float] | None = None
        #: Whether the run is past the job timeout: None until decided, then fixed.
        self._verdict: bool | None = None
        self._late: JobTimeout | None = None
        #: Whether the body runs, decided once (:meth:`_begin`): the reason it does not.
        self._decided = False
        self._skip: str | None = None
        #: What the executor runs, as the worker found it when the thread took the job
        #: (a registered task), or the failure of a job that cannot run at all
        #: (``_refused``); None until then (see the executor's ``admit``).
        self._prepared: Any = None
        self._refused = False

    def __repr__(self) -> str:
        return f"<RunningJob {self.id} {self.task} attempt {self.attempt}>"

    @property
    def cancel_requested(self) -> bool:
        """True once an operator asked this job to stop (and the worker heard of it)."""
        if self._reason is None:
            return False
        self._seen = True
        return True

    @property
    def cancel_reason(self) -> str | None:
        """The reason the operator gave, once ``cancel_requested`` is true."""
        return self._reason

    # -- the worker's side ------------------------------------------------------------

    @property
    def stopped_by_request(self) -> bool:
        """Whether the request reached the task: it read ``cancel_requested`` as
        true, or its coroutine was cancelled."""
        return self._seen

    # The job timeout. Whether a run is past it is decided once, by whichever comes
    # first: its thread's return (the Tasks layer asks before task_finished, then
    # the worker for the outcome it records), or the worker's timer seeing it still
    # running past the timeout. The signal, the warning, the shutdown and the row
    # then all agree. Private: a task asking first would decide for its own run.

    def _begin(self) -> str | None:
        """Decide, once, whether the body runs: the reason it does not (an operator
        asked the job to stop before a thread started it), or None. The worker asks as
        its thread takes the job, then the executor: a request landing in between
        reaches the running task instead, so a run counted as started is one whose
        body runs, and one ended unstarted is never timed as a run."""
        if not self._decided:
            self._decided, self._skip = True, self._reason
        return self._skip

    @property
    def _ran(self) -> bool:
        """Whether its body ran (or runs): started, not ended before it began, and
        not a job that cannot run at all (its task unknown, its arguments unfit)."""
        return self._decided and self._skip is None and not self._refused

    def _start(self, started: float, timeout: float | None) -> None:
        """Its thread started at ``started`` (monotonic), under the job timeout."""
        self._deadline = None if timeout is None else (started, timeout)

    def _overran(self) -> JobTimeout | None:
        """As its thread returns: a :class:`JobTimeout` if the run is past the job
        timeout (decided now, or by the timer before), else None."""
        if self._deadline is None:  # no job timeout (and so no timer): never late
            return None
        with self._lock:
            if self._verdict is None:
                self._verdict = self._past()
            if self._verdict and self._late is None:
                started, timeout = self._deadline
                self._late = JobTimeout(
                    f"job ran {time.monotonic() - started:.1f}s, past the worker's job timeout "
                    f"of {timeout:g}s; what it returned is discarded"
                )
            return self._late

    def _late_now(self) -> bool:
        """The timer saw the run still going past the job timeout: late, unless its
        thread has returned in time already (a slow receiver keeps it busy)."""
        with self._lock:
            if self._verdict is None:
                self._verdict = True
            return self._verdict

    def _past(self) -> bool:
        if self._deadline is None:
            return False
        started, timeout = self._deadline
        return time.monotonic() - started > timeout

    def request_cancel(self, reason: str) -> bool:
        """Tell the job to stop (called by the worker's heartbeat); False if it was told."""
        with self._lock:
            if self._reason is not None:
                return False
            self._reason = reason
            if self._aio is not None:
                loop, future = self._aio
                with contextlib.suppress(RuntimeError):  # the loop closed: nothing to cancel
                    loop.call_soon_threadsafe(self._cancel, future)
        return True

    def _cancel(self, future: asyncio.Future[Any]) -> None:
        # On the coroutine's loop: a task that already finished cannot be told.
        if future.cancel():
            self._seen = True

    def _attach(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any]) -> None:
        with self._lock:
            self._aio = (loop, future)
            if self._reason is not None:
                self._cancel(future)

    def _detach(self) -> None:
        with self._lock:
            self._aio = None


_current: ContextVar[RunningJob | None] = ContextVar("pgqueue_current_job", default=None)


def overran(job: RunningJob | None) -> JobTimeout | None:
    """``job``'s JobTimeout if it returned past the job timeout, as its kind's signal
    reports it (:meth:`RunningJob._overran`); None outside a worker."""
    return None if job is None else job._overran()


def current_job() -> RunningJob | None:
    """The job this code runs in (``cancel_requested``, ``id``, ``attempt``, ...),
    or None outside a job run by a django-pgqueue worker (a task called directly)."""
    return _current.get()


@contextlib.contextmanager
def running(job: RunningJob | None) -> Iterator[None]:
    """Make ``job`` current while the executor runs it."""
    token = _current.set(job)
    try:
        yield
    finally:
        _current.reset(token)


#: ``inspect.iscoroutinefunction``, asked once per task function, not once per job:
#: both invokers ask it to choose between a call and :func:`run_coroutine`.
is_coroutine_function = functools.cache(inspect.iscoroutinefunction)


def run_coroutine(func: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """Run the coroutine function ``func`` to completion from this (job) thread.

    Through asgiref's ``async_to_sync``, as Django runs an async task, so that
    ``sync_to_async`` calls inside it use this thread's database connections;
    the coroutine runs as a task of its own that an abort of the current job
    cancels.
    """
    job = current_job()

    async def cancellable() -> Any:
        inner = asyncio.ensure_future(func(*args, **kwargs))
        if job is not None:
            job._attach(asyncio.get_running_loop(), inner)
        try:
            return await inner
        finally:
            if job is not None:
                job._detach()

    return async_to_sync(cancellable)()
