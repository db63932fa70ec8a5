"""The job a schedule's ticks enqueue: its task found and its arguments checked.

Settings name a task by its dotted path: a ``django_pgqueue.task`` or a
``django.tasks`` Task on a :class:`~django_pgqueue.backend.PgQueueBackend`. Both
are resolved and checked the way an enqueue would check them, once, so that an
entry whose job the worker would refuse (a missing task, arguments that do not
fit its signature) fails the system check at start-up, naming the entry,
instead of burying a job at every tick.
"""

from __future__ import annotations

from typing import Any

from django_pgqueue import known, registry
from django_pgqueue.exceptions import InvalidJob, UnknownTask
from django_pgqueue.periodic.spec import ScheduleSpec, invalid
from django_pgqueue.records import JobSpec
from django_pgqueue.tasks import TaskFunction


def job_spec(schedule: ScheduleSpec) -> JobSpec:
    """The job each tick of ``schedule`` enqueues (its run_at is set per tick), or
    InvalidSchedule naming the entry and what is wrong."""
    try:
        target = registry.resolve(schedule.task).target
    except UnknownTask as exc:
        raise invalid(schedule.name, f"{exc}{known.did_you_mean(schedule.task)}") from None
    if isinstance(target, TaskFunction):
        overrides = {
            key: value
            for key, value in (
                ("queue", schedule.queue),
                ("priority", schedule.priority),
                ("max_attempts", schedule.max_attempts),
            )
            if value is not None
        }
        try:
            return JobSpec.build(target, schedule.args, dict(schedule.kwargs), **overrides)
        except InvalidJob as exc:
            raise invalid(schedule.name, str(exc)) from None
    return _tasks_framework_spec(schedule, target)


def _tasks_framework_spec(schedule: ScheduleSpec, target: Any) -> JobSpec:
    # Imported here: the Tasks framework is optional on Django 5.2.
    from django_pgqueue.backend.compat import InvalidTask
    from django_pgqueue.backend.core import PgQueueBackend
    from django_pgqueue.backend.enqueueing import check_call, encode, plan
    from django_pgqueue.backend.task import options

    backend = target.get_backend()
    if not isinstance(backend, PgQueueBackend):
        raise invalid(
            schedule.name,
            f"task {schedule.task!r} runs on the Tasks backend {target.backend!r} "
            f"({type(backend).__name__}), not on a PgQueueBackend: no worker would run it",
        )
    try:
        task = options(target, max_attempts=schedule.max_attempts).using(
            queue_name=schedule.queue, priority=schedule.priority
        )
        shared = plan(backend, task)
        args_json, kwargs_json, _, _ = encode(list(schedule.args), dict(schedule.kwargs))
        check_call(task, list(schedule.args), dict(schedule.kwargs))
    except (InvalidTask, InvalidJob) as exc:
        raise invalid(schedule.name, str(exc)) from None
    return shared.spec(args_json, kwargs_json)
