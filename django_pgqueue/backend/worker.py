"""How a django-pgqueue worker runs a Tasks-framework Task.

:func:`register_task_kind` (called from the app's ``ready()``) lets the worker's
registry accept module attributes that are Tasks; :func:`invoke` then runs one
claimed job: ``task_started``, the call (with a context if the task takes one,
through ``async_to_sync`` if it is a coroutine function, as a task an abort can
cancel), ``task_finished``. The executor records the outcome; the signals only
report it: FAILED for a failure or a cancellation, and for a run that returned
past the job timeout (whatever it did: the worker records a ``JobTimeout``),
READY for a snooze (the job runs again).
"""

from __future__ import annotations

import logging
import traceback
from typing import TYPE_CHECKING, Any

from django.core import checks
from django.dispatch import Signal
from django.utils import timezone

from django_pgqueue import registry, wording
from django_pgqueue.backend.compat import (
    BaseTaskBackend,
    Task,
    TaskError,
    TaskResult,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_finished,
    task_started,
)
from django_pgqueue.backend.core import PgQueueBackend
from django_pgqueue.backend.results import running_result
from django_pgqueue.backend.task import PgQueueTaskContext, backend_named
from django_pgqueue.checks import no_backend_ours
from django_pgqueue.control import (
    Cancel,
    Snooze,
    current_job,
    is_coroutine_function,
    overran,
    run_coroutine,
)
from django_pgqueue.jobdb import raise_if_transaction_left_open
from django_pgqueue.jsonargs import Encoded, Refused, dumps_result
from django_pgqueue.retrypolicy import snooze_refused

if TYPE_CHECKING:
    from django_pgqueue.records import ClaimedJob

logger = logging.getLogger("django_pgqueue")


def register_task_kind() -> None:
    """Let the worker run Tasks-framework Tasks, and check that they are queued
    (idempotent)."""
    registry.register_kind(is_task, invoke, refuse)
    checks.register(check_unqueued_tasks, checks.Tags.compatibility)


def is_task(obj: object) -> bool:
    """True for a Tasks-framework Task (of Django, or of the backport in use)."""
    return isinstance(obj, Task)


def unqueued_tasks() -> dict[str, str]:
    """The Tasks found in the tasks modules whose backend is not a PgQueueBackend, by
    path, each with its backend (``TASKS['default'] is ImmediateBackend``): their
    ``enqueue()`` never reaches the job queue (after :func:`registry.discover`). A
    backend that cannot be built is left to Django's own check."""
    found = {}
    for path, runnable in registry.runnables().items():
        if not isinstance(runnable.target, Task):
            continue
        try:
            backend = task_backends[runnable.target.backend]
        except Exception:
            continue
        if not isinstance(backend, PgQueueBackend):
            found[path] = f"TASKS[{runnable.target.backend!r}] is {type(backend).__name__}"
    return found


def check_unqueued_tasks(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """W003: the app is installed but no TASKS entry is ours, and Tasks of the tasks
    modules use another backend (TASKS left out, say, so that Django's
    ImmediateBackend runs them in the caller's process): no worker runs them, and
    a project that meant to queue them would not notice. A project that set up
    our backend too chose where each task goes, and DummyBackend is for tests."""
    if not no_backend_ours():
        return []
    try:
        registry.discover()
    except Exception:  # E004 and E005 (django_pgqueue.checks) say what is wrong
        return []
    by_backend: dict[str, list[str]] = {}
    for path, backend in unqueued_tasks().items():
        if not backend.endswith(" is DummyBackend"):
            by_backend.setdefault(backend, []).append(path)
    shown = 3  # paths named in the message; the banner lists them all
    return [
        checks.Warning(
            f"{backend}, not PgQueueBackend, and {wording.count(len(paths), 'task')} of "
            f"the tasks modules use it ({', '.join(paths[:shown])}"
            + (f" and {len(paths) - shown} more" if len(paths) > shown else "")
            + "): their enqueue() does not reach the job queue, and no worker runs them.",
            hint="Set that backend's BACKEND to 'django_pgqueue.backend.PgQueueBackend' if "
            "they are meant for the queue; silence django_pgqueue.W003 if not.",
            id="django_pgqueue.W003",
        )
        for backend, paths in by_backend.items()
    ]


def invoke(task: Task[Any, Any], job: ClaimedJob) -> Any:
    """Run ``job`` with ``task`` in this thread; return its value or raise its exception.

    A value that is not JSON comes back as a :class:`Refused` with the error the
    executor buries the job with at once, where raising would retry it and run the
    task's side effects again. ``task_finished`` reports it FAILED either way.
    """
    backend = _backend_for(task)
    result = running_result(task, job, backend.alias)
    control = current_job()
    _send(task_started, backend, result)
    try:
        args: tuple[Any, ...] = tuple(job.args)
        if task.takes_context:
            context = PgQueueTaskContext(
                task_result=result,
                job_attempt=job.attempt,
                max_attempts=job.max_attempts,
                job=control,
            )
            args = (context, *args)
        if is_coroutine_function(task.func):
            value = run_coroutine(task.func, args, job.kwargs)  # what Task.call does, cancellable
        elif type(task).call is _TASK_CALL:
            value = task.func(*args, **job.kwargs)  # what Task.call does for a function
        else:
            value = task.call(*args, **job.kwargs)
        raise_if_transaction_left_open()
    except Snooze as snooze:
        snoozed: Snooze | None = snooze
    except BaseException as exc:
        # Whatever it raised (KeyboardInterrupt too: in a job's thread only the task
        # raises one) fails the run, and the worker records it so: FAILED. Inside
        # except, so that the log receiver sees exc_info.
        late = overran(control)  # Cancel ends the job cancelled past the timeout too
        _finished(backend, result, exc if late is None or isinstance(exc, Cancel) else late)
        raise
    else:
        snoozed = None
    late = overran(control)
    if late is not None:  # past the job timeout: recorded as failed, whatever it did
        _finished(backend, result, late)
        if snoozed is not None:
            raise snoozed
        return value
    if snoozed is not None:
        # Outside the except block, so that Django's log line carries no traceback:
        # READY when it runs again (INFO, as nothing failed); FAILED when the
        # executor ends it instead, cancelled as asked, or buried past MAX_SNOOZES.
        asked = control.cancel_reason if control is not None else None
        ends = Cancel(asked) if asked is not None else snooze_refused(job.snoozes, snoozed)
        if ends is not None:
            _finished(backend, result, ends)
        else:
            _finished(backend, result, None, TaskResultStatus.READY)
        raise snoozed
    if control is not None and control.stopped_by_request:
        # It saw the request and returned: the job ends cancelled, not done.
        _finished(backend, result, Cancel(control.cancel_reason))
        return value
    django_says: TypeError | ValueError | None = None
    if value is not None and not isinstance(value, str | int | float):
        # As Django does: tuples become lists, bytes str. A value it cannot
        # normalise (or nested too deep for its recursion) is left as it is, for
        # dumps() to name the offending part.
        try:
            value = normalize_json(value)
        except (TypeError, ValueError) as exc:
            django_says = exc
        except RecursionError:
            pass
    try:
        encoded = dumps_result(value)
    except TypeError as exc:
        # Final, not retried. Reported as Django's ImmediateBackend reports it: the
        # class normalize_json raised (TypeError; ValueError for bytes that are not
        # UTF-8), its words after ours, which name the part.
        refusal = exc if django_says is None else _as_django_says(exc, django_says)
    else:
        object.__setattr__(result, "_return_value", value)
        _finished(backend, result, None)
        return Encoded(encoded)  # checked and encoded once: the executor stores the text
    trace = refusal.__traceback__
    try:  # handled while task_finished is sent: Django's log line prints the refusal
        raise refusal  # (its words too), and the console does not print it twice
    except (TypeError, ValueError):
        refusal.__traceback__ = trace  # none when nothing raised it
        _finished(backend, result, refusal)
    return Refused(refusal)


_TASK_CALL = Task.call


def _as_django_says(ours: TypeError, said: TypeError | ValueError) -> TypeError | ValueError:
    """Our refusal as the class normalize_json raised, its words after ours. A class
    that takes no one message (UnicodeDecodeError, a task's own) falls back to the
    builtin it derives from: raising here would retry the job, not bury it."""
    words = f"{ours} ({said})"
    try:
        return type(said)(words)
    except Exception:
        return ValueError(words) if isinstance(said, ValueError) else TypeError(words)


def refuse(task: Task[Any, Any], job: ClaimedJob, exc: BaseException) -> None:
    """A job refused before it ran (arguments that no longer fit the task, say after
    a deploy changed its signature, or stored arguments Python cannot decode):
    reported as a run that failed at once, with ``task_started`` then
    ``task_finished`` (FAILED, the exception as its error), so that receivers
    watching for failures hear of it. The TypeError's refusal is made inside its
    ``except`` block, so Django's log receiver logs it with the exception."""
    backend = _backend_for(task)
    result = running_result(task, job, backend.alias)
    _send(task_started, backend, result)
    _finished(backend, result, exc)


def _backend_for(task: Task[Any, Any]) -> BaseTaskBackend:
    """The pgqueue backend the run is reported under.

    Normally the task's own alias. A task declared on another backend and sent
    here with ``using(backend=...)`` is reported under the first pgqueue alias.
    """
    backend = backend_named(task.backend)
    if isinstance(backend, PgQueueBackend):
        return backend
    for alias in task_backends.settings:
        candidate = backend_named(alias)
        if isinstance(candidate, PgQueueBackend):
            return candidate
    return backend


def _finished(
    backend: BaseTaskBackend,
    result: TaskResult[Any, Any],
    exc: BaseException | None,
    status: TaskResultStatus = TaskResultStatus.SUCCESSFUL,
) -> None:
    object.__setattr__(result, "finished_at", timezone.now())
    if exc is None:
        object.__setattr__(result, "status", status)
    else:
        cls = type(exc)
        result.errors.append(
            TaskError(
                exception_class_path=f"{cls.__module__}.{cls.__qualname__}",
                traceback="".join(traceback.format_exception(exc)),
            )
        )
        object.__setattr__(result, "status", TaskResultStatus.FAILED)
    _send(task_finished, backend, result)


def _send(signal: Signal, backend: BaseTaskBackend, result: TaskResult[Any, Any]) -> None:
    # A receiver's error must not change what happened to the job: a raising
    # task_finished receiver would otherwise turn a finished run into a retry
    # that runs the task again.
    for receiver, response in signal.send_robust(type(backend), task_result=result):
        if isinstance(response, Exception):
            logger.error(
                "job %s: signal receiver %r raised", result.id, receiver, exc_info=response
            )
