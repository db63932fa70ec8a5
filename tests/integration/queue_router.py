"""The tests' settings with the queue on a database of its own, ``queue``, routed as
Django's multiple-database docs route an app: its models there, its migrations
there only, every other app's on ``default`` only (test_contract_upgrade, which
sets ``PGQUEUE["DATABASE"]`` to ``queue`` through PGQUEUE_TEST_PGQUEUE)."""

from __future__ import annotations

from typing import Any

from tests.settings import *  # noqa: F403

QUEUE_APP = "django_pgqueue"


class QueueRouter:
    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        return "queue" if model._meta.app_label == QUEUE_APP else None

    def db_for_write(self, model: type[Any], **hints: Any) -> str | None:
        return "queue" if model._meta.app_label == QUEUE_APP else None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return db == ("queue" if app_label == QUEUE_APP else "default")


DATABASE_ROUTERS = [QueueRouter()]
