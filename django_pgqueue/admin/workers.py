"""The admin's view of the worker registry: a read-only list of workers, the job
list's worker filter, and the job page's lease line, which says when the worker
holding a running job is gone (before the job's lease expires and the reaper
takes it back)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.db.models import (
    BooleanField,
    Count,
    ExpressionWrapper,
    IntegerField,
    OuterRef,
    QuerySet,
    Subquery,
)
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_pgqueue import conf
from django_pgqueue.admin import times
from django_pgqueue.admin.display import ColumnFilter, duration, moment_field
from django_pgqueue.models import Job, RegisteredWorker
from django_pgqueue.monitoring.models import alive_now
from django_pgqueue.queue import presence
from django_pgqueue.records import JobStatus


def running_jobs_url(worker_id: str, site: str) -> str:
    """The job list of admin site ``site`` filtered to the worker's running jobs."""
    query = urlencode(
        {"status__exact": JobStatus.RUNNING.value, WorkerFilter.parameter_name: worker_id}
    )
    return f"{reverse('admin:django_pgqueue_job_changelist', current_app=site)}?{query}"


def worker_link(worker_id: str, site: str) -> SafeString:
    try:
        url = reverse(
            # quote(): the admin reads "_2F" in a URL's id as "/", so a worker id
            # holding it would link to another (or no) worker.
            "admin:django_pgqueue_registeredworker_change",
            args=[quote(worker_id)],
            current_app=site,
        )
    except NoReverseMatch:  # the workers admin is not on this site
        return format_html("{}", worker_id)
    return format_html('<a href="{}">{}</a>', url, worker_id)


def lease_note(job: Job, site: str) -> SafeString:
    """The job page's lease line: who holds it, for how long, and whether that
    worker is alive."""
    # complete, fail, release and reap clear locked_until; locked_by stays as history.
    if job.status != JobStatus.RUNNING or job.locked_until is None:
        if job.locked_by:
            return format_html("none (last held by {})", job.locked_by)
        return format_html("{}", "none")
    now = presence.database_now(job._state.db or conf.database())  # locked_until's clock
    seconds = (job.locked_until - now).total_seconds()
    holder = RegisteredWorker.objects.filter(pk=job.locked_by).first()
    # A link to the worker's row when it has one (an older worker may not).
    name = worker_link(holder.id, site) if holder is not None else format_html("{}", job.locked_by)
    if seconds < 0:
        return format_html(
            "held by {}, expired {} ago: the reaper will put the job back",
            name,
            duration(-seconds),
        )
    if holder is not None and not holder.alive_at(now):
        return format_html(
            "held by {} for {} more, but that worker is gone (last seen {} ago): "
            "the reaper will put the job back once the lease expires",
            name,
            duration(seconds),
            duration((now - holder.last_seen).total_seconds()),
        )
    return format_html("held by {} for {} more", name, duration(seconds))


class WorkerFilter(ColumnFilter):
    """Jobs by the worker holding (or last holding) them; choices: registered workers."""

    title = "worker"
    parameter_name = "worker"
    column = "locked_by"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        ids = set(RegisteredWorker.objects.values_list("id", flat=True))
        if self.value():
            ids.add(str(self.value()))
        return [(worker_id, worker_id) for worker_id in sorted(ids)]


MOMENTS = ("started_at", "last_seen", "alive_until")


class WorkerAdmin(times.ReadsTimes[RegisteredWorker]):
    """Read-only: rows are written by the workers' heartbeats."""

    list_display = (
        "id",
        "state",
        "hostname",
        "pid",
        "queue_list",
        "concurrency",
        "running_jobs",
        "jobs_done",
        "version",
        "started_at_display",
        "last_seen_display",
    )
    ordering = ("hostname", "id")
    search_fields = ("id", "hostname")
    # Its times as the job pages show them, with seconds and the zone.
    # jobs_running is shown as running_jobs: a gone worker's heartbeat count is stale.
    exclude = (*MOMENTS, "jobs_running")
    readonly_fields = (
        *(
            f"{f.name}_display" if f.name in MOMENTS else f.name
            for f in RegisteredWorker._meta.fields
            if f.name != "jobs_running"
        ),
        "state",
        "running_jobs",
    )
    started_at_display = moment_field("started_at")
    last_seen_display = moment_field("last_seen")
    alive_until_display = moment_field("alive_until")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(
        self, request: HttpRequest, obj: RegisteredWorker | None = None
    ) -> bool:
        return False

    def has_delete_permission(
        self, request: HttpRequest, obj: RegisteredWorker | None = None
    ) -> bool:
        return False  # a gone worker's row is forgotten on its own, an hour later

    def get_queryset(self, request: HttpRequest) -> QuerySet[RegisteredWorker]:
        # Alive or gone by the database's clock, which writes alive_until.
        alive = ExpressionWrapper(alive_now(), output_field=BooleanField())
        # A gone worker's last heartbeat is stale: what it still runs is what the
        # table still holds (0 once the reaper has given its jobs back).
        held = (
            Job.objects.running()
            .filter(locked_by=OuterRef("pk"))
            .values("locked_by")
            .annotate(n=Count("*"))
            .values("n")
        )
        left = Coalesce(Subquery(held, output_field=IntegerField()), 0)
        return super().get_queryset(request).annotate(alive_now=alive, left_running=left)

    @admin.display(description="state")
    def state(self, obj: RegisteredWorker) -> SafeString:
        if getattr(obj, "alive_now", False):
            return format_html('<span class="pgqueue-worker-alive">{}</span>', "alive")
        return format_html('<strong class="pgqueue-worker-gone">{}</strong>', "gone")

    @admin.display(description="queues")
    def queue_list(self, obj: RegisteredWorker) -> str:
        names = obj.queue_names()
        return ", ".join(names) if names is not None else "every queue"

    @admin.display(description="jobs running")
    def running_jobs(self, obj: RegisteredWorker) -> SafeString:
        alive = getattr(obj, "alive_now", False)
        count = obj.jobs_running if alive else getattr(obj, "left_running", obj.jobs_running)
        return format_html(
            '<a href="{}">{}</a>', running_jobs_url(obj.id, self.admin_site.name), count
        )
