"""Run one claimed job and turn what happened into an outcome to record.

The executor never raises for anything a job does: every run ends as a
:class:`Success` or a :class:`Failure` (which may be a snooze or a cancellation),
and a row that cannot be run at all (an unknown task, undecodable arguments, arguments of the wrong
shape) is a *final* failure, buried at once with the reason, without calling
anything. Whether a failed job runs again, and when, is the task's
:class:`~django_pgqueue.retrypolicy.RetryPolicy`'s to say.

While the job runs it is :func:`~django_pgqueue.control.current_job`. A run an
operator asked to stop ends ``cancelled`` if the request reached the task (it
saw ``cancel_requested``, or its coroutine was cancelled) or if it raised or
snoozed afterwards; one that finished without looking ends as it finished.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

from django_pgqueue import registry, signatures, wording
from django_pgqueue.control import CANCELLED, Cancel, RunningJob, Snooze, running
from django_pgqueue.exceptions import JobTimeout, UnknownTask
from django_pgqueue.jsonargs import Encoded, Refused, dumps_result
from django_pgqueue.records import ClaimedJob, Failure, Success
from django_pgqueue.registry import Runnable
from django_pgqueue.retrypolicy import (
    DEFAULT,
    RetryPolicy,
    policy_of,
    row_policy,
    snooze_refused,
)
from django_pgqueue.validation import storable
from django_pgqueue.worker import joblog

logger = logging.getLogger("django_pgqueue")

CANCELLED_BY_TASK = "cancelled by the task"


class UndecodableJob(Exception):
    """The row's arguments cannot be decoded; the job is buried without running."""


def class_path(exc: BaseException) -> str:
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def clean_text(text: str) -> str:
    """``text`` as PostgreSQL can store it: no NUL characters, no lone surrogates."""
    if storable(text):
        return text
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def _safe(render: Any, exc: BaseException) -> str:
    """``render(exc)`` made storable, or a placeholder when the exception cannot
    describe itself."""
    try:
        return clean_text(str(render(exc)))
    except Exception:
        return f"<{class_path(exc)} whose message could not be rendered>"


def _trace(exc: BaseException) -> str:
    return _safe(lambda e: "".join(traceback.format_exception(e)), exc)


def failure(
    job: ClaimedJob,
    exc: BaseException,
    *,
    final: bool = False,
    trace: str | None = None,
    policy: RetryPolicy = DEFAULT,
) -> Failure:
    """A failure outcome for ``job``: retried after the delay ``policy`` gives, or
    buried when it gives none (or the failure is ``final``)."""
    delay = (
        None
        if final
        else policy.after_failure(exc, job.attempt, job.max_attempts, job.backoff, job.id)
    )
    return Failure(
        job_id=job.id,
        run=job.run,
        exception=class_path(exc),
        message=_safe(str, exc),
        traceback=clean_text(trace) if trace is not None else _trace(exc),
        delay=0.0 if delay is None else delay,
        final=delay is None,
    )


def cancelled(job: ClaimedJob, reason: str, trace: str = "") -> Failure:
    """The outcome of a run that ends its job ``cancelled``, with the reason."""
    return Failure(
        job_id=job.id,
        run=job.run,
        exception=CANCELLED,
        message=clean_text(reason),
        traceback=clean_text(trace),
        delay=0.0,
        final=True,
        cancel=True,
    )


def timed_out(job: ClaimedJob, exc: JobTimeout) -> Failure:
    """The outcome of a run past the job timeout (``exc`` says how far), logged as
    any failed run is: WARNING with a retry to come, ERROR when it buries the job."""
    outcome = failure(job, exc, trace="", policy=policy_for(job))
    joblog.failed(job, outcome, exc)
    return outcome


def snoozed(job: ClaimedJob, snooze: Snooze) -> Failure:
    """Back to the queue after the snooze, or buried if it snoozed too often."""
    too_many = snooze_refused(job.snoozes, snooze)
    if too_many is not None:
        return refused(job, too_many)
    return Failure(
        job_id=job.id,
        run=job.run,
        exception=class_path(snooze),
        message=str(snooze),
        traceback="",
        delay=snooze.seconds,
        snooze=True,
    )


def policy_for(job: ClaimedJob) -> RetryPolicy:
    """The retry policy ``job``'s row keeps (given with its task or its enqueue). A
    row without one (the default policy, or a job queued before rows kept theirs),
    or with one no worker can read (written by hand: logged), takes its task's."""
    return row_policy(job.id, job.task, job.retry_policy, lambda: _declared(job.task))


def _declared(task: str) -> RetryPolicy:
    try:
        return policy_of(registry.resolve(task).target)
    except UnknownTask:
        return DEFAULT


def prepare(job: ClaimedJob) -> Runnable | Failure:
    """What running ``job`` calls, or the final failure (told and logged) of a job that
    cannot run at all: its task unknown, its arguments undecodable or of the wrong shape."""
    try:
        runnable = registry.resolve(job.task)
    except UnknownTask as exc:
        return refused(job, UnknownTask(f"{exc}{registry.gone(job.task)}"))
    if job.problem is not None:
        return _told_refused(runnable, job, UndecodableJob(job.problem))
    try:
        signatures.check_arguments(runnable.target, job.args, job.kwargs)
    except TypeError as exc:
        return _told_refused(runnable, job, exc)
    return runnable


def admit(job: ClaimedJob, control: RunningJob) -> bool:
    """As its thread takes ``job`` (not asked to stop): whether its body runs, which
    makes the run a started one. One that cannot run at all never starts: it is not
    counted or timed as a run, and :func:`execute` returns its failure. Never raises:
    it runs outside the pool's backstop, so an unexpected error here (a bug of ours,
    the Tasks report of a refusal failing) buries the job as that backstop would."""
    try:
        prepared = prepare(job)
    except BaseException as exc:
        logger.exception("job %s: unexpected error running it; burying it", job.id)
        prepared = failure(job, exc, final=True)
    control._prepared = prepared
    if isinstance(prepared, Failure):
        control._refused = True
        return False
    return True


def execute(job: ClaimedJob, control: RunningJob | None = None) -> Success | Failure:
    """Run ``job`` in this thread and return its outcome; ``control`` is the job's
    line to the worker (``current_job()`` while it runs)."""
    prepared = None if control is None else control._prepared  # set by admit()
    if prepared is None:
        prepared = prepare(job)
    if isinstance(prepared, Failure):
        return prepared
    runnable = prepared
    if control is None:  # run outside a worker's pool (tests): current_job() still works
        control = RunningJob(job)
    asked = control._begin()  # as the worker decided when the thread took the job
    if asked is not None:  # asked to stop while it waited for a thread
        return cancel_outcome(job, asked, "")
    try:
        with running(control):
            result = runnable(job)  # which checks for a transaction left open (see Invoke)
    except Cancel as exc:
        # After an operator asked the job to stop, theirs is the reason, as for
        # anything else the task raises then (the first request's reason stays, as
        # for a second cancel()); the task's own is in the entry's traceback.
        reason = control.cancel_reason or exc.reason or CANCELLED_BY_TASK
        return cancel_outcome(job, reason, _trace(exc))
    except BaseException as exc:
        # Whatever a task raises (sys.exit(), KeyboardInterrupt raised by hand:
        # real signals only reach the main thread) fails the job, not the thread;
        # after an operator asked it to stop, it ends the job cancelled.
        asked = control.cancel_reason
        if asked is not None:
            return cancel_outcome(job, asked, _trace(exc))
        if isinstance(exc, Snooze):
            return snoozed(job, exc)
        outcome = failure(job, exc, policy=policy_for(job))
        joblog.failed(job, outcome, exc)
        return outcome
    if control.stopped_by_request and control.cancel_reason is not None:
        return cancel_outcome(job, control.cancel_reason, "")  # it saw the request and returned
    return success(job, result)


def cancel_outcome(job: ClaimedJob, reason: str, trace: str = "") -> Failure:
    """``cancelled(...)``, logged: the run ends because it was asked to stop."""
    logger.info(
        "job %s (%s) cancelled on attempt %s: %s",
        *(job.id, wording.shown(job.task), job.attempt, wording.shown(reason)),
        extra=joblog.fields(job),
    )
    return cancelled(job, reason, trace)


def _told_refused(runnable: Runnable, job: ClaimedJob, exc: BaseException) -> Failure:
    """:func:`refused`, for a job of a known task: its kind hears of it first (the
    Tasks backend sends its signals), with the exception but not our frames."""
    if runnable.refuse is not None:
        runnable.refuse(runnable.target, job, exc.with_traceback(None))
    return refused(job, exc)


def refused(job: ClaimedJob, exc: BaseException) -> Failure:
    """A final failure (the job cannot succeed by retrying), logged with the exception
    but not its traceback: the frames are the queue's own, not the task's."""
    outcome = failure(job, exc, final=True, trace="")
    joblog.failed(job, outcome, exc.with_traceback(None))
    return outcome


def success(job: ClaimedJob, result: Any) -> Success | Failure:
    """A success outcome, or a final failure if the return value is not JSON."""
    if isinstance(result, Encoded):
        return Success(job_id=job.id, run=job.run, result=result.text)
    if isinstance(result, Refused):
        return refused(job, result.error)
    try:
        encoded = dumps_result(result)
    except TypeError as exc:
        # Final: running it again would repeat its side effects and return the same.
        return refused(job, exc)
    return Success(job_id=job.id, run=job.run, result=encoded)
