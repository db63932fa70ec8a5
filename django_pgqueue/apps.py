from __future__ import annotations

from importlib.util import find_spec

from django.apps import AppConfig


class PgQueueConfig(AppConfig):
    name = "django_pgqueue"
    verbose_name = "Job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported to register the system checks.
        from django_pgqueue import checks, custom_names  # noqa: F401
        from django_pgqueue.periodic import checks as periodic_checks  # noqa: F401

        # Workers run django.tasks Tasks (or the backport's) only when one is installed.
        if find_spec("django.tasks") is not None or find_spec("django_tasks") is not None:
            from django_pgqueue.backend.worker import register_task_kind

            register_task_kind()
