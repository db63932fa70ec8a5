"""Migrating the test database to a given migration of the app and back, for the
tests of a migration on rows the code before it wrote."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate(target: tuple[str, str]) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([target])


@contextlib.contextmanager
def migrated_to(target: tuple[str, str]) -> Iterator[None]:
    """The database at ``target`` for the block, then at the app's latest migration."""
    migrate(target)
    try:
        yield
    finally:
        latest = MigrationExecutor(connection).loader.graph.leaf_nodes("django_pgqueue")
        migrate(latest[0])
