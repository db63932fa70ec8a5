"""What ``runworker`` prints on its console when the project configures no logging.

:func:`configure_logging` gives the worker's lines, and Django's Tasks-framework
signal lines, one timestamped format on stderr when the project has configured
no handler (on our logger or the root).
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

#: Our logger's level by ``-v``: 0 warnings and errors (failed runs among them), 1 the
#: banner and throughput too, 2 and 3 a line per job too.
LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}
#: Django's task-signal lines by ``-v`` (a run's start and end at INFO, a failed run at
#: ERROR with its traceback): none at 0, failed runs at 1, every run from 2.
FRAMEWORK_LEVELS = {0: logging.CRITICAL + 1, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}
FORMAT = "%(asctime)s %(levelname)s %(message)s"
#: Our logger; its children's records are ours too.
OURS = "django_pgqueue"


def _framework_logger() -> str | None:
    try:
        from django_pgqueue.backend.compat import TASKS_LOGGER
    except ImportError:  # neither django.tasks nor the backport: no such lines
        return None
    return TASKS_LOGGER


def configure_logging(verbosity: int) -> bool:
    """Set the level ``-v`` asks for; with no handler configured (on our logger or the
    root), log to stderr in one format, Django's task-signal lines included. Returns
    whether the worker configured the handlers."""
    ours = logging.getLogger(OURS)
    ours.setLevel(LEVELS.get(verbosity, logging.INFO))
    if ours.handlers or logging.getLogger().handlers:
        return False  # the project's LOGGING decides where (and how) lines go
    handler = console_handler(sys.stderr)
    ours.addHandler(handler)
    name = _framework_logger()
    framework = logging.getLogger(name) if name else None
    if framework is not None and not framework.handlers:
        framework.addHandler(handler)
        framework.setLevel(FRAMEWORK_LEVELS.get(verbosity, logging.WARNING))
        # Not also through Django's own "django" console handler, in another format.
        framework.propagate = False
    return True


def console_handler(stream: TextIO) -> logging.Handler:
    """The handler ``runworker`` logs to when the project configures none."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(FORMAT))
    return handler
