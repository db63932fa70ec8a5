from __future__ import annotations

from django.apps import AppConfig


class PgQueueConfig(AppConfig):
    name = "django_pgqueue"
    verbose_name = "Job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_pgqueue import checks  # noqa: F401  (registers the system checks)
