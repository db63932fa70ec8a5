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
from django.contrib.admin.views.main import IGNORED_PARAMS, ChangeList
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern

from django_pgqueue.admin import unmigrated
from django_pgqueue.tolerant import readable

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin
else:

    class _ModelAdmin[M: Model](admin.ModelAdmin):
        """ModelAdmin, which is generic only in django-stubs, generic at run time too."""


__all__ = ["NulSafeChangeList", "ReadsTimes", "readable", "rendered"]


class NulSafeChangeList(ChangeList):
    """A list whose filter values holding NUL match no row: no text column holds
    one, and PostgreSQL refuses one in a value (a 500). Django lets the URL filter
    on any of the model's own fields (``?name__exact=``), so every list checks."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Any]:
        queryset = super().get_queryset(request, exclude_parameters)
        filtering = (
            v for k, vs in self.filter_params.items() if k not in IGNORED_PARAMS for v in vs
        )
        return queryset.none() if any("\x00" in value for value in filtering) else queryset


def rendered(view: Callable[[], HttpResponse]) -> HttpResponse:
    """``view()``'s response, rendered inside :func:`readable` (a template reads the
    rows it lists as it renders)."""
    with readable():
        response = view()
        if isinstance(response, TemplateResponse):
            response.render()
    return response


class ReadsTimes[M: Model](_ModelAdmin[M]):
    """A model admin whose pages read such times tolerantly: its list and its
    pages, and Django's delete and history pages.

    A subclass that adds to a list's or a page's context overrides
    :meth:`changelist_response` or :meth:`change_response` (still unrendered
    there), not the views: the rows are read as the template renders. One that
    adds URLs returns them from :meth:`extra_urls`: every URL, Django's and
    those, says to run ``migrate`` while the queue's tables are missing.
    """

    def get_urls(self) -> list[URLPattern]:
        return unmigrated.guard_urls(self, [*self.extra_urls(), *super().get_urls()])

    def extra_urls(self) -> list[URLPattern]:
        """The admin's own URLs, before Django's (whose last one takes any path)."""
        return []

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return NulSafeChangeList

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> M | None:
        # No key holds NUL, and PostgreSQL refuses one in a value: Django's pages
        # then say that the row does not exist, instead of a 500.
        if "\x00" in object_id:
            return None
        return super().get_object(request, object_id, from_field)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return rendered(functools.partial(self.changelist_response, request, extra_context))

    def changelist_response(
        self, request: HttpRequest, extra_context: dict[str, Any] | None
    ) -> HttpResponse:
        """The list's response, not rendered yet (inside :func:`readable`)."""
        return super().changelist_view(request, extra_context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        return rendered(
            functools.partial(self.change_response, request, object_id, form_url, extra_context)
        )

    def change_response(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str,
        extra_context: dict[str, Any] | None,
    ) -> HttpResponse:
        """A row's page, not rendered yet (inside :func:`readable`)."""
        return super().change_view(request, object_id, form_url, extra_context)

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return rendered(functools.partial(super().delete_view, request, object_id, extra_context))

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return rendered(functools.partial(super().history_view, request, object_id, extra_context))
