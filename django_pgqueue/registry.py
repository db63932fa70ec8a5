"""Which task paths the worker may run, and how to call each.

A job row only names a task by its dotted path, and anyone with database access
can write a row. The worker therefore never imports or calls a path because a
row names it: a path is runnable only if it was registered with
:func:`django_pgqueue.task` (or is an object a registered *kind* recognises, such
as a ``django.tasks`` Task; see ``django_pgqueue.backend``), and the only modules
it will import to find one are modules inside an installed Django app.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.apps import apps

from django_pgqueue.exceptions import UnknownTask

if TYPE_CHECKING:
    from django_pgqueue.records import ClaimedJob

#: Runs one claimed job with the registered object; returns the job's result.
Invoke = Callable[[Any, "ClaimedJob"], Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Runnable:
    path: str
    target: Any
    invoke: Invoke

    def __call__(self, job: ClaimedJob) -> Any:
        return self.invoke(self.target, job)


@dataclasses.dataclass(frozen=True, slots=True)
class _Kind:
    recognise: Callable[[Any], bool]
    invoke: Invoke


_registry: dict[str, Runnable] = {}
_kinds: list[_Kind] = []


def register(path: str, target: Any, invoke: Invoke) -> None:
    """Allow the worker to run ``target`` (through ``invoke``) for jobs naming ``path``."""
    _registry[path] = Runnable(path, target, invoke)


def register_kind(recognise: Callable[[Any], bool], invoke: Invoke) -> None:
    """Accept module attributes that ``recognise`` approves, run through ``invoke``."""
    if all(kind.recognise is not recognise for kind in _kinds):
        _kinds.append(_Kind(recognise, invoke))


def _in_installed_app(module: str) -> bool:
    return any(module == app.name or module.startswith(app.name + ".")
               for app in apps.get_app_configs())


def resolve(path: str) -> Runnable:
    """The registered runnable for ``path``, or :class:`UnknownTask` saying why not."""
    found = _registry.get(path)
    if found is not None:
        return found
    module_name, _, attribute = path.rpartition(".")
    if not module_name or not attribute:
        raise UnknownTask(f"{path!r} is not a dotted task path")
    if not _in_installed_app(module_name):
        raise UnknownTask(
            f"{path!r} is not a registered task, and {module_name!r} is not in an installed "
            "app, so it was not imported"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnknownTask(f"{path!r}: module {module_name!r} cannot be imported ({exc})") from None
    except Exception as exc:  # the module's own code failed while importing
        raise UnknownTask(f"{path!r}: importing {module_name!r} failed: "
                          f"{type(exc).__name__}: {exc}") from None
    found = _registry.get(path)  # importing the module may have registered it
    if found is not None:
        return found
    candidate = getattr(module, attribute, None)
    for kind in _kinds:
        if candidate is not None and kind.recognise(candidate):
            register(path, candidate, kind.invoke)
            return _registry[path]
    raise UnknownTask(f"{path!r} is not a registered task")
