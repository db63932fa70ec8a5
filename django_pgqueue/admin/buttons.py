"""Retry and Cancel on a job's own page: the list's actions, for the job on screen.

Each button posts to a small view that checks the same permission as the list
action and then runs that very action on the one job, so the rules, the
messages and the admin log entries are the list's, word for word.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from django_pgqueue.admin import actions, times
from django_pgqueue.models import Job
from django_pgqueue.records import LIVE, JobStatus

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Job]
else:
    _ModelAdmin = admin.ModelAdmin


@dataclasses.dataclass(frozen=True)
class Button:
    """One button of the job page: the action it runs and when it is offered."""

    name: str  # the URL's last part, and the list action's permission
    label: str
    action: Callable[[Any, HttpRequest, Any], None]
    offered: Callable[[Job], bool]
    takes_reason: bool = False


def _retryable(job: Job) -> bool:
    # What Job.objects.retry() takes: dead and cancelled jobs, and queued ones waiting
    # for a later run_at.
    return job.status in (JobStatus.DEAD, JobStatus.CANCELLED) or (
        job.status == JobStatus.QUEUED and job.run_at > timezone.now()
    )


BUTTONS = (
    Button("retry", "Retry now", actions.retry_jobs, _retryable),
    Button(
        "cancel",
        "Cancel job",
        actions.cancel_jobs,
        # What Job.objects.cancel() takes: a queued job is cancelled, a running one
        # asked to stop.
        lambda job: job.status in LIVE,
        takes_reason=True,
    ),
)


def permitted(model_admin: _ModelAdmin, request: HttpRequest, button: Button) -> bool:
    """The button's own permission, on top of seeing jobs (as the docs' table says)."""
    check = getattr(model_admin, f"has_{button.name}_permission")
    return bool(model_admin.has_view_permission(request) and check(request))


def offered(model_admin: _ModelAdmin, request: HttpRequest, job: Job) -> list[dict[str, Any]]:
    """The buttons this user may press on this job's page, with where each posts."""
    opts = model_admin.opts
    return [
        {
            "name": b.name,
            "label": b.label,
            "takes_reason": b.takes_reason,
            "url": reverse(
                f"admin:{opts.app_label}_{opts.model_name}_{b.name}",
                args=[job.pk],
                current_app=model_admin.admin_site.name,
            ),
        }
        for b in BUTTONS
        if b.offered(job) and permitted(model_admin, request, b)
    ]


def urls(model_admin: _ModelAdmin) -> list[URLPattern]:
    """``<id>/retry/`` and ``<id>/cancel/``, POST only."""
    opts = model_admin.opts
    return [
        path(
            f"<path:object_id>/{button.name}/",
            model_admin.admin_site.admin_view(require_POST(_view(model_admin, button))),
            name=f"{opts.app_label}_{opts.model_name}_{button.name}",
        )
        for button in BUTTONS
    ]


def _view(model_admin: _ModelAdmin, button: Button) -> Callable[..., HttpResponse]:
    def view(request: HttpRequest, object_id: str) -> HttpResponse:
        with times.readable():  # a time Python cannot hold reads as the nearest
            return act(request, object_id)

    def act(request: HttpRequest, object_id: str) -> HttpResponse:
        if not permitted(model_admin, request, button):
            raise PermissionDenied
        job = model_admin.get_object(request, unquote(object_id))
        opts = model_admin.opts
        site = model_admin.admin_site.name  # the admin site the page is on
        if job is None:
            model_admin.message_user(request, f"No job with id {object_id}.", messages.WARNING)
            return HttpResponseRedirect(
                reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist", current_app=site)
            )
        # The list's action on this one job: same rules, messages and log entries.
        button.action(model_admin, request, Job.objects.filter(pk=job.pk))
        return HttpResponseRedirect(
            reverse(
                f"admin:{opts.app_label}_{opts.model_name}_change",
                args=[job.pk],
                current_app=site,
            )
        )

    return view
