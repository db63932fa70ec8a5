"""The admin's view of periodic schedules: a read-only list (state, last tick and
its job, next tick, a link to the schedule's jobs), the Enable and Disable
actions (permission ``django_pgqueue.toggle_schedule``), and the job list's
schedule filter (``?schedule=NAME``)."""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_pgqueue import conf, wording
from django_pgqueue.admin import times
from django_pgqueue.admin.display import ColumnFilter
from django_pgqueue.exceptions import SchedulesBusy
from django_pgqueue.models import Schedule
from django_pgqueue.periodic.models import ScheduleQuerySet
from django_pgqueue.periodic.overview import OUT_OF_RANGE, ScheduleView, describe, local_moment
from django_pgqueue.tolerant import out_of_range


def jobs_url(name: str, site: str) -> str:
    """The job list of admin site ``site`` filtered to one schedule's jobs."""
    query = urlencode({ScheduleFilter.parameter_name: name})
    return f"{reverse('admin:django_pgqueue_job_changelist', current_app=site)}?{query}"


class ScheduleFilter(ColumnFilter):
    """Jobs a schedule's ticks enqueued (the pgqueue_job_schedule index serves it).

    Its choices are the settings' schedules, so the job list pays no query for
    them; a removed schedule's jobs are one link away, from the schedules list.
    With no schedule at all the filter is not shown."""

    title = "schedule"
    parameter_name = "schedule"
    column = "schedule"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = {spec.name for spec in conf.get().schedules}
        if self.value():
            names.add(str(self.value()))
        return [(name, name) for name in sorted(names)]


def _toggle(enabled: bool) -> Any:
    verb = "enable" if enabled else "disable"

    @admin.action(permissions=["toggle"], description=f"{verb.capitalize()} selected schedules")
    def action(
        modeladmin: ScheduleAdmin, request: HttpRequest, queryset: QuerySet[Schedule]
    ) -> None:
        names = list(queryset.values_list("name", flat=True))
        try:
            changed = Schedule.objects.set_enabled(names, enabled, using=conf.database())
        except SchedulesBusy as exc:
            modeladmin.message_user(request, f"Nothing was {verb}d: {exc}.", messages.ERROR)
            return
        for name in changed:
            obj = Schedule.objects.get(pk=name)
            modeladmin.log_change(request, obj, f"{verb.capitalize()}d the schedule.")
        unchanged = len(names) - len(changed)
        modeladmin.message_user(
            request,
            f"{verb.capitalize()}d {wording.count(len(changed), 'schedule')}"
            + (f"; {unchanged} already {verb}d" if unchanged else "")
            + ".",
            messages.SUCCESS,
        )

    action.__name__ = f"{verb}_schedules"
    return action


#: The row's moments its pages show in the schedule's own time zone, as its cron reads.
_IN_ITS_ZONE = ("last_tick", "restarted_at")


class ScheduleAdmin(times.ReadsTimes[Schedule]):
    """Read-only but for the switch: rows are written by the workers' schedulers."""

    list_display = (
        "name",
        "task",
        "expression",
        "timezone",
        "state",
        "last_tick_display",
        "last_job",
        "next_tick",
        "jobs",
    )
    search_fields = ("name", "task")
    ordering = ("name",)
    actions = (_toggle(False), _toggle(True))
    exclude = _IN_ITS_ZONE  # shown as last_tick_display, restarted_at_display
    readonly_fields = (
        # The last tick as the list shows it, in the schedule's own zone.
        *(f"{f.name}_display" if f.name in _IN_ITS_ZONE else f.name for f in Schedule._meta.fields),
        "state",
        "last_job",
        "next_tick",
        "jobs",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        # The last jobs' statuses in the list's own query, not one query per row.
        queryset = super().get_queryset(request)
        assert isinstance(queryset, ScheduleQuerySet)
        return queryset.with_last_job_status()

    def _view(self, obj: Schedule) -> ScheduleView:
        # Three columns of the row read it: described once, kept on the row's instance.
        view: ScheduleView | None = getattr(obj, "_pgqueue_view", None)
        if view is None:
            specs = {spec.name: spec for spec in conf.get().schedules}
            status = getattr(obj, "last_job_status", None)
            view = describe(obj.name, specs.get(obj.name), obj, status, dt.datetime.now(dt.UTC))
            obj._pgqueue_view = view  # type: ignore[attr-defined]
        return view

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        # The list shows rows, which workers write when they start: say which of the
        # settings' schedules no worker has written yet, and how to switch one off
        # (to a user who may see the list: a refused one would read it on the next page).
        if request.method == "GET" and self.has_view_or_change_permission(request):
            written = set(Schedule.objects.using(conf.database()).values_list("name", flat=True))
            unwritten = sorted(s.name for s in conf.get().schedules if s.name not in written)
            if unwritten:
                self.message_user(
                    request,
                    f"In PGQUEUE['PERIODIC'] but not listed yet, as no worker has started "
                    f"with {'it' if len(unwritten) == 1 else 'them'}: "
                    f"{', '.join(unwritten)}. `manage.py schedules --disable NAME` switches "
                    "one off before that.",
                    messages.INFO,
                )
        return super().changelist_view(request, extra_context)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        return False  # a removed schedule's row is its history

    def has_toggle_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_pgqueue.toggle_schedule")

    @admin.display(description="state")
    def state(self, obj: Schedule) -> str:
        return self._view(obj).state_text()

    @admin.display(description="last job")
    def last_job(self, obj: Schedule) -> SafeString:
        view = self._view(obj)
        if view.last_job_id is None:
            return format_html("{}", "-")
        if view.last_job_status is None:
            return format_html("#{} (pruned)", view.last_job_id)
        url = reverse(
            "admin:django_pgqueue_job_change",
            args=[view.last_job_id],
            current_app=self.admin_site.name,
        )
        return format_html('<a href="{}">#{}</a> {}', url, view.last_job_id, view.last_job_status)

    @admin.display(description="last tick")
    def last_tick_display(self, obj: Schedule) -> str:
        return self._view(obj).last_tick_text()

    @admin.display(description="restarted at")
    def restarted_at_display(self, obj: Schedule) -> str:
        """When it was enabled again or changed: it went on from its next tick."""
        if obj.restarted_at is not None and out_of_range(obj.restarted_at):
            return OUT_OF_RANGE
        return local_moment(obj.restarted_at, self._view(obj).timezone)

    @admin.display(description="next tick")
    def next_tick(self, obj: Schedule) -> str:
        """In the schedule's own time zone, as ``manage.py schedules`` shows it."""
        view = self._view(obj)  # the settings' zone, as the next tick is theirs
        return local_moment(view.next_tick, view.timezone)

    @admin.display(description="jobs")
    def jobs(self, obj: Schedule) -> SafeString:
        return format_html(
            '<a href="{}">{}</a>',
            jobs_url(obj.name, self.admin_site.name),
            wording.count(obj.ticks, "tick"),
        )
