"""Settings for the django-tasks-db peer: Django's reference database backend.

Only its subprocess uses them. Same server as ``benchmarks.settings``, its own
database (``BENCH_DB_NAME`` + ``_dtdb``, created by the runner); the same
logging, so its task-signal lines cost what the Tasks path's do.
"""

from __future__ import annotations

from benchmarks.settings import *  # noqa: F403
from benchmarks.settings import BENCH_DB_NAME, DATABASES, INSTALLED_APPS

PEER_DB_NAME = f"{BENCH_DB_NAME}_dtdb"
DATABASES = {"default": {**DATABASES["default"], "NAME": PEER_DB_NAME}}
INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks_db"]
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
