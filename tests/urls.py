from django.contrib import admin
from django.urls import include, path

from django_pgqueue.admin import JobAdmin, ScheduleAdmin, WorkerAdmin
from django_pgqueue.models import Job, RegisteredWorker, Schedule

#: A project's own admin site beside the default one (docs/admin.md): links and
#: redirects of its pages stay on it.
ops_site = admin.AdminSite(name="ops")
ops_site.register(Job, JobAdmin)
ops_site.register(RegisteredWorker, WorkerAdmin)
ops_site.register(Schedule, ScheduleAdmin)

urlpatterns = [
    path("admin/", admin.site.urls),
    path("ops/", ops_site.urls),
    path("pgqueue/", include("django_pgqueue.urls")),
]
