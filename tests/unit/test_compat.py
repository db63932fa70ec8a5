"""backend/compat.py on the django-tasks backport, whichever name its exception has.

The backport's next release renames ``InvalidTaskError`` to ``InvalidTask`` (Django's
name). The machine's Django has ``django.tasks``, so the backport's branch is run
here against stand-in modules built from Django's own classes, once with each name.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("django.tasks", reason="the stand-ins are built from django.tasks")

from django.tasks import base, exceptions, signals, task, task_backends
from django.tasks.backends import base as backends_base
from django.utils.json import normalize_json

from django_pgqueue.backend import compat


def module(name: str, **attributes: Any) -> ModuleType:
    made = ModuleType(name)
    made.__dict__.update(attributes)
    return made


class RenamedInvalidTask(Exception):
    """The backport's exception for an invalid task, under one of its two names."""


@pytest.mark.parametrize("name", ["InvalidTask", "InvalidTaskError"])
def test_the_backports_branch_imports_either_name(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fakes = {
        "django_tasks.backends.base": module(
            "django_tasks.backends.base", BaseTaskBackend=backends_base.BaseTaskBackend
        ),
        "django_tasks.base": module(
            "django_tasks.base",
            **{n: getattr(base, n) for n in ("Task", "TaskContext", "TaskError", "TaskResult")},
            TaskResultStatus=base.TaskResultStatus,
        ),
        "django_tasks.exceptions": module(
            "django_tasks.exceptions",
            **{name: RenamedInvalidTask},
            TaskResultDoesNotExist=exceptions.TaskResultDoesNotExist,
            TaskResultMismatch=exceptions.TaskResultMismatch,
        ),
        "django_tasks.signals": module(
            "django_tasks.signals",
            **{n: getattr(signals, n) for n in ("task_enqueued", "task_finished", "task_started")},
        ),
        "django_tasks.utils": module("django_tasks.utils", normalize_json=normalize_json),
    }
    fakes["django_tasks.backends"] = module(
        "django_tasks.backends", base=fakes["django_tasks.backends.base"]
    )
    fakes["django_tasks"] = module(
        "django_tasks",
        task=task,
        task_backends=task_backends,
        **{n.rpartition(".")[2]: m for n, m in fakes.items()},
    )
    for fake_name, fake in fakes.items():
        monkeypatch.setitem(sys.modules, fake_name, fake)
    real_find_spec = importlib.util.find_spec

    def find_spec(wanted: str, package: str | None = None) -> Any:
        if wanted == "django.tasks":
            return None  # as on Django 5.2
        if wanted == "django_tasks":
            return importlib.util.spec_from_loader("django_tasks", loader=None)
        return real_find_spec(wanted, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    spec = importlib.util.spec_from_file_location("compat_on_the_backport", compat.__file__)
    assert spec is not None
    assert spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    assert loaded.InvalidTask is RenamedInvalidTask
    assert (loaded.TASKS_APP, loaded.TASKS_LOGGER) == ("django_tasks", "django_tasks")
    assert loaded.Task is base.Task


def test_a_module_with_neither_name_is_an_import_error_that_names_both() -> None:
    with pytest.raises(ImportError, match=r"django_tasks\.exceptions has none of InvalidTask, "):
        compat.first_attribute(module("django_tasks.exceptions"), "InvalidTask", "InvalidTaskError")
    newer = module("m", InvalidTask=RenamedInvalidTask, InvalidTaskError=KeyError)
    assert compat.first_attribute(newer, "InvalidTask", "InvalidTaskError") is RenamedInvalidTask
