"""Which task paths the worker may run, and how to call each.

A job row only names a task by its dotted path, and anyone with database access
can write a row. The worker therefore never imports or calls a path because a
row names it: a path is runnable only if it was registered with
:func:`django_pgqueue.task` (or is an object a registered *kind* recognises, such
as a ``django.tasks`` Task; see ``django_pgqueue.backend``), and the only modules
it will import to find one are modules inside an installed Django app, or those
``PGQUEUE["TASK_MODULES"]`` names (and their submodules).

Enqueue applies the same rule (:func:`check_importable`): a task whose module a
worker would not import is refused there, with the fix, instead of being
accepted and buried later.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from functools import cache
from typing import Any, Protocol

from django.apps import apps
from django.core.signals import setting_changed
from django.utils.module_loading import autodiscover_modules

from django_pgqueue import conf
from django_pgqueue.exceptions import UnknownTask


class ClaimedRun(Protocol):
    """What an invoker reads of a claimed job (``records.ClaimedJob`` has it all)."""

    @property
    def id(self) -> int: ...
    @property
    def args(self) -> Any: ...
    @property
    def kwargs(self) -> Any: ...
    @property
    def attempt(self) -> int: ...
    @property
    def max_attempts(self) -> int: ...


#: Runs one claimed job with the registered object; returns the job's result.
Invoke = Callable[[Any, Any], Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Runnable:
    """A registered object and how to run a claimed job with it."""

    target: Any
    invoke: Invoke

    def __call__(self, job: ClaimedRun) -> Any:
        return self.invoke(self.target, job)


@dataclasses.dataclass(frozen=True, slots=True)
class _Kind:
    recognise: Callable[[Any], bool]
    invoke: Invoke


_registry: dict[str, Runnable] = {}
_kinds: list[_Kind] = []


def register(path: str, target: Any, invoke: Invoke) -> None:
    """Allow the worker to run ``target`` (through ``invoke``) for jobs naming ``path``."""
    _registry[path] = Runnable(target, invoke)


def register_kind(recognise: Callable[[Any], bool], invoke: Invoke) -> None:
    """Accept module attributes that ``recognise`` approves, run through ``invoke``."""
    if all(kind.recognise is not recognise for kind in _kinds):
        _kinds.append(_Kind(recognise, invoke))


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@cache
def importable(module: str) -> bool:
    """Whether a worker imports ``module`` to find a task: inside an installed app, or
    named by ``PGQUEUE["TASK_MODULES"]``."""
    return any(_within(module, app.name) for app in apps.get_app_configs()) or any(
        _within(module, allowed) for allowed in conf.get().TASK_MODULES
    )


def _forget_importable(*, setting: str, **kwargs: Any) -> None:
    if setting in {"INSTALLED_APPS", "PGQUEUE"}:
        importable.cache_clear()


setting_changed.connect(_forget_importable)


def check_importable(path: str, module: str | None = None) -> None:
    """Raise :class:`UnknownTask` unless a worker would find the task ``path``.

    ``module`` is where the task is defined, when the caller knows it (a task
    with a ``name=`` of its own); otherwise it is the module part of ``path``.
    """
    module = module or path.rpartition(".")[0]
    if not importable(module):
        raise UnknownTask(
            f"task {path!r} is defined in {module!r}, which is not in an installed app, so "
            f"workers would not import it and would refuse the job: move it into an installed "
            f"app (its tasks.py, say), or add {module!r} to PGQUEUE['TASK_MODULES']"
        )


def discover() -> None:
    """Import what registers tasks: each installed app's ``tasks`` module, and the
    modules of ``PGQUEUE["TASK_MODULES"]``. A worker calls it once at start."""
    autodiscover_modules("tasks")
    for module in conf.get().TASK_MODULES:
        importlib.import_module(module)


def resolve(path: str) -> Runnable:
    """The registered runnable for ``path``, or :class:`UnknownTask` saying why not."""
    found = _registry.get(path)
    if found is not None:
        return found
    module_name, _, attribute = path.rpartition(".")
    if not module_name or not attribute:
        raise UnknownTask(f"{path!r} is not a dotted task path")
    if not importable(module_name):
        raise UnknownTask(
            f"{path!r} is not a registered task, and {module_name!r} is not in an installed "
            "app (nor in PGQUEUE['TASK_MODULES']), so it was not imported"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnknownTask(f"{path!r}: module {module_name!r} cannot be imported ({exc})") from None
    except Exception as exc:  # the module's own code failed while importing
        raise UnknownTask(
            f"{path!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    found = _registry.get(path)  # importing the module may have registered it
    if found is not None:
        return found
    candidate = getattr(module, attribute, None)
    for kind in _kinds:
        if candidate is not None and kind.recognise(candidate):
            register(path, candidate, kind.invoke)
            return _registry[path]
    raise UnknownTask(f"{path!r} is not a registered task")
