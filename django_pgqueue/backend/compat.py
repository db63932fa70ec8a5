"""One import point for the Tasks framework: ``django.tasks`` (Django 6.0+), or the
``django-tasks`` backport package on Django 5.2.

The two are separate class hierarchies with the same shape, so everything in the
backend imports the names from here and works with either. Importing this module
without either raises an ImportError that says what to install.
"""

from __future__ import annotations

from importlib.util import find_spec
from types import ModuleType
from typing import TYPE_CHECKING


def first_attribute(module: ModuleType, *names: str) -> type[Exception]:
    """The first of ``names`` that ``module`` has: the backport renames its exceptions
    between releases (``InvalidTaskError`` became ``InvalidTask``, Django's name)."""
    for name in names:
        found = getattr(module, name, None)
        if isinstance(found, type) and issubclass(found, Exception):
            return found
    raise ImportError(f"{module.__name__} has none of {', '.join(names)}")


# Type checkers always see Django's own module (django-stubs types it); at run time
# the backport stands in for it on Django 5.2.
if TYPE_CHECKING or find_spec("django.tasks") is not None:
    from django.tasks import task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import (
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    TASKS_APP: str | None = None  # part of Django: no app to install
    TASKS_LOGGER = "django.tasks"  # where the framework's signal receivers log
elif find_spec("django_tasks") is not None:
    from django_tasks import exceptions as _exceptions
    from django_tasks import task, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

    InvalidTask = first_attribute(_exceptions, "InvalidTask", "InvalidTaskError")
    TASKS_APP = "django_tasks"  # the backport's signals and checks need its app installed
    TASKS_LOGGER = "django_tasks"
else:
    raise ImportError(
        "django_pgqueue.backend needs Django's Tasks framework: use Django 6.0 or later, "
        "or install the backport with `pip install django-pgqueue[backport]`"
    )

__all__ = [
    "TASKS_APP",
    "TASKS_LOGGER",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
