"""What ``runworker`` prints on its console when the project configures no logging.

:func:`configure_logging` gives the worker's lines, and Django's Tasks-framework
signal lines, one timestamped format on stderr when the project has configured
no handler (on our logger or the root). A failed run of a Tasks-framework task
is logged twice with its exception: by Django's ``task_finished`` receiver (ERROR,
with its traceback) and then by the worker (with ``exc_info``, for error
trackers); the console prints the traceback once (:class:`TracebackOnce`).
"""

from __future__ import annotations

import copy
import logging
import sys
import threading
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
    handler.addFilter(TracebackOnce())
    return handler


class TracebackOnce(logging.Filter):
    """Our line for an exception whose traceback the console has just printed for
    another logger (Django's task_finished line for the same failed run, on the
    same thread, just before) is printed without it.

    Only this handler's copy of the record loses it: other handlers (an error
    tracker's) get the record with its ``exc_info``. Without Django's line (its
    receiver disconnected, its logger silenced), ours prints the traceback. Each
    thread remembers one exception, the last another logger printed, until our
    next line: the same exception object raised again by a later run (a
    module-level instance) has its traceback printed again.
    """

    def __init__(self) -> None:
        super().__init__()
        self._printed = threading.local()

    def filter(self, record: logging.LogRecord) -> bool | logging.LogRecord:
        if record.name != OURS and not record.name.startswith(OURS + "."):
            # Django's line: remember what it prints (no reference kept without one).
            self._printed.exc = record.exc_info[1] if record.exc_info else None
            return True
        printed = getattr(self._printed, "exc", None)
        if printed is None:
            return True
        self._printed.exc = None  # ours follows at once, or not at all
        if not record.exc_info or record.exc_info[1] is not printed:
            return True
        shown = copy.copy(record)
        shown.exc_info = None
        shown.exc_text = None
        return shown
