"""Run one claimed job and turn what happened into an outcome to record.

The executor never raises for anything a job does: every run ends as a
:class:`Success` or a :class:`Failure`, and a row that cannot be run at all (an
unknown task, undecodable arguments, arguments of the wrong shape) is a *final*
failure, buried at once with the reason, without calling anything.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

from django_pgqueue import conf, registry
from django_pgqueue.backoff import retry_delay
from django_pgqueue.exceptions import UnknownTask
from django_pgqueue.jobdb import raise_if_transaction_left_open
from django_pgqueue.jsonargs import Encoded, dumps_result
from django_pgqueue.records import ClaimedJob, Failure, Success
from django_pgqueue.validation import storable

logger = logging.getLogger("django_pgqueue")


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


def failure(
    job: ClaimedJob, exc: BaseException, *, final: bool = False, trace: str | None = None
) -> Failure:
    """A failure outcome for ``job``, with the retry delay from the backoff settings."""
    settings = conf.get()
    base = settings.BACKOFF_BASE if job.backoff is None else job.backoff
    return Failure(
        job_id=job.id,
        run=job.run,
        exception=class_path(exc),
        message=_safe(str, exc),
        traceback=clean_text(trace)
        if trace is not None
        else _safe(lambda e: "".join(traceback.format_exception(e)), exc),
        # A job's own backoff may exceed the global cap: its first delay is honoured.
        delay=retry_delay(
            job.attempt, base, max(settings.BACKOFF_MAX, base), settings.BACKOFF_JITTER
        ),
        final=final,
    )


def execute(job: ClaimedJob) -> Success | Failure:
    """Run ``job`` in this thread and return its outcome."""
    if job.problem is not None:
        logger.warning("job %s refused: %s", job.id, job.problem)
        return failure(job, UndecodableJob(job.problem), final=True, trace="")
    try:
        runnable = registry.resolve(job.task)
    except UnknownTask as exc:
        logger.warning("job %s refused: %s", job.id, exc)
        return failure(job, exc, final=True, trace="")
    try:
        registry.check_arguments(runnable.target, job.args, job.kwargs)
    except TypeError as exc:
        logger.warning("job %s refused: %s", job.id, exc)
        return failure(job, exc, final=True, trace="")
    try:
        result = runnable(job)
        # The invokers check this themselves (so the Tasks signals report it);
        # this is the backstop for any other kind of registered object.
        raise_if_transaction_left_open()
    except BaseException as exc:
        # Whatever a task raises (sys.exit(), KeyboardInterrupt raised by hand:
        # real signals only reach the main thread) fails the job, not the thread.
        logger.info(
            "job %s (%s) failed on attempt %s: %s", job.id, job.task, job.attempt, class_path(exc)
        )
        return failure(job, exc)
    return success(job, result)


def success(job: ClaimedJob, result: Any) -> Success | Failure:
    """A success outcome, or a final failure if the return value is not JSON."""
    if isinstance(result, Encoded):
        return Success(job_id=job.id, run=job.run, result=result.text)
    try:
        encoded = dumps_result(result)
    except TypeError as exc:
        # Final: running it again would repeat its side effects and return the same.
        logger.warning("job %s (%s) buried: %s", job.id, job.task, exc)
        return failure(job, exc, final=True, trace="")
    return Success(job_id=job.id, run=job.run, result=encoded)
