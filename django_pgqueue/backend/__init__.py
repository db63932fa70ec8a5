"""Django's Tasks framework (``django.tasks``, or the ``django-tasks`` backport on
Django 5.2) on django-pgqueue::

    TASKS = {"default": {"BACKEND": "django_pgqueue.backend.PgQueueBackend"}}

See docs/backend.md. Importing this package without Django 6.0+ or the backport
raises ImportError saying what to install.
"""

from __future__ import annotations

from django_pgqueue.backend.core import PgQueueBackend, aenqueue_many, enqueue_many
from django_pgqueue.backend.enqueueing import call
from django_pgqueue.backend.task import PgQueueTask, PgQueueTaskContext, options

__all__ = [
    "PgQueueBackend",
    "PgQueueTask",
    "PgQueueTaskContext",
    "aenqueue_many",
    "call",
    "enqueue_many",
    "options",
]
