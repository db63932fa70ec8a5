"""Run one claimed job and turn what happened into an outcome to record.

The executor never raises for anything a job does: every run ends as a
:class:`Success` or a :class:`Failure`, and a row that cannot be run at all (an
unknown task, undecodable arguments, arguments of the wrong shape) is a *final*
failure, buried at once with the reason, without calling anything.
"""

from __future__ import annotations

import inspect
import logging
import traceback
from functools import cache
from typing import Any

from django_pgqueue import conf, registry
from django_pgqueue.backoff import retry_delay
from django_pgqueue.exceptions import InvalidJobArguments, UnknownTask
from django_pgqueue.jobdb import raise_if_transaction_left_open
from django_pgqueue.jsonargs import Encoded, dumps
from django_pgqueue.records import ClaimedJob, Failure, Success
from django_pgqueue.validation import storable
from django_pgqueue.worker import joblog

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


@cache
def _signature(func: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(func)
    except (TypeError, ValueError):
        return None


def check_arguments(target: Any, args: Any, kwargs: Any) -> None:
    """Raise TypeError if ``args``/``kwargs`` cannot be passed to ``target``'s function.

    ``target`` is a registered object: a plain callable, or one with ``.func``
    (our TaskFunction, a django.tasks Task); one whose ``takes_context`` is true
    receives a context as its first argument, which the caller does not pass.
    """
    func = getattr(target, "func", target)
    if not isinstance(args, list | tuple) or not isinstance(kwargs, dict):
        raise TypeError(
            f"malformed arguments: args must be a JSON list and kwargs a JSON "
            f"object, got {type(args).__name__} and {type(kwargs).__name__}"
        )
    signature = _signature(func)
    if signature is not None:
        try:
            leading = (None,) if getattr(target, "takes_context", False) else ()
            signature.bind(*leading, *args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"arguments do not match the task's signature: {exc}") from None


def execute(job: ClaimedJob) -> Success | Failure:
    """Run ``job`` in this thread and return its outcome."""
    if job.problem is not None:
        return refused(job, UndecodableJob(job.problem))
    try:
        runnable = registry.resolve(job.task)
    except UnknownTask as exc:
        return refused(job, exc)
    try:
        check_arguments(runnable.target, job.args, job.kwargs)
    except TypeError as exc:
        return refused(job, exc)
    try:
        result = runnable(job)
        # The invokers check this themselves (so the Tasks signals report it);
        # this is the backstop for any other kind of registered object.
        raise_if_transaction_left_open()
    except BaseException as exc:
        # Whatever a task raises (sys.exit(), KeyboardInterrupt raised by hand:
        # real signals only reach the main thread) fails the job, not the thread.
        outcome = failure(job, exc)
        joblog.failed(job, outcome, exc)
        return outcome
    return success(job, result)


def refused(job: ClaimedJob, exc: BaseException) -> Failure:
    """A final failure (the job cannot succeed by retrying), logged."""
    outcome = failure(job, exc, final=True, trace="")
    joblog.failed(job, outcome, exc)
    return outcome


def success(job: ClaimedJob, result: Any) -> Success | Failure:
    """A success outcome, or a final failure if the return value is not JSON."""
    if isinstance(result, Encoded):
        return Success(job_id=job.id, run=job.run, result=result.text)
    try:
        encoded = dumps(result, "the return value")
    except InvalidJobArguments as exc:
        return refused(job, exc)
    return Success(job_id=job.id, run=job.run, result=encoded)
