"""Times Python cannot hold, read in the admin as the nearest it can (see
:mod:`django_pgqueue.tolerant`): while a job page renders, the job database's
cursors load such a time as 0001-01-02 or 9999-12-30 UTC instead of failing the
page for every job on it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from django_pgqueue.models import Job
from django_pgqueue.tolerant import readable

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Job]
else:  # ModelAdmin is generic only in django-stubs, not at runtime.
    _ModelAdmin = admin.ModelAdmin

__all__ = ["ReadsTimes", "readable", "rendered"]


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
