"""Operations that a ``migrate`` stopped part-way can run again.

A non-atomic migration (``atomic = False``: constraints added ``NOT VALID`` and
validated apart, indexes built ``CONCURRENTLY``) commits each statement as it goes.
A ``migrate`` killed in the middle, or whose connection was cut, leaves the first
statements done and the migration not recorded, so the next ``migrate`` runs it
from its start again. Django's own operations then fail on what is already there
("column ... already exists"), and only hand-written SQL could go on. These run
the statements Django writes, made to skip what is already there: ``IF NOT
EXISTS`` on tables, columns and indexes (Django's deferred indexes of a new table
too), a look in the catalog before adding a constraint, and an index that an
interrupted ``CREATE INDEX CONCURRENTLY`` left INVALID dropped before it is built
again (``IF NOT EXISTS`` alone would keep it, unused, for ever).

They change nothing in Django's migration state: each is the Django operation it
names, with the same state changes. ``sqlmigrate`` shows the statements a database
without any of it needs.

The module's name starts with ``_``: Django does not take it for a migration.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.contrib.postgres import operations as postgres
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import ProjectState

#: Django's statement templates, and where ``IF NOT EXISTS`` goes in each.
IF_NOT_EXISTS = {
    "sql_create_table": ("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS "),
    "sql_create_column": (" ADD COLUMN ", " ADD COLUMN IF NOT EXISTS "),
    "sql_create_index": ("CREATE INDEX ", "CREATE INDEX IF NOT EXISTS "),
    "sql_create_index_concurrently": (
        "CREATE INDEX CONCURRENTLY ",
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS ",
    ),
}


@contextlib.contextmanager
def if_not_exists(schema_editor: BaseDatabaseSchemaEditor) -> Iterator[None]:
    """The editor's statements made in the block (deferred ones too: they keep the
    template they were made with) skip a table, column or index already there."""
    saved = {name: vars(schema_editor).get(name) for name in IF_NOT_EXISTS}
    for name, (plain, guarded) in IF_NOT_EXISTS.items():
        setattr(schema_editor, name, getattr(schema_editor, name).replace(plain, guarded, 1))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                delattr(schema_editor, name)
            else:
                setattr(schema_editor, name, value)


def _found(schema_editor: BaseDatabaseSchemaEditor, sql: str, params: list[str]) -> bool:
    if schema_editor.collect_sql:  # sqlmigrate: the statements a database without it needs
        return False
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone() is not None


class _IfNotExists(migrations.operations.base.Operation):
    """A Django operation whose statements skip a table, column or index already there."""

    def database_forwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        with if_not_exists(schema_editor):
            super().database_forwards(app_label, schema_editor, from_state, to_state)


class CreateModel(_IfNotExists, migrations.CreateModel):
    """``CreateModel``, whose table and indexes are skipped where already there."""


class AddField(_IfNotExists, migrations.AddField):
    """``AddField``, whose column is skipped where already there."""


class AddConstraintNotValid(postgres.AddConstraintNotValid):
    """``AddConstraintNotValid``, skipped where the table has a constraint of that name
    (PostgreSQL has no ``ADD CONSTRAINT IF NOT EXISTS``). Added by an earlier run, it
    may not be validated yet: the migration's ``ValidateConstraint`` follows."""

    def database_forwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        model = from_state.apps.get_model(app_label, self.model_name)
        table = schema_editor.quote_name(model._meta.db_table)
        if not _found(
            schema_editor,
            "SELECT 1 FROM pg_constraint WHERE conrelid = to_regclass(%s) AND conname = %s",
            [table, self.constraint.name],
        ):
            super().database_forwards(app_label, schema_editor, from_state, to_state)


class AddIndexConcurrently(postgres.AddIndexConcurrently):
    """``AddIndexConcurrently`` that drops an INVALID index of that name first (what an
    interrupted build leaves), and skips a valid one."""

    def database_forwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model) and _found(
            schema_editor,
            "SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(%s) AND NOT indisvalid",
            [schema_editor.quote_name(self.index.name)],
        ):
            self._ensure_not_in_transaction(schema_editor)
            schema_editor.execute(
                "DROP INDEX CONCURRENTLY IF EXISTS " + schema_editor.quote_name(self.index.name)
            )
        with if_not_exists(schema_editor):
            super().database_forwards(app_label, schema_editor, from_state, to_state)
