"""The job admin's actions: retry, cancel (and ask running jobs to stop) and delete,
each through the manager.

Every action changes only the rows the queue's rules allow, says how many it
changed, names the ones it skipped with their status, and writes one admin log
entry per changed job.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.contrib.admin.models import CHANGE, LogEntry
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from django_pgqueue import conf
from django_pgqueue.models import Job
from django_pgqueue.queue import maintenance
from django_pgqueue.records import FINISHED, JobStatus

#: Skipped ids named in a message; a longer list only adds "and N more".
NAMED_SKIPS = 10
#: The longest reason an operator types for a cancel.
REASON_LENGTH = 200


class ReasonField(forms.CharField):
    """The reason typed for a cancel, made storable rather than refused: without NUL
    characters (PostgreSQL cannot store them) and cut to 200 characters. A refused
    field would refuse the whole action bar, which Django reports as "No action
    selected."."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(required=False, label="Reason (for cancel):", **kwargs)
        self.widget.attrs["maxlength"] = str(REASON_LENGTH)  # the browser's own limit

    def to_python(self, value: Any) -> str:
        typed = str(super().to_python(value)).replace("\x00", "").strip()
        return typed[:REASON_LENGTH].strip()


class JobActionForm(ActionForm):
    """The action bar, with the reason a cancel records on the job."""

    reason = ReasonField()


def jobs(count: int) -> str:
    return f"{count} job" if count == 1 else f"{count} jobs"


def describe_skipped(ids: Collection[int]) -> str:
    """``#7 running, #9 done`` for the first few skipped ids, with how many more."""
    rows = Job.objects.filter(pk__in=ids).order_by("id").values_list("id", "status")
    named = ", ".join(f"#{pk} {status}" for pk, status in rows[:NAMED_SKIPS])
    more = len(ids) - NAMED_SKIPS
    return f"{named} and {more} more" if more > 0 else named


def report(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    done: str,
    changed: int,
    skipped: Collection[int],
    why: str,
) -> None:
    """One success message for the changed rows, one warning naming the skipped ones."""
    if changed:
        model_admin.message_user(request, done, messages.SUCCESS)
    if skipped:
        if len(skipped) == 1:  # "1 job that was", not "1 job that were"
            why = why.replace("that were ", "that was ", 1)
        model_admin.message_user(
            request,
            f"Skipped {jobs(len(skipped))} {why}: {describe_skipped(skipped)}.",
            messages.WARNING,
        )


def log_change(request: HttpRequest, ids: Collection[int], message: str) -> None:
    """One CHANGE log entry per job, written in one statement."""
    if ids:
        LogEntry.objects.log_actions(
            # The admin only runs actions for a logged-in staff user, so pk is set.
            user_id=cast(int, request.user.pk),
            action_flag=CHANGE,
            change_message=message,
            queryset=Job.objects.filter(pk__in=ids).only("id", "task", "status").order_by("id"),
        )


def given_reason(request: HttpRequest) -> str:
    """The reason typed for a cancel, cleaned by the action bar's field (the job page's
    button posts it without the bar's form)."""
    return str(ReasonField().clean(request.POST.get("reason", ""))) or "no reason given"


def selected_ids(queryset: QuerySet[Job]) -> list[int]:
    return list(queryset.order_by().values_list("id", flat=True))


@admin.action(permissions=["retry"], description="Retry selected jobs now")
def retry_jobs(
    model_admin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Job]
) -> None:
    """Dead and cancelled jobs, and queued ones waiting for a later run_at, run again now."""
    ids = selected_ids(queryset)
    with transaction.atomic(using=conf.database()):  # the job table's database
        retried = Job.objects.retry(ids)
        log_change(request, retried, "Retried: queued now, attempts reset.")
    report(
        model_admin,
        request,
        f"Retried {jobs(len(retried))}: queued now, attempts reset.",
        len(retried),
        sorted(set(ids) - set(retried)),
        "that cannot be retried (only dead and cancelled jobs, and queued jobs waiting for "
        "a later run_at, can be; one whose unique_key is live again cannot)",
    )


@admin.action(
    permissions=["cancel"], description="Cancel selected jobs (running ones are asked to stop)"
)
def cancel_jobs(
    model_admin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Job]
) -> None:
    """Queued jobs become cancelled, and running ones are asked to stop, with the
    operator's reason and name."""
    reason = f"{given_reason(request)} (by {request.user.get_username()} in the admin)"
    ids = selected_ids(queryset)
    with transaction.atomic(using=conf.database()):  # the job table's database
        # (Job.objects.cancel()'s statement, saying which jobs had been asked before.)
        acted = maintenance.cancel(ids, reason, conf.database())
        # A job asked before keeps that first request and its reason: it is named
        # with the reason it keeps, and nothing new is logged for it. The statement
        # says which, from the row it locked: the request's time may come after this
        # transaction began (another cancel that committed while this one waited).
        already = dict(
            Job.objects.filter(pk__in=[pk for pk, (_, before) in acted.items() if before])
            .order_by("id")
            .values_list("id", "cancel_reason")
        )
        stopping = {
            pk for pk, (status, before) in acted.items() if status == JobStatus.RUNNING
        } - already.keys()
        cancelled = sorted(set(acted) - stopping - already.keys())
        log_change(request, cancelled, f"Cancelled: {reason}")
        log_change(request, stopping, f"Asked to stop: {reason}")
    report(
        model_admin,
        request,
        f"Cancelled {jobs(len(cancelled))}: {reason}.",
        len(cancelled),
        sorted(set(ids) - set(acted)),
        "that were not queued or running",
    )
    if stopping:
        model_admin.message_user(
            request,
            f"Asked {len(stopping)} running {'job' if len(stopping) == 1 else 'jobs'} to "
            f"stop: {reason}. "
            "Each ends cancelled once its task stops; one that finishes first ends as it finished.",
            messages.SUCCESS,
        )
    if already:
        named = "; ".join(f"#{pk}: {kept}" for pk, kept in list(already.items())[:NAMED_SKIPS])
        more = len(already) - NAMED_SKIPS
        model_admin.message_user(
            request,
            f"{jobs(len(already))} had already been asked to stop, and "
            f"{'keeps its' if len(already) == 1 else 'keep their'} first request: {named}"
            + (f" and {more} more." if more > 0 else "."),
            messages.WARNING,
        )


@admin.action(permissions=["delete"], description="Delete selected finished jobs")
def delete_finished_jobs(
    model_admin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Job]
) -> None:
    """Done and dead jobs are deleted; queued and running ones are left alone."""
    ids = selected_ids(queryset)
    with transaction.atomic(using=conf.database()):  # the job table's database
        # Lock the finished rows first, so that a job retried meanwhile is neither
        # logged nor deleted; log before deleting, as log_deletions requires. In id
        # order, as retry() and cancel() lock them: taken in the order the table
        # stores them, a delete and a retry of the same jobs could deadlock.
        deleted = set(
            Job.objects.select_for_update()
            .filter(pk__in=ids, status__in=FINISHED)
            .order_by("id")
            .values_list("id", flat=True)
        )
        finished = Job.objects.filter(pk__in=deleted).only("id", "task", "status").order_by("id")
        model_admin.log_deletions(request, finished)
        finished.delete()
    report(
        model_admin,
        request,
        f"Deleted {jobs(len(deleted))}.",
        len(deleted),
        sorted(set(ids) - deleted),
        "that were not finished (only done, dead and cancelled jobs can be)",
    )
