"""Whether a worker would declare a task that has a name of its own (E006).

A worker finds a task by importing modules: at start, each installed app's
``tasks`` module and those of ``PGQUEUE["TASK_MODULES"]``; for a path it has not
seen, that path's module, if it is in an installed app. A task registered under
its default path (``module.qualname``) is always found the second way. One with a
``name=`` of its own (``"mailer.send"``) is found only if one of those imports
runs its ``@task``: declared in ``shop/helpers.py``, which a view imports, it
was enqueued in the web process and buried by every worker (``UnknownTask``).

So ``@task(name=...)`` notes which modules were being imported when it ran (and
whether Django's app loading, which a worker runs too, was); enqueue and
``manage.py check`` refuse the task unless a worker would run that declaration.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from types import FrameType
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.core.signals import setting_changed
from django.urls import get_resolver

from django_pgqueue import module_imports, registry
from django_pgqueue.exceptions import InvalidJob, UnknownTask

CHECK_ID = "django_pgqueue.E006"

#: Stands for Django's app loading (``django.setup()``) among a declaration's importers.
_APP_LOADING = "<django.setup>"


@dataclasses.dataclass(slots=True)
class _Declared:
    #: The modules whose import ran the declaration (and Django's app loading, if it did).
    importers: set[str] = dataclasses.field(default_factory=set)
    #: The modules whose top-level code ran it: the decorated function's own module, or
    #: the one that called ``task(name=...)(func)`` (``func`` from a library, or made by
    #: a factory), which is what a worker must import.
    homes: set[str] = dataclasses.field(default_factory=set)
    #: The modules that define the declared functions (said when no home is in an app).
    defined: set[str] = dataclasses.field(default_factory=set)
    #: The functions that ran it as they were called, with no module of the project
    #: importing (a test's body, under pytest's ``__main__``): ``"test_send() in 'm'"``.
    calls: set[str] = dataclasses.field(default_factory=set)


#: For each path declared with a name of its own: where its declarations ran.
_declared_by: dict[str, _Declared] = {}

#: Paths found to be declared by a worker too (enqueue asks once per task).
_found: set[str] = set()


def note(path: str, module: str) -> None:
    """Remember which imports ran the declaration of ``path`` (the task's ``name=``),
    of a function defined in ``module``; called by ``@task``."""
    importers: set[str] = set()
    home = caller = None
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        name = frame.f_globals.get("__name__")
        if caller is None and name != __package__ + ".tasks":  # what called @task
            caller = frame
        if code.co_name == "<module>" and isinstance(name, str):
            importers.add(name)
            home = home or name  # the innermost: the module whose code ran it
        elif code.co_name == "populate" and name == "django.apps.registry":
            importers.add(_APP_LOADING)
        frame = frame.f_back
    called = _called(caller, home)
    home = home or module
    if path.rpartition(".")[0] == home and home == module:
        return  # its default path: a worker imports that module for it
    declared = _declared_by.setdefault(path, _Declared())
    declared.importers |= importers
    declared.homes.add(home)
    declared.defined.add(module)
    declared.calls |= {called} if called else set()


def _called(caller: FrameType | None, home: str | None) -> str | None:
    """``"test_send() in 'm'"`` when a function ran the declaration as it was called
    by no module of the project's top-level code (a test runner's ``__main__``, a
    thread): not a factory that a module's top-level code calls, nor a script's own."""
    name = caller.f_globals.get("__name__") if caller is not None else None
    if caller is None or caller.f_code.co_name == "<module>" or name == home:
        return None
    if home is not None and module_imports.projects(home):
        return None  # a factory, called by that module's top-level code
    return f"{caller.f_code.co_qualname}() in {name!r}"


def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting in {"INSTALLED_APPS", "PGQUEUE", "SILENCED_SYSTEM_CHECKS"}:
        _found.clear()


setting_changed.connect(_forget)


def check_findable(path: str, task: Any) -> None:
    """Raise :class:`InvalidJob` unless a worker would find the task ``path`` (a
    ``TaskFunction`` or a path): the module that declares it in an installed app or
    TASK_MODULES, and, for a name of its own, its declaration run by what a worker
    imports."""
    if path in _found:
        return  # the hot path for these: one set lookup
    declared = _declared_by.get(path)
    if declared is None:  # its default path (or a task not declared here): the path's module
        try:
            registry.check_importable(
                path, getattr(getattr(task, "func", None), "__module__", None)
            )
        except UnknownTask as exc:
            raise InvalidJob(str(exc)) from None
        return
    problem = _problem(path, task, declared)
    if problem is not None:
        raise InvalidJob(problem)
    _found.add(path)


def _home(declared: _Declared) -> str:
    """The module a worker must import for the declaration: one it would import, if any."""
    homes = [*sorted(declared.homes), *sorted(declared.defined)]
    return next((home for home in homes if registry.importable(home)), homes[0])


def refusal(path: str, target: Any) -> str | None:
    """Why a worker would not find ``target``, declared under the name ``path`` of
    its own; None when it would (or when this process cannot tell)."""
    declared = _declared_by.get(path)
    if path in _found or declared is None:  # its default path, or not declared by @task here
        return None
    return _problem(path, target, declared)


def _problem(path: str, target: Any, declared: _Declared) -> str | None:
    """Why a worker would not declare ``path`` (the E006 grounds); None if silenced."""
    if CHECK_ID in settings.SILENCED_SYSTEM_CHECKS:
        return None  # the docs' word: silenced, enqueue refuses nothing on these grounds
    starts = registry.task_module_names()
    named = path.rpartition(".")[0]
    imported = {*starts, named} if registry.importable(named) else set(starts)
    # Django's app loading and the settings' import (its packages' first: a project's
    # __init__.py) run in every worker, before its tasks modules, wherever the modules
    # they import are.
    if declared.importers & {*imported, _APP_LOADING, *_settings_and_packages()}:
        return None
    if declared.calls and not any(map(module_imports.projects, declared.homes)):
        return _called_text(path, sorted(declared.calls)[0])
    try:
        registry.discover()  # to see what the tasks modules hold
    except Exception:  # a tasks module fails to import: the workers' to say
        return _outside(path, declared)
    for importer in sorted(imported):
        found = sys.modules.get(importer)
        # Re-exported by a tasks module (from .helpers import send). Not its module bound
        # there: a package's submodule, or ``from shop import *``, binds one that a view
        # imported first, and no worker's import does (the imports below say which).
        # A list first: a thread importing a submodule of it adds to that dict meanwhile.
        if any(value is target for value in list(getattr(found, "__dict__", {}).values())):
            return None
    reached = _run_by(imported)
    if declared.homes & reached or any(
        home.startswith(name[:-1])
        for name in reached
        if name.endswith("*")
        for home in declared.homes
    ):
        return None  # imported first by a view, but a tasks module imports it too
    return _outside(path, declared) or _text(path, _home(declared), named)


def _outside(path: str, declared: _Declared) -> str | None:
    """Why no worker imports the module that declares ``path`` (a script's, one outside
    the installed apps), asked once its imports say none does; None if it is inside."""
    try:
        registry.check_importable(path, _home(declared))
    except UnknownTask as exc:
        return f"{exc} ({CHECK_ID})"
    return None


def _settings_and_packages() -> list[str]:
    """The settings module and the packages above it, which its import runs first."""
    name = getattr(settings, "SETTINGS_MODULE", None)  # None: settings.configure()
    parts = name.split(".") if isinstance(name, str) else []
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _run_by(starts: set[str]) -> set[str]:
    """The modules of the installed apps and TASK_MODULES whose import ``starts`` run,
    as their module-level import statements say (through the project's other modules
    too: a ``common/loader.py`` outside the apps; not the libraries'). A module
    imported here first by something else (a view) declared its tasks under that
    import, and a tasks module's ``import shop.helpers`` (or ``from shop import
    middle``, which imports ``shop.helpers``) names no object of it. ``"shop.*"``
    stands for the modules an ``import_module(f"shop.{name}")`` may import (``"*"``:
    any, when it cannot tell)."""
    seen: set[str] = set()
    passed: set[str] = set()  # the libraries' modules, asked once
    todo = sorted(starts)
    while todo:
        name = todo.pop()
        if name.endswith("*"):
            seen.add(name)
        if name in seen or name in passed:
            continue
        if not (registry.importable(name) or module_imports.projects(name)):
            passed.add(name)
            continue
        seen.add(name)
        todo.extend(module_imports.imports(name))
    return seen


def _text(path: str, module: str, named: str) -> str:
    app = next((a for a in apps.get_app_configs() if registry._within(module, a.name)), None)
    move = f"move it into {app.name}.tasks (or import it there)" if app else "move it"
    then = (
        f"that path's module ({named!r}), which does not declare it"
        if registry.importable(named)
        else f"that path's module only in an installed app ({named!r} is not)"
    )
    return (
        f"task {path!r} has a name of its own and is declared in {module!r}, which a worker "
        "does not import: at start it imports each installed app's tasks module and "
        f"PGQUEUE['TASK_MODULES'], and for a path it has not seen {then}, so it would bury "
        f"the job (UnknownTask): {move}, or add {module!r} to PGQUEUE['TASK_MODULES'] "
        f"({CHECK_ID})"
    )


def _called_text(path: str, call: str) -> str:
    return (
        f"task {path!r} has a name of its own and is declared by a function as it runs "
        f"({call}), not by a module's top-level code, so no worker's import declares it "
        "and every worker would bury the job (UnknownTask): declare it at the top level "
        "of a module a worker imports (its app's tasks.py, or one of "
        "PGQUEUE['TASK_MODULES']) and enqueue it from there; a test whose jobs run in its "
        "own process (django_pgqueue.testing.run_jobs()) may silence "
        f"{CHECK_ID} instead ({CHECK_ID})"
    )


@checks.register(checks.Tags.compatibility)
def check_custom_names(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E006: a task with a name of its own, declared in a module a worker does not
    import (only those imported by this process can be seen)."""
    if not apps.is_installed("django_pgqueue"):
        return []
    try:
        registry.discover()
    except Exception:  # W004 says it
        return []
    # The URLconf's views, as Django's URL checks import them (checks run in no fixed
    # order); a URLconf that fails to import is for Django's URL checks to report.
    with contextlib.suppress(Exception):
        get_resolver().url_patterns  # noqa: B018
    found: list[checks.CheckMessage] = []
    for path, runnable in registry.runnables().items():
        problem = refusal(path, runnable.target)
        if problem is not None:
            found.append(
                checks.Error(
                    problem.removesuffix(f" ({CHECK_ID})"),
                    hint="Declare a task with a name of its own in its app's tasks.py, "
                    "or list its module in PGQUEUE['TASK_MODULES'].",
                    id=CHECK_ID,
                )
            )
    return found
