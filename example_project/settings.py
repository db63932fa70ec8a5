"""Settings of the example shop, on the server DATABASE_URL names (django-environ).

Importing them starts no server: ``make demo``, ``make lab`` and ``make admin``
start the embedded PostgreSQL and export its URL first (``devtools/demo.py``).
"""

from __future__ import annotations

from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent
env = environ.Env()

# LOCAL DEMO ONLY: this SECRET_KEY is public and DEBUG shows tracebacks and settings
# to whoever can reach the site. They are for `make demo` and `make admin`, which
# serve on 127.0.0.1 only (hence ALLOWED_HOSTS: loopback, and the test client's
# "testserver"). Anywhere else set SECRET_KEY and DEBUG=false in the environment.
SECRET_KEY = env.str("SECRET_KEY", default="example-only-not-secret")
DEBUG = env.bool("DEBUG", default=True)
if not DEBUG and SECRET_KEY == "example-only-not-secret":
    raise ImproperlyConfigured("DEBUG is off: set SECRET_KEY, the default is public")
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
USE_TZ = True
TIME_ZONE = "UTC"

# Unset, this stops with "Set the DATABASE_URL environment variable".
DATABASES = {"default": env.db_url("DATABASE_URL")}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_pgqueue",
    "example_project.lab",
    "example_project.shop",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "example_project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

# Django's Tasks framework, run by django-pgqueue.
TASKS = {
    "default": {
        "BACKEND": "django_pgqueue.backend.PgQueueBackend",
        "QUEUES": ["default", "emails", "payments", "reports"],
        "OPTIONS": {"MAX_ATTEMPTS": 3},
    },
}

# Short delays so the demo's retries happen within seconds; see docs/settings.md.
# One periodic job: every worker may enqueue its ticks, each tick exactly once
# (docs/periodic.md). A real shop would say "cron": "0 * * * *" or "every": 3600.
PGQUEUE = {
    "BACKOFF_BASE": 0.2,
    "BACKOFF_MAX": 2.0,
    "LEASE": 10,
    "PERIODIC": {
        "order-tally": {"task": "example_project.shop.tasks.tally_orders", "every": 1},
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "django_pgqueue": {"handlers": ["console"], "level": "WARNING"},
        # The demo's rollback view answers 409 on purpose.
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
    },
}
