"""A job's error history as the Tasks framework's TaskErrors."""

from __future__ import annotations

import builtins
from typing import Any

from django_pgqueue.backend.compat import TaskError
from django_pgqueue.control import CANCELLED, Cancel
from django_pgqueue.exceptions import LeaseExpired, OutcomeNotStored, WorkerShutdown

CANCEL_PATH = f"{Cancel.__module__}.{Cancel.__qualname__}"
#: The exceptions the queue itself names in error histories, by their stored names.
_OURS = {
    cls.__name__: f"{cls.__module__}.{cls.__qualname__}"
    for cls in (LeaseExpired, WorkerShutdown, OutcomeNotStored)
}


def task_errors(history: Any) -> list[TaskError]:
    """The job's error history as TaskErrors. A history that is not a list of
    entries (a row written by hand) gives what it can: one bad entry must not fail
    every run of the job before its task starts."""
    if not isinstance(history, list):
        return []
    return [task_error(entry) for entry in history if isinstance(entry, dict)]


def task_error(entry: dict[str, Any]) -> TaskError:
    """One entry of the job's error history as a TaskError.

    The executor stores builtin exceptions by bare name (``ValueError``); Django
    wants an importable path (``builtins.ValueError``). A cancellation
    (``Cancelled``) is reported as ``django_pgqueue.control.Cancel``, its
    traceback ending with ``Cancelled: <reason>``; the other names the queue
    itself writes (``LeaseExpired``, ``WorkerShutdown``, ``OutcomeNotStored``)
    as their classes in ``django_pgqueue.exceptions``, so that ``exception_class``
    imports.
    """
    name = _text(entry.get("exception")) or "Exception"
    if name == CANCELLED:
        before = _text(entry.get("traceback"))
        reason = f"{CANCELLED}: {_text(entry.get('message'))}\n"
        return TaskError(
            exception_class_path=CANCEL_PATH,
            traceback=f"{before.rstrip()}\n{reason}" if before else reason,
        )
    if "." not in name:
        if name in _OURS:
            name = _OURS[name]
        elif isinstance(getattr(builtins, name, None), type):
            name = f"builtins.{name}"
    trace = _text(entry.get("traceback"))
    if not trace:  # refusals and lease expiries record no traceback: keep the message
        message = _text(entry.get("message"))
        trace = f"{name.rpartition('.')[2]}: {message}\n" if message else f"{name}\n"
    return TaskError(exception_class_path=name, traceback=trace)


def _text(value: Any) -> str:
    """A field of an entry as text: the queue writes strings, and a row written by
    hand may hold anything JSON does (a number, a list, null)."""
    if isinstance(value, str):
        return value
    return "" if value is None or value is False else str(value)
