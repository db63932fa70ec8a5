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

import ast
import contextlib
import importlib.util
import sys
from types import FrameType
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.core.signals import setting_changed
from django.urls import get_resolver

from django_pgqueue import registry
from django_pgqueue.exceptions import InvalidJob, UnknownTask

CHECK_ID = "django_pgqueue.E006"

#: Stands for Django's app loading (``django.setup()``) among a declaration's importers.
_APP_LOADING = "<django.setup>"

#: For each path declared with a name of its own: the modules whose import ran it.
_declared_by: dict[str, set[str]] = {}

#: Paths found to be declared by a worker too (enqueue asks once per task).
_found: set[str] = set()


def note(path: str, module: str) -> None:
    """Remember which imports ran the declaration of ``path`` (the task's ``name=``),
    defined in ``module``; called by ``@task``."""
    if path.rpartition(".")[0] == module:
        return  # its default path: a worker imports that module for it
    importers = _declared_by.setdefault(path, set())
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        name = frame.f_globals.get("__name__")
        if code.co_name == "<module>" and isinstance(name, str):
            importers.add(name)
        elif code.co_name == "populate" and name == "django.apps.registry":
            importers.add(_APP_LOADING)
        frame = frame.f_back


def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting in {"INSTALLED_APPS", "PGQUEUE", "SILENCED_SYSTEM_CHECKS"}:
        _found.clear()


setting_changed.connect(_forget)


def check_findable(path: str, task: Any) -> None:
    """Raise :class:`InvalidJob` unless a worker would find the task ``path`` (a
    ``TaskFunction`` or a path): its module in an installed app or TASK_MODULES,
    and, for a name of its own, its declaration run by what a worker imports."""
    try:
        registry.check_importable(path, getattr(getattr(task, "func", None), "__module__", None))
    except UnknownTask as exc:
        raise InvalidJob(str(exc)) from None
    problem = refusal(path, task)
    if problem is not None:
        raise InvalidJob(problem)


def refusal(path: str, target: Any) -> str | None:
    """Why a worker would not find ``target``, declared under the name ``path`` of
    its own; None when it would (or when this process cannot tell)."""
    if path in _found:
        return None  # the hot path: a set lookup for every task
    importers = _declared_by.get(path)
    if importers is None:  # its default path, or not declared by @task here
        return None
    problem = _problem(path, target, importers)
    if problem is None:
        _found.add(path)
    return problem


def _problem(path: str, target: Any, importers: set[str]) -> str | None:
    if CHECK_ID in settings.SILENCED_SYSTEM_CHECKS:
        return None
    starts = registry.task_module_names()
    named = path.rpartition(".")[0]
    imported = {*starts, named} if registry.importable(named) else set(starts)
    if _APP_LOADING in importers or importers & imported:
        return None
    try:
        registry.discover()  # to see what the tasks modules hold
    except Exception:  # a tasks module fails to import here: the workers' to say
        return None
    module = getattr(getattr(target, "func", None), "__module__", None)
    held = sys.modules.get(module) if isinstance(module, str) else None
    for importer in sorted(imported):
        found = sys.modules.get(importer)
        values = list(vars(found).values()) if found is not None else []
        if any(value is target or (held is not None and value is held) for value in values):
            return None  # re-exported by a tasks module (from .helpers import send)
    if isinstance(module, str) and module in _run_by(imported):
        return None  # imported first by a view, but a tasks module imports it too
    return _text(path, module or "?", named)


def _run_by(starts: set[str]) -> set[str]:
    """The modules of the installed apps and TASK_MODULES whose import ``starts`` run,
    as their module-level import statements say. A module imported here first by
    something else (a view) declared its tasks under that import, and a tasks module's
    ``import shop.helpers`` (or ``from shop import middle``, which imports
    ``shop.helpers``) names no object of it."""
    seen: set[str] = set()
    todo = sorted(starts)
    while todo:
        name = todo.pop()
        if name in seen or not registry.importable(name):
            continue
        seen.add(name)
        todo.extend(_imports(name))
    return seen


def _imports(name: str) -> list[str]:
    """The modules ``name``'s import runs: its packages, and those its module-level
    import statements name (not those of its functions, which a worker may never call)."""
    found = [name.rpartition(".")[0]] if "." in name else []
    spec = getattr(sys.modules.get(name), "__spec__", None)
    origin = getattr(spec, "origin", None)
    try:
        with open(str(origin), encoding="utf-8") as source:
            tree = ast.parse(source.read())
    except (OSError, SyntaxError, ValueError):
        return found
    is_package = getattr(spec, "submodule_search_locations", None) is not None
    base = name if is_package else name.rpartition(".")[0]
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            with contextlib.suppress(ImportError, ValueError):
                at = importlib.util.resolve_name("." * node.level + (node.module or ""), base)
                found += [at, *(f"{at}.{alias.name}" for alias in node.names)]
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and not (
            isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        ):
            # if/try/with at module level run as the module does (not `if TYPE_CHECKING:`)
            todo += [child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt)]
    # A dotted name (import shop.helpers) runs each of its packages too.
    return [part for full in found for part in _with_packages(full)]


def _with_packages(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


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
