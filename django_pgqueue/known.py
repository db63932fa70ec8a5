"""Whether a worker would find the task a dotted path names, told at enqueue.

A job enqueued by path (``Job.objects.enqueue("shop.tasks.send")``) names its task
by text. When this process can tell that a worker would not find it (its module
does not exist, or imports and holds no task by that name), enqueue refuses it
there, where the mistake is, instead of accepting a job a worker then buries. A
module that fails to import here is left to the workers, whose environment (a
dependency only their image has) may differ.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from django_pgqueue import registry, validation, wording
from django_pgqueue.exceptions import InvalidJob, UnknownTask


def find_or_refuse(path: str) -> Any | None:
    """What a worker would run for ``path``, found as a worker finds it (after
    importing what it imports at start); None when only a worker can tell (a
    module that fails to import here). Raises :class:`InvalidJob` when a worker
    would not find it."""
    validation.TASK_PATH(path)
    try:
        registry.discover()  # a task with a name of its own registers here
    except Exception:  # a tasks module fails to import: the workers' to say
        return None
    found = registry.loaded(path)
    if found is not None:  # (its name may name no module, nor one in an app)
        return found
    try:
        registry.check_importable(path)
    except UnknownTask as exc:
        raise InvalidJob(_not_a_task(path) or str(exc)) from None
    module = path.rpartition(".")[0]
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError as exc:
        if not _missing_on_the_path(exc, module):
            return None  # what a package above it imports is missing: the workers' to say
        spec = None  # the module, or a package above it, is not there (nor a package)
    except Exception:  # a package above it fails to import: the workers' to say
        return None
    if spec is None:
        raise InvalidJob(f"task {path!r}: there is no module {module!r}{_alike(path)}")
    try:
        return registry.resolve(path)
    except UnknownTask as exc:
        if module in sys.modules:  # it imported: what the path names is not a task
            raise InvalidJob(f"{exc}{_alike(path)}") from None
        return None
    except Exception:  # the import failed here: the workers' to say
        return None


def _missing_on_the_path(exc: ModuleNotFoundError, module: str) -> bool:
    """Whether ``exc`` says that ``module`` itself, or a package above it, does not
    exist (or is a module, which holds no submodule): not that a dependency is."""
    return exc.name is not None and (exc.name == module or module.startswith(exc.name + "."))


#: What a worker runs, said where a path names something else.
RUNS_ONLY = (
    "A worker runs only a function declared with @django_pgqueue.task (or django.tasks' "
    "@task with PgQueueBackend), in a module of an installed app or of "
    "PGQUEUE['TASK_MODULES']"
)


def _not_a_task(path: str) -> str | None:
    """Why ``path``, in a module a worker would not import, is no task, when this
    process has imported the module and can tell (``json.dumps``): None when only
    importing it would tell (adding the module to TASK_MODULES may then be the fix).
    A task it held would have been registered, or found by :func:`registry.loaded`."""
    module_name, _, name = path.rpartition(".")
    module = sys.modules.get(module_name)
    if (
        module is None
        or module_name == "__main__"
        or module_name.startswith("django.core.management.")
    ):
        return None  # (a script or the shell: check_importable says where to put it)
    held = getattr(module, name, None)
    if hasattr(held, "enqueue"):  # a task, bound to another name: the module is the fix
        return None
    what = "nothing" if held is None else f"a {type(held).__name__}"
    which = "" if held is None else ", which is not a task"
    return (
        f"{path!r} is not a registered task: {module_name!r} holds {what} by that name{which}. "
        + RUNS_ONLY
    )


def framework_defaults(found: Any) -> dict[str, Any] | None:
    """The options a Tasks-framework Task carries (its ``queue_name`` and
    ``priority``, and a PgQueueTask's delivery options) as the direct API's
    options, for a job enqueued by its path; None for anything else."""
    if not hasattr(type(found), "module_path") or not hasattr(found, "queue_name"):
        return None
    # int(): Django's validation takes True, 5.0 and Decimal("5"); the row stores the int.
    defaults = {"queue": found.queue_name, "priority": int(found.priority)}
    for name in validation.TASK_EXTRAS:
        if getattr(found, name, None) is not None:
            defaults[name] = getattr(found, name)
    return defaults


def did_you_mean(path: str) -> str:
    """`` (did you mean 'shop.tasks.send'?)`` for a path no task answers to (a
    schedule's task), as enqueue says it: when its module imported, or does not
    exist; "" when the module fails to import, whose error says what to fix."""
    module = path.rpartition(".")[0]
    try:
        registry.discover()  # what a worker imports at start, to suggest from
        if module not in sys.modules and importlib.util.find_spec(module) is not None:
            return ""
    except Exception:  # a tasks module, or a package above it, fails to import
        return ""
    return _alike(path)


def _alike(path: str) -> str:
    """`` (did you mean 'shop.tasks.send'?)``: a task of the same module whose name
    looks alike, or one of the same name in a module whose name looks alike."""
    module, _, name = path.rpartition(".")
    tasks = [known.rpartition(".") for known in registry.runnables()]
    same_module = [n for m, _, n in tasks if m == module] + _framework_tasks(module)
    if same_module:
        meant = wording.closest(name, same_module)
        return f" (did you mean '{module}.{meant}'?)" if meant else ""
    meant = wording.closest(module, [m for m, _, n in tasks if n == name] + _holding(name))
    return f" (did you mean '{meant}.{name}'?)" if meant else ""


def _framework_tasks(module: str) -> list[str]:
    """The names of the Tasks-framework Tasks an imported ``module`` defines: a
    worker registers them only when it meets their path, so the registry may not
    list them yet."""
    held = sys.modules.get(module)
    return [
        attribute
        # A copy: another thread may be importing the module, adding names to it.
        for attribute, value in (list(vars(held).items()) if held is not None else [])
        # Asked of the type first: a lazy object would evaluate itself if asked.
        if hasattr(type(value), "module_path")
        and registry.recognised(value)
        and value.module_path == f"{module}.{attribute}"
    ]


def _holding(name: str) -> list[str]:
    """The imported modules of installed apps that define a Tasks-framework Task
    called ``name`` (see :func:`_framework_tasks`)."""
    return [
        module
        for module in list(sys.modules)
        if registry.importable(module) and name in _framework_tasks(module)
    ]
