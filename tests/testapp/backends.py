"""A project's own backend, made from ours (the checks must know it for ours)."""

from __future__ import annotations

from django_pgqueue.backend import PgQueueBackend


class ProjectBackend(PgQueueBackend):
    pass
