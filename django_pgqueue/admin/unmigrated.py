"""The admin's pages before ``migrate`` (or after an upgrade without it): every
page of the app's admins says which table, column or function is missing and
to run ``manage.py migrate``, instead of a server error.

One guard wraps every URL of a :class:`~django_pgqueue.admin.times.ReadsTimes`
admin (its lists, pages, actions and buttons) and renders the page inside it,
so a query a template runs is caught too. It answers so only while a migration of
the app is not applied: with all of them applied, ``migrate`` would not help.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.db import DatabaseError, connections, transaction
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern
from django.utils.cache import add_never_cache_headers

from django_pgqueue import conf
from django_pgqueue.dberrors import schema_problem

TEMPLATE = "admin/django_pgqueue/unmigrated.html"
#: The status of the page: the admin cannot serve it until the tables exist.
STATUS = 503


def page(model_admin: admin.ModelAdmin[Any], request: HttpRequest, problem: str) -> HttpResponse:
    """The admin page that says the tables are missing and how to create them."""
    request.current_app = model_admin.admin_site.name  # its links stay on this site
    response = TemplateResponse(
        request,
        TEMPLATE,
        {
            **model_admin.admin_site.each_context(request),
            "title": "The job queue's tables are missing or out of date",
            "problem": problem[:1].upper() + problem[1:],
            "opts": model_admin.opts,
        },
        status=STATUS,
    )
    add_never_cache_headers(response)
    return response.render()


def unapplied(alias: str) -> bool:
    """Whether some migration of django_pgqueue is not applied to ``alias``. When
    all are, a missing table, column or function is no missing migrate (a query's
    bug, another app's table): ``migrate`` would not help, so the error is raised
    (False too when the check itself fails)."""
    try:
        executor = MigrationExecutor(connections[alias])
        graph = executor.loader.graph
        targets = [node for node in graph.leaf_nodes() if node[0] == "django_pgqueue"]
        return bool(executor.migration_plan(targets))
    except DatabaseError:
        return False


def guard(model_admin: admin.ModelAdmin[Any], view: Callable[..., Any]) -> Callable[..., Any]:
    """``view``, rendered, or :func:`page` when the queue's schema is not there."""

    @functools.wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        alias = conf.database()
        # Under ATOMIC_REQUESTS, a savepoint: the page's own queries (a staff user's
        # permissions) then run in a transaction the error has not aborted.
        atomic = connections[alias].in_atomic_block
        try:
            with transaction.atomic(using=alias) if atomic else contextlib.nullcontext():
                response = view(request, *args, **kwargs)
                if isinstance(response, TemplateResponse) and not response.is_rendered:
                    response.render()  # the rows a list shows are read as it renders
        except DatabaseError as exc:
            problem = schema_problem(exc, alias)
            if problem is None or not unapplied(alias):
                raise
            return page(model_admin, request, problem)
        return response

    return guarded


def guard_urls(model_admin: admin.ModelAdmin[Any], urls: list[URLPattern]) -> list[URLPattern]:
    """``urls`` with each view wrapped in :func:`guard`."""
    return [
        URLPattern(url.pattern, guard(model_admin, url.callback), url.default_args, url.name)
        for url in urls
    ]
