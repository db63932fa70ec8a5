"""Settings for the peer: Django's reference database backend, django-tasks-db.

Only the peer subprocess uses them (``TASKS`` and ``django_tasks_db`` would be
unused weight in the django-pgqueue runs). Same server and database as
``benchmarks.settings``.
"""

from __future__ import annotations

from benchmarks.settings import *  # noqa: F403
from benchmarks.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks_db"]
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
