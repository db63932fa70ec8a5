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

import contextlib
import dataclasses
import importlib
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from functools import cache
from typing import Any, Protocol

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
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


#: Runs one claimed job with the registered object; returns the job's result. Right
#: after the call it must apply ``jobdb.raise_if_transaction_left_open()`` (inside
#: its own error handling, so that whatever it reports sees the failure): the
#: executor does not check again.
Invoke = Callable[[Any, Any], Any]

#: Told, inside the executor's ``except`` block, that a claimed job was refused before
#: it ran (its arguments do not fit the registered object): the Tasks backend sends
#: ``task_started`` and ``task_finished`` (FAILED) for it, as Django's workers do.
Refuse = Callable[[Any, Any, BaseException], None]


@dataclasses.dataclass(frozen=True, slots=True)
class Runnable:
    """A registered object and how to run a claimed job with it."""

    target: Any
    invoke: Invoke
    refuse: Refuse | None = None
    #: The module that declared it, imported as it registered: while that module is
    #: not imported (Python drops a module whose import failed half-way, with the
    #: tasks declared above the error), the task is not registered.
    module: str | None = None

    def __call__(self, job: ClaimedRun) -> Any:
        return self.invoke(self.target, job)


@dataclasses.dataclass(frozen=True, slots=True)
class _Kind:
    recognise: Callable[[Any], bool]
    invoke: Invoke
    refuse: Refuse | None


_registry: dict[str, Runnable] = {}
_kinds: list[_Kind] = []


def register(path: str, target: Any, invoke: Invoke, refuse: Refuse | None = None) -> None:
    """Allow the worker to run ``target`` (through ``invoke``) for jobs naming ``path``."""
    module = getattr(getattr(target, "func", target), "__module__", None)
    home = module if isinstance(module, str) and module in sys.modules else None
    _registry[path] = Runnable(target, invoke, refuse, home)


def _registered(path: str) -> Runnable | None:
    """``path``'s runnable, unless the module that declared it failed to import: a
    task declared above the error is left out, as if the module had not run. Only
    read, never removed here: another thread may have just registered the path
    anew by importing the module again, and a worker's threads look tasks up side
    by side (an import that runs the module again registers it over the stale one)."""
    found = _registry.get(path)
    if found is not None and found.module is not None and found.module not in sys.modules:
        return None
    return found


def register_kind(
    recognise: Callable[[Any], bool], invoke: Invoke, refuse: Refuse | None = None
) -> None:
    """Accept module attributes that ``recognise`` approves, run through ``invoke``."""
    if all(kind.recognise is not recognise for kind in _kinds):
        _kinds.append(_Kind(recognise, invoke, refuse))


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
    if module == "__main__" or module.startswith("django.core.management."):
        raise UnknownTask(
            f"task {path!r} is defined in a script or the shell ({module!r}), which a "
            f"worker cannot import: define it in a module of an installed app (its "
            f"tasks.py, say)"
        )
    if not importable(module):
        raise UnknownTask(
            f"task {path!r} is defined in {module!r}, which is not in an installed app, so "
            f"workers would not import it and would refuse the job: {_app_hint(module)}move "
            f"it into an installed app (its tasks.py, say), or add {module!r} to "
            "PGQUEUE['TASK_MODULES']"
        )


def _app_hint(module: str) -> str:
    """For an app's tasks.py outside the installed apps: the app installed under a
    longer path (``example_project.shop`` for ``shop.tasks``, the same module under
    another name), else the app to add (a new user's slip)."""
    if not module.endswith(".tasks"):
        return ""
    app = module.removesuffix(".tasks")
    same = [
        config.name
        for config in apps.get_app_configs()
        if config.name.endswith("." + app) or config.label == app.rpartition(".")[2]
    ]
    if same:
        return f"the app is installed as {same[0]!r}: import the task from {same[0]}.tasks, "
    return f"add {app!r} to INSTALLED_APPS if it is an app of yours, "


def missing_task_module(name: str) -> str | None:
    """Why the module ``name`` of ``PGQUEUE["TASK_MODULES"]`` cannot be imported, when
    it (or a package above it) does not exist or fails to import; None when it is
    found. Only the packages above it are imported, as an import would."""
    try:
        found = importlib.util.find_spec(name)
    except Exception as exc:  # a package above it is missing, or fails to import
        return f"PGQUEUE['TASK_MODULES'] names {name!r}, which cannot be imported: {exc}"
    if found is None:
        return f"PGQUEUE['TASK_MODULES'] names {name!r}, which cannot be imported: no such module"
    return None


def task_module_names() -> list[str]:
    """The modules a worker imports for its tasks: each app's ``tasks``, then ``TASK_MODULES``."""
    return [f"{app.name}.tasks" for app in apps.get_app_configs()] + [*conf.get().TASK_MODULES]


def discover() -> None:
    """Import what registers tasks: each installed app's ``tasks`` module, and the
    modules of ``PGQUEUE["TASK_MODULES"]``. A worker calls it once at start.

    Tasks-framework Tasks found in those modules (defined there, or imported from one a
    worker imports) are registered too, so that the worker can list every task it runs."""
    autodiscover_modules("tasks")
    for extra in conf.get().TASK_MODULES:
        problem = missing_task_module(extra)
        if problem is not None:
            raise ImproperlyConfigured(problem)
        importlib.import_module(extra)  # an error inside the module keeps its traceback
    for name in task_module_names():
        found = sys.modules.get(name)
        # A list first: another thread's import of a submodule adds to that dict meanwhile.
        for value in list(vars(found).values()) if found is not None else ():
            # Asked of the type first: a lazy object would evaluate itself if asked.
            if not hasattr(type(value), "module_path"):
                continue
            # Listed under its own path: imported from another module a worker imports too.
            own: str = value.module_path
            home, _, attribute = own.rpartition(".")
            if getattr(sys.modules.get(home), attribute, None) is value and importable(home):
                for kind in (k for k in _kinds if _registered(own) is None and k.recognise(value)):
                    register(own, value, kind.invoke, kind.refuse)


def loaded(path: str, *, importing: bool = False) -> Any | None:
    """What ``path`` names in this process: its registered runnable, or an object of
    a registered kind (a Tasks-framework Task, say) in a module imported here; None
    if neither. ``importing``: import the module first if a worker would (it is in
    an installed app or TASK_MODULES), so that the answer does not depend on what
    this process happened to import before; a module that is not there is left to
    the worker to report."""
    found = _registered(path)
    if found is not None:
        return found
    module_name, _, attribute = path.rpartition(".")
    if importing and module_name not in sys.modules and importable(module_name):
        # A module that fails here (a dependency or setting only the workers have)
        # is the workers' to report.
        with contextlib.suppress(Exception):
            importlib.import_module(module_name)
        found = _registered(path)
        if found is not None:
            return found
    module = sys.modules.get(module_name)
    candidate = getattr(module, attribute, None) if module is not None else None
    if candidate is not None and any(kind.recognise(candidate) for kind in _kinds):
        return candidate
    return None


def recognised(value: Any) -> bool:
    """Whether a registered kind would run ``value`` (a Tasks-framework Task, say)."""
    return any(kind.recognise(value) for kind in _kinds)


def runnables() -> dict[str, Runnable]:
    """Every task this process knows it may run, by path (after :func:`discover`)."""
    known = {path: _registered(path) for path in list(_registry)}
    return {path: found for path, found in sorted(known.items()) if found is not None}


def resolve(path: str) -> Runnable:
    """The registered runnable for ``path``, or :class:`UnknownTask` saying why not."""
    found = _registered(path)
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
    fresh = module_name not in sys.modules  # imported now: as its file is today
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnknownTask(f"{path!r}: module {module_name!r} cannot be imported ({exc})") from None
    except Exception as exc:  # the module's own code failed while importing
        raise UnknownTask(
            f"{path!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    found = _registered(path)  # importing the module may have registered it
    if found is not None:
        return found
    candidate = getattr(module, attribute, None)
    for kind in _kinds:
        if candidate is not None and kind.recognise(candidate):
            register(path, candidate, kind.invoke, kind.refuse)
            return _registry[path]
    changed = _changed_since_start(module) if candidate is None and not fresh else ""
    raise UnknownTask(f"{path!r} is not a registered task{changed}")


#: When this process began loading tasks (this module is imported by the first @task).
_STARTED = time.time()


def _changed_since_start(module: Any) -> str:
    """Why a module holds no task of that name when its file changed after this
    process started (a task added while a worker runs); "" otherwise."""
    try:
        changed = os.path.getmtime(module.__file__) > _STARTED
    except (TypeError, OSError):  # no file (a namespace package), or it is gone
        return ""
    if not changed:
        return ""
    return (
        f": {module.__name__!r} holds nothing by that name, and its file has changed since "
        "this process started: if the task is new, restart the process to load it "
        "(`runworker --reload` does so on every change while you develop)"
    )


def gone(path: str) -> str:
    """What a worker adds when a job's path names nothing in its module, which it
    imported: most likely a task renamed or removed since the job was queued (a task
    added since the worker started is :func:`_changed_since_start`'s); "" otherwise."""
    module_name, _, name = path.rpartition(".")
    module = sys.modules.get(module_name)
    if module is None or hasattr(module, name) or _changed_since_start(module):
        return ""
    return (
        f": {module_name!r} holds nothing by that name. Renamed or removed since the job "
        "was enqueued? Keep a task at the old path until its queued jobs have run "
        f"(`@task(name={path!r})` with django_pgqueue.task, `{name} = <the task>` in "
        f"{module_name!r} with django.tasks)"
    )
