"""Times Python cannot hold, read as the nearest it can.

A ``timestamptz`` column takes ``infinity``, ``-infinity`` and years BC or past
9999 (a row written by hand; enqueue refuses them), and psycopg refuses to load
them: one such row made a whole listing fail (the admin's job list, the schedule
list, ``manage.py schedules``). Inside :func:`readable`, the job database's
cursors load such a time as :data:`~django_pgqueue.validation.EARLIEST` or
:data:`~django_pgqueue.validation.LATEST` (0001-01-02 or 9999-12-30 UTC) instead.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from django.db import connections
from django.utils import timezone
from psycopg.adapt import Loader
from psycopg.pq import Format

from django_pgqueue import conf, validation

TIMESTAMPTZ = psycopg.adapters.types["timestamptz"].oid


@functools.cache
def _tolerant(base: type[Loader]) -> type[Loader]:
    """``base`` (Django's loader for the connection's time zone), tolerant."""

    class Tolerant(base):  # type: ignore[valid-type,misc]
        tolerant = True

        def load(self, data: Any) -> Any:
            try:
                return super().load(data)
            except psycopg.DataError:
                text = bytes(data)
                early = text.startswith(b"-") or text.endswith(b"BC")
                moment = validation.EARLIEST if early else validation.LATEST
                # Django's loader with USE_TZ = False gives naive times.
                return (
                    moment.replace(tzinfo=None) if getattr(self, "timezone", 0) is None else moment
                )

    return Tolerant


def _load_tolerantly(
    execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]
) -> Any:
    adapters = getattr(getattr(context["cursor"], "cursor", None), "adapters", None)
    if adapters is not None:  # a psycopg cursor (the cursor's own map: this query only)
        base = adapters.get_loader(TIMESTAMPTZ, Format.TEXT)
        if base is not None and not getattr(base, "tolerant", False):
            adapters.register_loader(TIMESTAMPTZ, _tolerant(base))
    return execute(sql, params, many, context)


@contextlib.contextmanager
def readable(alias: str | None = None) -> Iterator[None]:
    """Load the out-of-range times of database ``alias`` (the job database's by
    default) tolerantly in this block."""
    with connections[alias or conf.database()].execute_wrapper(_load_tolerantly):
        yield


def out_of_range(value: dt.datetime) -> bool:
    """Whether ``value`` is no time a worker writes: one :func:`readable` read as the
    nearest (or one at the edge of Python's years). A naive value (``USE_TZ = False``)
    is compared by its wall time."""
    if timezone.is_naive(value):
        value = value.replace(tzinfo=dt.UTC)
    return not validation.EARLIEST < value < validation.LATEST
