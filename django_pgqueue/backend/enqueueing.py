"""Turning a Task and its arguments into job rows, once per task where it can be.

Everything about a job that comes from its Task (path, queue, priority, delay,
attempts, keys, backoff) is validated once per task and backend, and kept as a
:class:`Plan`; an enqueue then only encodes its arguments and writes the row.
The same plan serves :func:`enqueue_many`, the bulk call Django's Tasks API
lacks.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import reprlib
import sys
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from django.core.signals import setting_changed

from django_pgqueue import conf, registry, signatures, validation
from django_pgqueue.backend.checks import unknown_keys_text
from django_pgqueue.backend.compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    normalize_json,
)
from django_pgqueue.exceptions import InvalidJob, InvalidJobArguments, UnknownTask
from django_pgqueue.jsonargs import dumps_read_back
from django_pgqueue.records import JobSpec
from django_pgqueue.retrypolicy import RetryPolicy, policy_of
from django_pgqueue.tasks import TaskFunction


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    """What every job of one task on one backend shares, validated."""

    path: str
    queue: str
    priority: int
    run_at: dt.datetime | None
    max_attempts: int
    unique_key: str | None
    concurrency_key: str | None
    backoff: float | None
    retry_policy: str | None = None

    def spec(self, args: str, kwargs: str) -> JobSpec:
        return JobSpec(
            self.path,
            args,
            kwargs,
            self.queue,
            self.priority,
            self.max_attempts,
            self.run_at,
            self.unique_key,
            self.concurrency_key,
            self.backoff,
            self.retry_policy,
        )


def _first_set(*values: Any) -> Any:
    """The first value that is not None (0 is a valid backoff)."""
    return next((v for v in values if v is not None), None)


#: Plans by (backend, task) identity: (backend, task, plan). Tasks and their options
#: are frozen, so the objects themselves are the key; an entry holds on to them,
#: so neither id can be reused while it stands.
_plans: dict[tuple[int, int], tuple[BaseTaskBackend, Task[Any, Any], Plan]] = {}
MAX_PLANS = 1024


def plan(backend: BaseTaskBackend, task: Task[Any, Any]) -> Plan:
    """The task's plan on ``backend``; InvalidTask for anything the queue would refuse."""
    kept = _plans.get((id(backend), id(task)))
    if kept is not None and kept[0] is backend and kept[1] is task:
        return kept[2]
    # The delivery options do not take part in a PgQueueTask's equality, so they
    # are part of the key of the plans made.
    made = _plan(
        backend,
        task,
        getattr(task, "max_attempts", None),
        getattr(task, "unique_key", None),
        getattr(task, "concurrency_key", None),
        getattr(task, "backoff", None),
        policy_of(task),
    )
    if len(_plans) >= MAX_PLANS:
        _plans.clear()  # tasks built per call (using() in a loop): start again
    _plans[(id(backend), id(task))] = (backend, task, made)
    return made


@lru_cache(maxsize=1024)
def _plan(
    backend: BaseTaskBackend,
    task: Task[Any, Any],
    max_attempts: int | None,
    unique_key: str | None,
    concurrency_key: str | None,
    backoff: float | None,
    policy: RetryPolicy,
) -> Plan:
    # Keyed by the backend instance too: Django builds new ones when TASKS changes.
    alias = backend.alias
    backend.validate_task(task)
    options = backend.options
    # A typo's value would be silently not applied: check (E103, E109) is not run here.
    unknown = unknown_keys_text(alias, getattr(backend, "unknown_params", []), options)
    if unknown is not None:
        raise InvalidTask(unknown)
    settings = conf.get()
    try:
        registry.check_importable(task.module_path, task.func.__module__)
        _check_found(task.module_path)
        return Plan(
            path=validation.TASK_PATH(task.module_path),
            queue=task.queue_name,
            priority=int(task.priority),  # Django takes a whole float (5.0); COPY would not
            run_at=None
            if task.run_after is None
            else validation.RUN_AT(task.run_after, "run_after"),
            max_attempts=validation.ATTEMPTS(
                _first_set(max_attempts, options.get("MAX_ATTEMPTS"), settings.MAX_ATTEMPTS)
            ),
            unique_key=unique_key,
            concurrency_key=concurrency_key,
            backoff=None
            if (b := _first_set(backoff, options.get("BACKOFF"))) is None
            else validation.BACKOFF(b),
            retry_policy=policy.to_json(),
        )
    except (InvalidJob, UnknownTask) as exc:
        # An option the queue refuses (a bad OPTIONS value, a task no worker would
        # import): the framework's exception, with the queue's message.
        raise InvalidTask(f"{exc} (TASKS[{alias!r}])") from exc


def _check_found(path: str) -> None:
    """UnknownTask unless a worker finds a task at ``path``, the module and name of the
    Task's function: a Task bound to another name (``send = task(_send)``) leaves a
    plain function there, and its jobs were accepted, then buried."""
    if registry.loaded(path, importing=True) is not None:
        return
    module_name, _, name = path.rpartition(".")
    module = sys.modules.get(module_name)
    if module is None:  # it failed to import here: the workers' to say
        return
    held = getattr(module, name, None)
    what = "nothing" if held is None else f"a {type(held).__name__}, not a Task,"
    raise UnknownTask(
        f"task {path!r}: workers look for a Task under its function's own name, and "
        f"{module_name!r} holds {what} by the name {name!r}: decorate the function "
        f"itself with @task (a Task bound to another name, as in `x = task(f)`, "
        f"cannot be found)"
    )


def _forget_plans(*, setting: str, **kwargs: Any) -> None:
    # USE_TZ and TIME_ZONE: a naive run_after is read in TIME_ZONE when USE_TZ is off.
    if setting in {"TASKS", "PGQUEUE", "INSTALLED_APPS", "USE_TZ", "TIME_ZONE"} | {
        "SILENCED_SYSTEM_CHECKS"  # an unknown key of TASKS is refused unless silenced
    }:
        _plans.clear()
        _plan.cache_clear()


setting_changed.connect(_forget_plans)


def check_call(task: Task[Any, Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """Raise InvalidJobArguments (a TypeError) unless the call fits the task's function:
    the worker would refuse the job, and the caller is the one who can fix it."""
    try:
        signatures.check_arguments(task, args, kwargs)
    except TypeError as exc:
        raise InvalidJobArguments(f"{exc} ({task.module_path})") from None


def encode(args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[str, str, Any, Any]:
    """(args JSON, kwargs JSON, args, kwargs as stored): the arguments as the queue
    stores them, normalised as Django's Tasks framework does (tuples become lists,
    bytes text) when they are not plain JSON already. The last two are read back
    from the JSON: fresh copies, as Django's ``normalize_json`` makes for a result."""
    # Django passes args as a tuple: encoded as the list it reads back as, it
    # passes the round-trip check at once instead of being walked item by item.
    try:
        args_json, stored_args = dumps_read_back(list(args), "args")
        kwargs_json, stored_kwargs = dumps_read_back(dict(kwargs), "kwargs")
    except InvalidJobArguments as first:
        try:
            normal_args: Any = normalize_json(args)
            normal_kwargs: Any = normalize_json(kwargs)
        except (TypeError, ValueError) as exc:
            # Django's own error says "Unsupported type ..."; ours names the argument.
            raise InvalidJobArguments(f"{first} ({exc})") from None
        except RecursionError:
            # normalize_json recurses: arguments nested too deep for it get our error.
            raise first from None
        args_json, stored_args = dumps_read_back(normal_args, "args")
        kwargs_json, stored_kwargs = dumps_read_back(normal_kwargs, "kwargs")
    return args_json, kwargs_json, stored_args, stored_kwargs


def call(*args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """One set of arguments for :func:`enqueue_many`: ``call(order.pk, notify=True)``."""
    return args, kwargs


def pair_at(
    task: Task[Any, Any], index: int, item: object
) -> tuple[Sequence[Any], Mapping[str, Any]]:
    """``calls[index]`` of enqueue_many as (args, kwargs); InvalidJobArguments for any
    other shape."""
    if isinstance(item, (tuple, list)) and len(item) == 2:
        args, kwargs = item
        if isinstance(args, (tuple, list)) and isinstance(kwargs, Mapping):
            return args, kwargs
    raise InvalidJobArguments(
        f"calls[{index}] of enqueue_many is {reprlib.repr(item)}, not an (args, kwargs) pair: "
        f"build each with call(...), as in call(42, notify=True) ({task.module_path})"
    )


def checked(
    task: Task[Any, Any], index: int, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[str, str, Any, Any]:
    """Call ``index`` of enqueue_many encoded and checked against the task's signature;
    the error names it."""
    try:
        encoded = encode(args, kwargs)
        check_call(task, args, kwargs)
    except InvalidJobArguments as exc:
        raise InvalidJobArguments(f"calls[{index}] of enqueue_many: {exc}") from None
    return encoded


def not_a_task(task: object) -> str:
    """Why ``enqueue_many()`` refuses ``task``, and what to pass instead."""
    said = (
        "enqueue_many() takes a Task (a function declared with @task from django.tasks), "
        f"not {task!r}"
    )
    if isinstance(task, TaskFunction):  # django_pgqueue's own @task: its own bulk call
        return (
            f"{said}: this is a django_pgqueue task, whose jobs are enqueued in bulk with "
            "Job.objects.enqueue_many([JobSpec.build(task, args, kwargs), ...])"
        )
    return (
        f"{said}: decorate the function with @task from django.tasks first"
        if callable(task)
        else said
    )
