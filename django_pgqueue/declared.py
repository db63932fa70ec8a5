"""What went wrong when importing the tasks modules refused a task's declaration,
in one line: told by ``check`` (E005) and by a worker that cannot start."""

from __future__ import annotations

import importlib
import os
import traceback
from collections.abc import Mapping

from django.conf import settings
from django.utils import module_loading

from django_pgqueue import wording

#: How the problem of a task naming a TASKS alias that does not exist begins.
NO_SUCH_ENTRY = "a task in the tasks modules names a TASKS entry that does not exist"


def declaration_problem(exc: BaseException) -> str | None:
    """One line for a Tasks-framework task that its backend refused as it was declared
    (``InvalidTask``: a queue the backend does not list, say), or that names a TASKS
    alias that does not exist (``InvalidTaskBackend``), found while importing the tasks
    modules; None for any other error."""
    # By name, without importing either: Django's InvalidTask and InvalidTaskBackend,
    # or the backport's InvalidTaskError and InvalidTaskBackendError (django-tasks
    # 0.12, on Django 5.2).
    kind = type(exc).__name__
    if kind in {"InvalidTaskBackend", "InvalidTaskBackendError"}:
        return f"{NO_SUCH_ENTRY}: {exc}" + (_no_default_entry() if "'default'" in str(exc) else "")
    if kind not in {"InvalidTask", "InvalidTaskError"}:
        return None
    return f"a task in the tasks modules cannot be declared: {exc}"


def _no_default_entry() -> str:
    """Why the ``'default'`` backend is missing: TASKS lacks it (a misspelt alias)."""
    configured = getattr(settings, "TASKS", None)
    if not isinstance(configured, Mapping) or "default" in configured:
        return ""
    aliases = [alias for alias in configured if isinstance(alias, str)]
    alike = wording.alike("default", aliases)
    return " (TASKS has no 'default' entry, the backend of every task declared without backend=" + (
        f": did you mean {alike}?)" if alike else ")"
    )


def import_failure(exc: BaseException) -> str:
    """One line for any other error raised while importing the tasks modules (an
    import inside an app's ``tasks.py`` that fails, say): the exception, and the
    line of the project's code that the import machinery was running."""
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith(_MACHINERY) and not frame.filename.startswith("<")
    ]
    where = f" ({frames[0].filename}, line {frames[0].lineno})" if frames else ""
    return f"importing the tasks modules failed: {type(exc).__name__}: {exc}{where}"


#: Where the frames of the import itself come from (importlib, Django's autodiscovery,
#: this package), before the project's own module.
_MACHINERY = (
    os.path.dirname(importlib.__file__) + os.sep,
    module_loading.__file__,
    os.path.dirname(__file__) + os.sep,
)
