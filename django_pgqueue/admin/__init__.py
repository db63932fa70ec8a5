"""The Django admin for jobs: ``JobAdmin``, registered for ``Job`` on the default site
(with ``WorkerAdmin`` and ``ScheduleAdmin``, read-only lists of workers and schedules).

A project with its own admin site registers it there instead::

    from django_pgqueue.admin import JobAdmin
    my_site.register(Job, JobAdmin)
"""

from __future__ import annotations

from django.contrib import admin

from django_pgqueue.admin.job import JobAdmin
from django_pgqueue.admin.schedules import ScheduleAdmin
from django_pgqueue.admin.workers import WorkerAdmin
from django_pgqueue.models import Job, RegisteredWorker, Schedule

__all__ = ["JobAdmin", "ScheduleAdmin", "WorkerAdmin"]

admin.site.register(Job, JobAdmin)
admin.site.register(RegisteredWorker, WorkerAdmin)
admin.site.register(Schedule, ScheduleAdmin)
