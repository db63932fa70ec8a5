"""Formatting for the job admin: moments, short durations, relative times and JSON.

Pure functions of their arguments (``now`` is passed in), so the changelist
computes one ``now`` per page and the tests can pin it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from django_pgqueue.records import JobStatus
from django_pgqueue.validation import aware
from django_pgqueue.wording import duration

__all__ = [
    "duration",
    "error_history",
    "excerpt",
    "moment",
    "moment_field",
    "pretty_json",
    "run_at_note",
]

#: Every date and time the admin shows, with seconds (jobs run seconds apart).
MOMENT = "%Y-%m-%d %H:%M:%S %Z"


def moment(value: dt.datetime | str | None) -> str:
    """``2026-12-01 10:39:12 UTC`` in the current time zone; ``-`` for none. A string
    (an error entry's ``at``) is read as ISO 8601 first, and shown as it is if it is not."""
    if value is None or value == "":
        return "-"
    if isinstance(value, str):
        try:
            when = dt.datetime.fromisoformat(value)
        except ValueError:
            return value
    else:
        when = value
    if isinstance(value, str) and timezone.is_naive(when):
        when = when.replace(tzinfo=dt.UTC)  # an entry's own text: written in UTC
    try:
        return timezone.localtime(aware(when)).strftime(MOMENT)
    except OverflowError:  # past year 9999 (or before 1) in the local time zone
        return value if isinstance(value, str) else value.isoformat()  # as it is


def moment_field(field: str) -> Callable[[Any, Any], str]:
    """A read-only admin field that shows the datetime column ``field`` as a moment."""

    @admin.display(description=field.replace("_", " "), ordering=field)
    def show(model_admin: Any, obj: Any) -> str:
        return moment(getattr(obj, field))

    show.__name__ = f"{field}_display"
    return show


def run_at_note(status: str, run_at: dt.datetime | None, now: dt.datetime) -> str:
    """How far away a queued job's run_at is, or how long it has been overdue.

    Only queued jobs get a note: for the others run_at is history, and an
    "overdue" on a done job would send an operator chasing nothing.
    """
    if status != JobStatus.QUEUED or run_at is None:
        return ""
    seconds = (run_at - now).total_seconds()
    return f"in {duration(seconds)}" if seconds > 0 else f"overdue {duration(-seconds)}"


def excerpt(text: str, limit: int = 80) -> str:
    """The first line of ``text``, cut to ``limit`` characters with an ellipsis."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "\u2026"


def pretty_json(value: Any) -> SafeString:
    """``value`` as indented JSON in a ``<pre>`` (escaped: arguments are user data)."""
    try:
        text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    except RecursionError:
        # Nesting Python read, but that indenting (several frames a level) cannot
        # follow; the one-line encoder takes one a level.
        try:
            text = json.dumps(value, sort_keys=True, ensure_ascii=False)
        except RecursionError:
            return format_html("<p>{}</p>", "Nested too deeply to show.")
        return _shown("Nested too deeply to indent (shown on one line):", text)
    return format_html('<pre class="pgqueue-pre">{}</pre>', text)


def _shown(note: str, text: str) -> SafeString:
    """``note`` above ``text`` (its first 2,000 characters)."""
    shown = text if len(text) <= 2000 else text[:2000] + "..."
    return format_html('<p>{}</p><pre class="pgqueue-pre">{}</pre>', note, shown)


def error_history(errors: list[Any] | None) -> SafeString:
    """Every recorded failure, oldest first, each with its traceback. An entry that is
    not an object (a row written by hand) is shown as its JSON: raising on it, the
    read-only field would show "-" for the whole history."""
    if not errors:
        return format_html("<p>{}</p>", "No errors recorded.")
    return format_html_join("", "{}", ((_entry(entry),) for entry in errors))


def _entry(entry: Any) -> SafeString:
    if not isinstance(entry, dict):
        return format_html(
            '<div class="pgqueue-error"><p>{}</p>{}</div>',
            "not an error entry:",
            pretty_json(entry),
        )
    at = entry.get("time", entry.get("at"))  # "at" before 0013
    traceback = entry.get("traceback")
    return format_html(
        '<div class="pgqueue-error"><p><strong>Attempt {}</strong> at {}: '
        "<code>{}: {}</code></p>{}</div>",
        entry.get("attempt", "?"),
        moment(at) if at is None or isinstance(at, str) else at,  # a time written by hand
        entry.get("exception", "?"),
        entry.get("message", ""),
        format_html('<pre class="pgqueue-pre pgqueue-traceback">{}</pre>', traceback)
        if traceback
        else "",
    )


class ColumnFilter(admin.SimpleListFilter):
    """A list filter on one text column (``column``) of the job table."""

    column: str

    def queryset(self, request: HttpRequest, queryset: QuerySet[Model]) -> QuerySet[Model]:
        value = self.value()
        if not value:
            return queryset
        if "\x00" in value:  # no text column holds NUL, and PostgreSQL refuses it (a 500)
            return queryset.none()
        return queryset.filter(**{self.column: value})


#: A JSON column Python cannot read (see :func:`json_value`).
UNREADABLE = object()


def json_value(obj: Any, name: str) -> Any:
    """The job's JSON column ``name``: as loaded, or, on a job the change page read
    as text (``JobAdmin.get_object``: a row whose JSON Python cannot read, written
    by hand), decoded from that text; :data:`UNREADABLE` if it cannot be."""
    if not hasattr(obj, f"_pgqueue_{name}_text"):
        return getattr(obj, name)
    stored = getattr(obj, f"_pgqueue_{name}_text")
    try:
        return None if stored is None else json.loads(stored)
    except (ValueError, RecursionError):
        return UNREADABLE


def stored_json(obj: Any, name: str) -> SafeString:
    """The job's JSON column ``name`` pretty-printed, or as stored if Python cannot
    read it."""
    value = json_value(obj, name)
    if value is not UNREADABLE:
        return pretty_json(value)
    stored = getattr(obj, f"_pgqueue_{name}_text")
    return _shown("Python cannot read this JSON (shown as stored):", stored)
