"""Settings for the test suite, on the server DATABASE_URL names.

Importing them starts no server. With DATABASE_URL unset, ``pytest`` starts an
embedded PostgreSQL 18.6 and exports its URL before Django reads these settings
(``devtools/pytest_plugin.py``).
"""

from __future__ import annotations

import json
from importlib.util import find_spec

import environ

env = environ.Env()

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
# A worker subprocess of a test may run in another zone (a deploy that changes it).
TIME_ZONE = env.str("PGQUEUE_TEST_TIME_ZONE", default="UTC")
ALLOWED_HOSTS = ["*"]

# Without DATABASE_URL (mypy's django-stubs plugin, makemigrations --check) Django's
# dummy backend refuses every query rather than reach whatever server is there.
database_url = env.str("DATABASE_URL", default="")
DATABASES = {
    "default": env.db_url_config(database_url)
    if database_url
    else {"ENGINE": "django.db.backends.dummy"}
}
# Suites sharing one server (several checkouts on a machine with one PostgreSQL 15)
# would drop each other's test database: PGQUEUE_TEST_DATABASE gives each its own.
DATABASES["default"]["TEST"] = {"NAME": env.str("PGQUEUE_TEST_DATABASE", default="pgqueue_test")}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_pgqueue",
    "tests.testapp",
    "example_project.shop",  # the example's views and tasks are tested too
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

PGQUEUE = {"BACKOFF_BASE": 0.05, "BACKOFF_MAX": 0.2, "LEASE": 30}

# Subprocesses of the pooler and failover tests (tests/cluster) reach their servers
# in ways one URL cannot say (a second alias, several hosts): JSON objects merged
# over DATABASES (a new alias starts as a copy of "default") and over PGQUEUE.
for _alias, _extra in json.loads(env.str("PGQUEUE_TEST_DATABASES", default="{}")).items():
    DATABASES[_alias] = {**DATABASES.get(_alias, DATABASES["default"]), **_extra}
PGQUEUE.update(json.loads(env.str("PGQUEUE_TEST_PGQUEUE", default="{}")))

# Django's Tasks framework on our backend (tests/*/test_backend*.py). On Django 5.2
# the django-tasks backport provides the framework, and its app must be installed.
TASKS = {
    "default": {
        "BACKEND": "django_pgqueue.backend.PgQueueBackend",
        "QUEUES": ["default", "queue_1", "emails", "payments", "reports"],
    },
}
if find_spec("django.tasks") is None and find_spec("django_tasks") is not None:
    INSTALLED_APPS.append("django_tasks")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_pgqueue": {"handlers": ["console"], "level": "INFO"}},
}
