"""What keeps the job changelist cheap on a table of millions of rows.

The stock changelist counts every matching row on each page load (twice when
filtered), and its value filters run ``SELECT DISTINCT`` over the whole table;
on a job table that keeps finished rows for days both are full scans. Here:

- the paginator counts at most ``COUNT_CAP + 1`` rows (a LIMITed subquery), and
  the templates say "10000+" past that;
- the queue filter takes its choices from ``Job.objects.stats()``, which the
  summary above the list needs anyway, so one aggregate serves both;
- the task filter takes its choices from the newest ``TASK_WINDOW`` jobs only
  (a range of the primary key), plus the value currently selected;
- a search for a number looks up that job id alone, on the primary key;
- the list leaves out the JSON columns (tracebacks can be large); the job page
  reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from django.core.paginator import Paginator
from django.db.models import QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.http import HttpRequest

from django_pgqueue.admin.display import ColumnFilter
from django_pgqueue.admin.times import NulSafeChangeList
from django_pgqueue.models import Job
from django_pgqueue.records import QueueStats

#: Rows the paginator counts before it stops and shows "COUNT_CAP+".
COUNT_CAP = 10_000
#: Newest jobs whose task names the task filter offers.
TASK_WINDOW = 10_000
#: Columns the list does not show; they can hold kilobytes per row.
# (retry_policy is not shown; a row written by hand may hold JSON Python cannot read.)
HEAVY_COLUMNS = ("args", "kwargs", "result", "errors", "worker_ids", "retry_policy")
_STATS_ATTR = "_pgqueue_stats"


if TYPE_CHECKING:
    _Paginator = Paginator[Any]
else:  # Paginator is generic only in django-stubs, not at runtime.
    _Paginator = Paginator


class CappedPaginator(_Paginator):
    """A paginator that counts no further than ``cap + 1`` rows.

    Past the cap the list still pages through the first ``cap`` rows: an
    operator narrows a long list with the filters rather than by page 900.
    """

    cap = COUNT_CAP

    @cached_property
    def exact_or_capped(self) -> int:
        objects = self.object_list
        if isinstance(objects, QuerySet):
            # order_by() lets PostgreSQL stop at the LIMIT instead of sorting first.
            return objects.order_by()[: self.cap + 1].count()
        return len(objects)

    @cached_property
    def capped(self) -> bool:
        """True when more rows match than were counted."""
        return self.exact_or_capped > self.cap

    @cached_property
    def count(self) -> int:
        return min(self.exact_or_capped, self.cap)


class JobChangeList(NulSafeChangeList):
    """The changelist without the heavy JSON columns (a filter's value with NUL,
    Django's own status filter's too, matches no job)."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Any]:
        return super().get_queryset(request, exclude_parameters).defer(*HEAVY_COLUMNS)


def request_stats(request: HttpRequest) -> list[QueueStats]:
    """``Job.objects.stats()``, run at most once per request (summary and queue filter)."""
    if not hasattr(request, _STATS_ATTR):
        setattr(request, _STATS_ATTR, Job.objects.stats())
    stats: list[QueueStats] = getattr(request, _STATS_ATTR)
    return stats


def _with_selected(values: Sequence[str], selected: str | None) -> list[tuple[str, str]]:
    # A selected value missing from the choices would make the filter look unset.
    names = sorted({*values, *([selected] if selected else [])})
    return [(name, name) for name in names]


class QueueFilter(ColumnFilter):
    """Filter by queue; its choices are the queues ``stats()`` found."""

    title = "queue"
    parameter_name = "queue"
    column = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return _with_selected([row.queue for row in request_stats(request)], self.value())


class TaskFilter(ColumnFilter):
    """Filter by task; its choices are the tasks of the newest jobs."""

    title = "task"
    parameter_name = "task"
    column = "task"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # "id >= the TASK_WINDOW-th newest id" is a range on the primary key; the
        # plainer "id IN (newest ids)" makes PostgreSQL hash-join the whole table.
        window_start = Job.objects.order_by("-id").values("id")[TASK_WINDOW - 1 : TASK_WINDOW]
        tasks = (
            Job.objects.filter(id__gte=Coalesce(Subquery(window_start), Value(0)))
            .order_by("task")
            .values_list("task", flat=True)
            .distinct()
        )
        return _with_selected(list(tasks), self.value())
