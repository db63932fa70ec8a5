"""django-pgqueue's own options on a Tasks-framework Task, and the context it passes.

``PgQueueTask`` is the ``task_class`` of :class:`~django_pgqueue.backend.PgQueueBackend`,
so ``@task`` builds one for every task on a pgqueue backend, and its ``using()``
takes ``max_attempts``, ``unique_key``, ``concurrency_key``, ``backoff``,
``retry_on`` and ``discard_on`` beside Django's four. :func:`options` sets the
same on any Task, whatever its backend class.

``retry_on`` and ``discard_on`` are the retry policy, kept on each job's row (as
class paths) so that the worker never imports anything a row names.
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Never, TypeAlias, cast

from django.core.signals import setting_changed
from django.utils import timezone

from django_pgqueue import validation
from django_pgqueue.backend.compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskContext,
    task_backends,
)
from django_pgqueue.control import RunningJob
from django_pgqueue.retrypolicy import Classes, RetryPolicy

if TYPE_CHECKING:
    # django-stubs makes Task and TaskContext generic; at run time they are not. (A
    # PEP 695 `type` alias cannot be a base class, hence TypeAlias.)
    _TaskBase: TypeAlias = Task[Any, Any]  # noqa: UP040
    _ContextBase: TypeAlias = TaskContext[Any, Any]  # noqa: UP040
else:
    _TaskBase = Task
    _ContextBase = TaskContext


class _ThreadBackends(threading.local):
    generation = -1
    found: dict[str, BaseTaskBackend]


_thread_backends = _ThreadBackends()
_generation = 0


def _forget_backends(*, setting: str, **kwargs: Any) -> None:
    global _generation
    if setting == "TASKS":
        _generation += 1  # every thread's kept backends, not just this thread's


setting_changed.connect(_forget_backends)


def backend_named(alias: str) -> BaseTaskBackend:
    """``task_backends[alias]``; a pgqueue backend is kept per thread until ``TASKS``
    changes.

    Django's handler keeps its backends behind an asgiref ``Local`` (a few
    microseconds a lookup, on every enqueue and run); a pgqueue backend keeps no
    state of its own, so one per thread serves them all. Any other backend is
    looked up Django's way: it may keep state (the dummy backend's results).
    """
    kept = _thread_backends
    if kept.generation != _generation:
        kept.generation, kept.found = _generation, {}
    found = kept.found.get(alias)
    if found is None:
        found = task_backends[alias]
        made = getattr(found, "task_class", None)
        if isinstance(made, type) and issubclass(made, PgQueueTask):
            kept.found[alias] = found
    return found


EXTRAS = validation.TASK_EXTRAS
ExceptionClasses = type[BaseException] | tuple[type[BaseException], ...]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PgQueueTask(_TaskBase):
    """A Task that also carries django-pgqueue's delivery options.

    ``None`` means the default: ``OPTIONS["MAX_ATTEMPTS"]`` of the backend (else
    ``PGQUEUE["MAX_ATTEMPTS"]``), no unique key, no concurrency key. The options do
    not take part in equality: they describe how a run is delivered, and a task
    read back from the queue (with its defaults filled in) must still equal the
    task that was enqueued.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> PgQueueTask:
        # Django's @task passes its unknown keywords here: name them where it is declared.
        if not kwargs.keys() <= _FIELDS:
            raise TypeError(_unknown_declared(kwargs.keys() - _FIELDS))
        return object.__new__(cls)  # object's: slots=True makes a class super() misses

    max_attempts: int | None = dataclasses.field(default=None, compare=False)
    unique_key: str | None = dataclasses.field(default=None, compare=False)
    concurrency_key: str | None = dataclasses.field(default=None, compare=False)
    #: Seconds before the first retry, doubling (default: OPTIONS["BACKOFF"], BACKOFF_BASE).
    backoff: float | None = dataclasses.field(default=None, compare=False)
    #: Only these exceptions are retried (None: every exception).
    retry_on: Classes | None = dataclasses.field(default=None, compare=False)
    #: These bury the job at once (they win over retry_on).
    discard_on: Classes = dataclasses.field(default=(), compare=False)

    def get_backend(self) -> BaseTaskBackend:
        """The backend this task is enqueued on (``enqueue()`` asks on every call)."""
        return backend_named(self.backend)

    @property
    def retry_policy(self) -> RetryPolicy:
        """What the worker does after a failed run of this task."""
        return RetryPolicy.build(self.retry_on, self.discard_on)

    def using(
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: datetime | timedelta | None = None,
        backend: str | None = None,
        max_attempts: int | None = None,
        unique_key: str | None = None,
        concurrency_key: str | None = None,
        backoff: float | None = None,
        retry_on: ExceptionClasses | None = None,
        discard_on: ExceptionClasses | None = None,
        **unknown: Any,
    ) -> PgQueueTask:
        """A copy with other options; ``None`` keeps the current value (as in Django).

        ``run_after`` is an aware datetime, as in Django, or a ``timedelta`` counted
        from this call (``using(run_after=timedelta(minutes=5))``). A ``retry_on`` or
        ``discard_on`` that is not exception classes raises InvalidTask here.
        """
        if unknown:
            taken = "priority, queue_name, run_after, backend"
            raise TypeError(_unknown_options(unknown, "PgQueueTask.using()", taken))
        changes: dict[str, Any] = {
            "priority": priority,
            "queue_name": queue_name,
            "run_after": run_after_moment(run_after),
            "backend": backend,
            "max_attempts": max_attempts,
            "unique_key": unique_key,
            "concurrency_key": concurrency_key,
            "backoff": backoff,
            "retry_on": _classes(retry_on, "retry_on"),
            "discard_on": _classes(discard_on, "discard_on"),
        }
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


def run_after_moment(value: datetime | timedelta | None) -> datetime | None:
    """``run_after`` as the aware datetime Django's Task holds: a timedelta counts from now.

    A negative delay or a naive datetime is left for the backend's validation to
    refuse, with its message."""
    if isinstance(value, timedelta):
        if not validation.DELAY.is_valid(value):
            raise InvalidTask(validation.DELAY.message(value, "run_after") + ".")
        return timezone.now() + value
    if value is not None and not isinstance(value, datetime):
        hint = (
            f": for {value:g} seconds from now, pass run_after=timedelta(seconds={value:g})"
            if isinstance(value, int | float) and not isinstance(value, bool)
            else ""
        )
        raise InvalidTask(f"run_after {value!r} must be an aware datetime or a timedelta{hint}.")
    return value


_FIELDS = frozenset(field.name for field in dataclasses.fields(PgQueueTask))
#: What a user coming from elsewhere writes, and what it is here.
_SPELLED = {
    "queue": "queue is queue_name",
    "delay": "a delay is .using(run_after=timedelta(...)) at enqueue",
    "run_at": "a start time is .using(run_after=...) at enqueue",
}


def _unknown_declared(unknown: Any) -> str:
    names = sorted(unknown)
    hints = [_SPELLED[name] for name in names if name in _SPELLED]
    return (
        f"@task() got unexpected keyword argument(s) {', '.join(names)}: a task on "
        f"PgQueueBackend takes priority, queue_name, backend, takes_context, "
        f"{', '.join(EXTRAS)}" + (f" ({'; '.join(hints)})" if hints else "")
    )


def _unknown_options(unknown: dict[str, Any], called: str, takes: str) -> str:
    names = ", ".join(sorted(unknown))
    hint = (
        "; to delay a job, pass run_after=timedelta(seconds=...) or an aware datetime"
        if "delay" in unknown or "run_at" in unknown
        else ""
    )
    return (
        f"{called} got unexpected keyword argument(s) {names}: it takes {takes}, "
        f"{', '.join(EXTRAS)}{hint}"
    )


def _not_a_task(task: object) -> str:
    said = f"options() takes a Task of django.tasks (declared with its @task), not {task!r}"
    if hasattr(task, "using") and hasattr(task, "enqueue"):  # django_pgqueue's own @task
        return f"{said}: on a django_pgqueue task, call .using(max_attempts=..., ...) instead"
    if callable(task):
        return f"{said}: decorate the function with @task from django.tasks first"
    return said


def options[T: _TaskBase](
    task: T,
    *,
    max_attempts: int | None = None,
    unique_key: str | None = None,
    concurrency_key: str | None = None,
    backoff: float | None = None,
    retry_on: ExceptionClasses | None = None,
    discard_on: ExceptionClasses | None = None,
    run_after: datetime | timedelta | None = None,
    **unknown: Never,
) -> T:
    """``task`` with django-pgqueue's delivery options set.

    The typed spelling of ``task.using(max_attempts=..., unique_key=..., concurrency_key=...,
    run_after=timedelta(...))`` (django-stubs types Django's ``using()``, whose ``run_after``
    takes only a datetime), and it works on a Task of any backend class: one declared while
    ``TASKS`` pointed at Django's DummyBackend (as in a project's tests) becomes a
    :class:`PgQueueTask`, and backends other than ours ignore the options. ``retry_on`` and
    ``discard_on`` are the job's retry policy: given where the task is declared (``charge =
    options(charge, retry_on=(Timeout,))``) or per enqueue, each job keeps its own.
    """
    if unknown:  # what Python would say, with the hint using() gives
        raise TypeError(_unknown_options(unknown, "options()", "run_after"))
    if not isinstance(task, Task):
        raise TypeError(_not_a_task(task))
    ours = (
        task
        if isinstance(task, PgQueueTask)
        else PgQueueTask(**{f.name: getattr(task, f.name) for f in dataclasses.fields(task)})
    )
    return cast(
        T,
        ours.using(
            max_attempts=max_attempts,
            unique_key=unique_key,
            concurrency_key=concurrency_key,
            backoff=backoff,
            retry_on=retry_on,
            discard_on=discard_on,
            run_after=run_after,
        ),
    )


def _classes(value: ExceptionClasses | None, name: str) -> Classes | None:
    if value is None:
        return None
    if not validation.EXCEPTIONS.is_valid(value):
        raise InvalidTask(validation.EXCEPTIONS.message(value, name) + ".")
    return validation.EXCEPTIONS(value)


def validate_extras(task: Any) -> None:
    """Raise InvalidTask if ``task`` carries a delivery option the queue would refuse."""
    rules = (
        ("max_attempts", validation.ATTEMPTS),
        ("backoff", validation.BACKOFF),
        ("unique_key", validation.KEY),
        ("concurrency_key", validation.KEY),
    )
    for name, rule in rules:
        value = getattr(task, name, None)
        if value is not None and not rule.is_valid(value):
            raise InvalidTask(rule.message(value, name) + ".")
    for name in ("retry_on", "discard_on"):
        _classes(getattr(task, name, None), name)


# django-stubs declares TaskContext without frozen=True; Django's is frozen.
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PgQueueTaskContext(_ContextBase):  # type: ignore[misc]
    """The TaskContext a ``takes_context`` task receives from a pgqueue worker.

    ``attempt`` is the attempt that counts against ``max_attempts`` (1 on the first
    run). It can be lower than ``task_result.attempts``, which counts every worker
    that claimed the job, including runs given back at shutdown or before an
    operator's retry.
    """

    job_attempt: int
    max_attempts: int
    #: The run's line to its worker (``django_pgqueue.current_job()``).
    job: RunningJob | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def attempt(self) -> int:
        return self.job_attempt

    @property
    def is_last_attempt(self) -> bool:
        """True when a failure of this run buries the job rather than retrying it."""
        return self.job_attempt >= self.max_attempts

    @property
    def cancel_requested(self) -> bool:
        """True once an operator asked this job to stop (``Job.objects.cancel``) and
        the worker heard of it: return (or raise ``django_pgqueue.Cancel``) and the
        job ends ``cancelled``. See ``django_pgqueue.current_job()``."""
        return self.job is not None and self.job.cancel_requested
