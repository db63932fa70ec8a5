"""Times Python cannot hold, read in the admin as the nearest it can.

A ``timestamptz`` column takes ``infinity``, ``-infinity`` and years BC or past
9999 (a row written by hand; enqueue refuses them), and psycopg refuses to load
them: one such row on a page made the whole job list fail. While a job page
renders, the job database's cursors load such a time as 0001-01-02 or
9999-12-30 UTC instead.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import psycopg
from django.contrib import admin
from django.db import connections
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from psycopg.adapt import Loader
from psycopg.pq import Format

from django_pgqueue import conf, validation
from django_pgqueue.models import Job

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Job]
else:  # ModelAdmin is generic only in django-stubs, not at runtime.
    _ModelAdmin = admin.ModelAdmin

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
def readable() -> Iterator[None]:
    """Load the job database's out-of-range times tolerantly in this block."""
    with connections[conf.database()].execute_wrapper(_load_tolerantly):
        yield


def rendered(view: Callable[[], HttpResponse]) -> HttpResponse:
    """``view()``'s response, rendered inside :func:`readable` (a template reads the
    rows it lists as it renders)."""
    with readable():
        response = view()
        if isinstance(response, TemplateResponse):
            response.render()
    return response


class ReadsTimes(_ModelAdmin):
    """The job admin's own views that read a job (its list and page: ``JobAdmin``),
    and Django's delete and history pages, read such times tolerantly."""

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return rendered(functools.partial(super().delete_view, request, object_id, extra_context))

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return rendered(functools.partial(super().history_view, request, object_id, extra_context))
