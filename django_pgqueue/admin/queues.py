"""Pausing and resuming a queue from the job list's summary.

Each queue's line has a Pause or Resume button for users with the
``django_pgqueue.pause_queue`` permission ("Can pause and resume queues"). The
button posts to :func:`change_queue`, which acts through ``Job.objects`` and
writes an admin log entry on the queue's ``Queue`` row.
"""

from __future__ import annotations

from functools import partial
from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.views.decorators.http import require_POST

from django_pgqueue import conf, validation
from django_pgqueue.models import Job, Queue
from django_pgqueue.queue import pauses

PERMISSION = "django_pgqueue.pause_queue"
VERBS = {"pause": "Paused", "resume": "Resumed"}


def can_pause(request: HttpRequest) -> bool:
    """``pause_queue`` on top of ``view_job``, as each job action is."""
    return request.user.has_perm(PERMISSION) and request.user.has_perm("django_pgqueue.view_job")


def urls(model_admin: admin.ModelAdmin[Any]) -> list[URLPattern]:
    """The job admin's extra URL: ``queues/<name>/pause/`` and ``.../resume/`` (POST)."""
    view = model_admin.admin_site.admin_view(partial(change_queue, model_admin=model_admin))
    return [path("queues/<str:name>/<str:verb>/", view, name="django_pgqueue_queue_change")]


@require_POST
def change_queue(
    request: HttpRequest, name: str, verb: str, *, model_admin: admin.ModelAdmin[Any]
) -> HttpResponse:
    """Pause or resume queue ``name``, say what happened, and go back to the job list."""
    if not can_pause(request):
        raise PermissionDenied
    alias = conf.database()  # the job table's database
    # A paused queue is resumed whatever its name (a pause written by an older
    # version or by hand may hold one today's rule refuses); pausing keeps the rule.
    if verb not in VERBS or not (
        validation.QUEUE.is_valid(name) or (verb == "resume" and pauses.pausable(name, alias))
    ):
        raise Http404(f"no {verb!r} action for queue {name!r}")
    with transaction.atomic(using=alias):
        if verb == "pause":
            changed = Job.objects.pause_queue(name)
        else:
            changed = Job.objects.resume_queue(name)
        if changed:
            LogEntry.objects.log_actions(
                user_id=cast(int, request.user.pk),  # admin_view: a logged-in staff user
                queryset=Queue.objects.filter(pk=name),
                action_flag=CHANGE,
                change_message=f"{VERBS[verb]} the queue.",
            )
    if verb == "pause":
        text = (
            f"Paused queue {name!r}: its jobs stay queued until it is resumed; running jobs finish."
            if changed
            else f"Queue {name!r} was paused already."
        )
    else:
        text = f"Resumed queue {name!r}." if changed else f"Queue {name!r} was not paused."
    model_admin.message_user(request, text, messages.SUCCESS if changed else messages.INFO)
    return HttpResponseRedirect(
        reverse(f"{model_admin.admin_site.name}:django_pgqueue_job_changelist")
    )
