"""The Job admin: a read-only view of the queue, with retry, cancel and delete, and the
queues' pause and resume buttons above the list.

Nothing here writes a job row except through ``Job.objects`` (the actions);
the job page is read-only for everyone, superusers included, because an edited
status or lease would bypass the state machine the queue relies on.
"""

from __future__ import annotations

import re
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from django_pgqueue.admin import actions, buttons, display, queues, times, workers
from django_pgqueue.admin.changelist import (
    CappedPaginator,
    JobChangeList,
    QueueFilter,
    TaskFilter,
    request_stats,
)
from django_pgqueue.admin.schedules import ScheduleFilter
from django_pgqueue.admin.summary import STATUSES, summarise
from django_pgqueue.models import USER_JSON, Job, Queue
from django_pgqueue.records import FINISHED

#: A search term that names one job: ``123`` or ``#123`` (bigint range, ASCII digits).
JOB_ID = re.compile(r"#?([0-9]{1,18})")


class JobAdmin(times.ReadsTimes[Job]):
    list_display = (
        "id",
        "task_path",
        "queue",
        "status_badge",
        "attempts_of_max",
        "run_at_display",
        "age",
        "error_excerpt",
    )
    list_display_links = ("id", "task_path")
    list_filter = ("status", QueueFilter, TaskFilter, workers.WorkerFilter, ScheduleFilter)
    # A number is looked up as an id alone (get_search_results); other terms match
    # part of the task path or a whole unique_key ("=" would compare UPPER() texts).
    search_fields = ("task", "unique_key__exact")
    search_help_text = (
        "A job id (123 or #123: a number is taken as one), part of a task path, or an "
        "exact unique_key."
    )
    ordering = ("-id",)
    # Sorting by any other column would sort the whole table on every page.
    sortable_by = ("id",)
    list_per_page = 50
    show_full_result_count = False
    # Facet counts run one COUNT per filter choice over the whole table.
    show_facets = admin.ShowFacets.NEVER
    paginator = CappedPaginator
    action_form = actions.JobActionForm
    actions = (actions.retry_jobs, actions.cancel_jobs, actions.delete_finished_jobs)
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "task",
                    "queue",
                    "priority",
                    "status",
                    "attempts_of_max",
                    "snoozes",
                    "unique_key",
                    "concurrency_key",
                    "schedule",
                )
            },
        ),
        (
            "Timing",
            {
                "fields": (
                    "created_at_display",
                    "run_at_display",
                    "started_at_display",
                    "attempted_at_display",
                    "done_at_display",
                )
            },
        ),
        (
            "Lease",
            {"fields": ("locked_until_display", "lease_left", "locked_by", "worker_list")},
        ),
        ("Cancellation", {"fields": ("cancel_request",)}),
        ("Call", {"fields": ("args_json", "kwargs_json", "result_json")}),
        ("Errors", {"fields": ("last_error", "error_history")}),
    )
    readonly_fields = (
        "attempts_of_max",
        "created_at_display",
        "run_at_display",
        "started_at_display",
        "attempted_at_display",
        "done_at_display",
        "locked_until_display",
        "lease_left",
        "worker_list",
        "cancel_request",
        "args_json",
        "kwargs_json",
        "result_json",
        "error_history",
    )

    # -- permissions -------------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # jobs are enqueued by code, in the caller's transaction

    def has_change_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return False  # the page is read-only; jobs change only through the actions

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        # Deleting a queued or running job would lose work silently.
        return super().has_delete_permission(request, obj) and (
            obj is None or obj.status in FINISHED
        )

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.retry_job")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.cancel_job")

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        # action_location exists from Django 6.1, which warns about an override without it.
        found = (
            super().get_actions(request)
            if action_location is None
            else super().get_actions(request, action_location)
        )
        # The site-wide "delete selected" would delete running jobs too; ours skips them.
        found.pop("delete_selected", None)
        return found

    # -- the changelist --------------------------------------------------------------

    def extra_urls(self) -> list[URLPattern]:
        return [*queues.urls(self), *buttons.urls(self)]

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return JobChangeList

    def changelist_response(
        self, request: HttpRequest, extra_context: dict[str, Any] | None
    ) -> HttpResponse:
        response = super().changelist_response(request, extra_context)
        if isinstance(response, TemplateResponse) and response.context_data is not None:
            # Added after the changelist ran, so the queue filter's stats() is reused.
            paused = dict(
                Queue.objects.filter(paused_at__isnull=False).values_list("name", "paused_at")
            )
            response.context_data["queue_summary"] = summarise(request_stats(request), paused)
            response.context_data["queue_statuses"] = STATUSES
            response.context_data["can_pause_queues"] = queues.can_pause(request)
        return response

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        # "id = n OR task ILIKE ..." would scan the table; an id is found on the key.
        match = JOB_ID.fullmatch(search_term.strip())
        if match:
            return queryset.filter(pk=int(match[1])), False
        found, duplicates = super().get_search_results(request, queryset, search_term)
        if len(search_term.split()) > 1:  # Django looks for each word: a key may hold spaces
            found = found | queryset.filter(unique_key=search_term.strip())
        return found, duplicates

    @admin.display(description="task")
    def task_path(self, obj: Job) -> SafeString:
        # May wrap after each dot: a long path must not widen the list past the screen.
        return format_html_join(
            mark_safe(".<wbr>"), "{}", ((part,) for part in obj.task.split("."))
        )

    @admin.display(description="status")
    def status_badge(self, obj: Job) -> SafeString:
        return format_html(
            '<span class="pgqueue-status pgqueue-{}">{}</span>', obj.status, obj.status
        )

    @admin.display(description="attempts")
    def attempts_of_max(self, obj: Job) -> str:
        return f"{obj.attempts} of {obj.max_attempts}"

    @admin.display(description="run at")
    def run_at_display(self, obj: Job) -> SafeString:
        note = display.run_at_note(obj.status, obj.run_at, timezone.now())
        # Breakable only between the date and the time, so the list's column can be narrow.
        day, _, time_of_day = display.moment(obj.run_at).partition(" ")
        when = f"{day} {time_of_day.replace(' ', chr(0xA0))}"
        overdue = note.startswith("overdue")
        return format_html(
            '{} <span class="pgqueue-note{}">{}</span>',
            when,
            " pgqueue-overdue" if overdue else "",
            f"({note})" if note else "",
        )

    @admin.display(description="age")
    def age(self, obj: Job) -> str:
        return display.duration((timezone.now() - obj.created_at).total_seconds())

    @admin.display(description="last error")
    def error_excerpt(self, obj: Job) -> SafeString:
        return format_html(
            '<span title="{}">{}</span>', obj.last_error, display.excerpt(obj.last_error)
        )

    # -- the job page ---------------------------------------------------------------------

    # One format with seconds for every moment on the page (Django's drops them).
    created_at_display = display.moment_field("created_at")
    started_at_display = display.moment_field("started_at")
    attempted_at_display = display.moment_field("attempted_at")
    done_at_display = display.moment_field("done_at")
    locked_until_display = display.moment_field("locked_until")

    def change_response(
        self, request: HttpRequest, object_id: str, form_url: str, extra: dict[str, Any] | None
    ) -> HttpResponse:
        job = self.get_object(request, unquote(object_id))
        offered = buttons.offered(self, request, job) if job is not None else []
        extra = {**(extra or {}), "pgqueue_buttons": offered}
        return super().change_response(request, object_id, form_url, extra)

    @admin.display(description="lease")
    def lease_left(self, obj: Job) -> SafeString:
        return workers.lease_note(obj, self.admin_site.name)

    @admin.display(description="cancel request")
    def cancel_request(self, obj: Job) -> str:
        if obj.cancel_requested_at is None:
            return "none"
        return f"asked to stop at {display.moment(obj.cancel_requested_at)}: {obj.cancel_reason}"

    @admin.display(description="workers that claimed it")
    def worker_list(self, obj: Job) -> SafeString | str:
        workers = display.json_value(obj, "worker_ids")
        if workers is display.UNREADABLE or not isinstance(workers, list | None):
            return display.stored_json(obj, "worker_ids")
        return ", ".join(str(worker) for worker in workers or []) or "none yet"

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Job | None:
        """The job, also when Python cannot read its JSON (a number past int's digits,
        nesting past the recursion limit: a row the worker buried for it). Django
        took the ValueError for "does not exist"; its JSON is shown as stored."""
        try:
            found = super().get_object(request, object_id, from_field)
        except RecursionError:
            found = None
        if found is not None or from_field is not None:
            return found
        # Every JSON column: the row may have been written by hand.
        shown = (*USER_JSON, "errors", "worker_ids")
        text = {f"_pgqueue_{name}_text": Cast(name, TextField()) for name in shown}
        queryset = self.get_queryset(request).defer(*shown, "retry_policy").annotate(**text)
        try:
            return queryset.get(pk=int(object_id))
        except (Job.DoesNotExist, ValueError, OverflowError):
            return None

    @admin.display(description="args")
    def args_json(self, obj: Job) -> SafeString:
        return display.stored_json(obj, "args")

    @admin.display(description="kwargs")
    def kwargs_json(self, obj: Job) -> SafeString:
        return display.stored_json(obj, "kwargs")

    @admin.display(description="result")
    def result_json(self, obj: Job) -> SafeString:
        return display.stored_json(obj, "result")

    @admin.display(description="error history")
    def error_history(self, obj: Job) -> SafeString:
        errors = display.json_value(obj, "errors")
        if errors is display.UNREADABLE:
            return display.stored_json(obj, "errors")
        return display.error_history(errors)
