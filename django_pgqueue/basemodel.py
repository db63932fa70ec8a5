"""The base of this app's models (imported by the model modules only: defining a
model needs the app registry)."""

from __future__ import annotations

from typing import Any

from django.db import models

from django_pgqueue import conf


class OnJobDatabaseModel(models.Model):
    """A model of this app: an instance saved or deleted without ``using`` goes where
    it was read from, else to :func:`conf.database` (where its manager reads), whatever
    the routers say of the model."""

    class Meta:
        abstract = True

    def save(self, *args: Any, using: str | None = None, **kwargs: Any) -> None:
        super().save(*args, using=using or self._state.db or conf.database(), **kwargs)

    def delete(
        self, using: str | None = None, keep_parents: bool = False
    ) -> tuple[int, dict[str, int]]:
        return super().delete(
            using=using or self._state.db or conf.database(), keep_parents=keep_parents
        )
