"""Settings for ``python -m benchmarks``, on the server DATABASE_URL names.

Importing them starts no server. ``make bench`` runs the benchmarks on an
embedded PostgreSQL 18.6 started *durable* (fsync and synchronous_commit on, as
on a real server), so every commit in every row of the table waits for its WAL
flush; ``BENCH_FSYNC=off make bench`` starts it without flushes instead, for
exploring; the table says which was used. The benchmarks run in their own
database (``pgqueue_bench``, created by the runner), never in the database
DATABASE_URL names, because they truncate the job table.
"""

from __future__ import annotations

import json
import os

import environ

env = environ.Env()

BENCH_DB_NAME = os.environ.get("BENCH_DB_NAME", "pgqueue_bench")

SECRET_KEY = "benchmarks-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS: list[str] = []

# Unset, DATABASE_URL stops this with "Set the DATABASE_URL environment variable".
DATABASES = {
    "default": {
        **env.db_url("DATABASE_URL"),
        "NAME": BENCH_DB_NAME,
        # Persistent connections, as production settings have them: with
        # Django's default (0), db_worker reconnects for every job.
        "CONN_MAX_AGE": 600,
    }
}

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django_pgqueue",
    "benchmarks.benchapp",
]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The defaults; BENCH_PGQUEUE (JSON) overrides keys, for the "best settings" runs.
PGQUEUE: dict[str, object] = json.loads(os.environ.get("BENCH_PGQUEUE", "{}"))

# The Tasks path, as the README tells users to set it up (queue "default").
TASKS = {"default": {"BACKEND": "django_pgqueue.backend.PgQueueBackend"}}

# As a project that logs to its standard streams: Django's task-signal receivers log
# every job's start and finish at INFO on "django.tasks", and that reaches a
# StreamHandler, so the Tasks-path rows pay for the two lines per job as users do.
# (A worker's stderr is a file here, see common.Process.)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        # Django's task-signal receivers log two INFO lines per job; the W2 row
        # "without the framework's log lines" sets this to WARNING.
        "django.tasks": {
            "handlers": ["console"],
            "level": os.environ.get("BENCH_TASKS_LOG_LEVEL", "INFO"),
        },
        "django_pgqueue": {"handlers": ["console"], "level": "WARNING"},
    },
}
