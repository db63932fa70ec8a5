"""System checks, ids ``django_pgqueue.E00x`` (errors) and ``W00x`` (warnings; E010 is
``periodic.checks``'); the database rule the Tasks backend's E102 shares (see
``django_pgqueue.backend.checks``)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from importlib.util import find_spec
from typing import Any

import psycopg
from django.apps import apps
from django.conf import settings as django_settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.utils.module_loading import import_string
from psycopg.conninfo import conninfo_to_dict

from django_pgqueue import conf, declared, registry, wording
from django_pgqueue.conf_problems import settings_problems
from django_pgqueue.dberrors import is_transient
from django_pgqueue.pooler import alias_through_pooler, is_dsn, preparing


def _alias_meant(alias: str) -> str:
    """`` (did you mean 'default'?)`` for a misspelt DATABASES alias."""
    return wording.did_you_mean([alias], connections.settings)


def _database_problem(key: str, alias: str, check_id: str) -> checks.CheckMessage | None:
    if key == "LISTEN_DATABASE" and is_dsn(alias):
        try:
            conninfo_to_dict(alias)
        except psycopg.ProgrammingError:  # its words quote the token: a password, maybe
            return checks.Error(
                f"PGQUEUE[{key!r}] looks like a DSN but cannot be parsed",
                hint="Give a DATABASES alias, or a DSN such as "
                "'postgres://user@db.internal:5432/app' or 'host=db.internal dbname=app'.",
                id=check_id,
            )
        return None
    if alias not in connections:
        return checks.Error(
            f"PGQUEUE[{key!r}] = {alias!r} is not in DATABASES{_alias_meant(alias)}", id=check_id
        )
    vendor = connections[alias].vendor
    if vendor != "postgresql":
        return checks.Error(
            f"django-pgqueue needs PostgreSQL, but database {alias!r} is {vendor}",
            hint=f"Point PGQUEUE[{key!r}] at a PostgreSQL database.",
            id=check_id,
        )
    return None


#: Why the job table's database must be the one the application writes to.
POSTGRESQL_HINT = (
    "Use PostgreSQL for the database your application writes to: a job is enqueued in "
    "the caller's transaction only on that same database. PGQUEUE['DATABASE'] can name "
    "a separate PostgreSQL database instead, but then every job commits on its own, apart "
    "from your data: a request that rolls back still leaves its job behind, and a worker "
    "can run a job before the data it needs is committed."
)


def database_problem() -> tuple[str, str | None] | None:
    """(message, hint) if the job table's database is missing or not PostgreSQL; None
    when it is fine (or PGQUEUE itself is invalid, which E001 reports)."""
    try:
        explicit = conf.get().DATABASE
    except ImproperlyConfigured:
        return None
    alias = conf.database()
    where = (
        f"PGQUEUE['DATABASE'] = {alias!r}"
        if explicit is not None
        else f"the database the routers pick for jobs (db_for_write), {alias!r},"
    )
    if alias not in connections:
        return (
            f"{where} is not in DATABASES{_alias_meant(alias)}",
            "Name an alias of DATABASES in PGQUEUE['DATABASE'].",
        )
    vendor = connections[alias].vendor
    if vendor != "postgresql":
        return (f"django-pgqueue needs PostgreSQL, but {where} is {vendor}", POSTGRESQL_HINT)
    return None


@checks.register(checks.Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E001: PGQUEUE is invalid. E002: the job table's database is missing or not
    PostgreSQL. E003: its LISTEN_DATABASE is. E004: a TASK_MODULES entry cannot be
    imported. E005: a task is refused as it is declared. W004: importing the tasks
    modules fails otherwise. E106 (Django 5.2): the
    backport's app is missing, so no check of TASKS runs."""
    if not apps.is_installed("django_pgqueue"):
        return []  # imported by the Tasks backend without the app: E101 says so
    try:
        settings = conf.get()
    except ImproperlyConfigured as exc:
        return [checks.Error(p, id="django_pgqueue.E001") for p in settings_problems(exc)]
    found: list[checks.CheckMessage] = []
    problem = database_problem()
    if problem is not None:
        message, hint = problem
        found.append(checks.Error(message, hint=hint, id="django_pgqueue.E002"))
    if settings.LISTEN_DATABASE is not None:
        listen = _database_problem(
            "LISTEN_DATABASE", settings.LISTEN_DATABASE, "django_pgqueue.E003"
        )
        if listen is not None:
            found.append(listen)
    missing_modules = False
    for name in settings.TASK_MODULES:
        missing = registry.missing_task_module(name)
        if missing is not None:
            missing_modules = True
            found.append(
                checks.Error(
                    missing,
                    hint="Correct the dotted module path, or remove it: every worker "
                    "imports these modules when it starts.",
                    id="django_pgqueue.E004",
                )
            )
    if not missing_modules:
        found += _declaration_problems()
    return found + _backport_app_problems()


def backport_app_missing(alias: str) -> checks.CheckMessage:
    """E106: TASKS[alias] is on the django-tasks backport, whose app is not installed."""
    return checks.Error(
        f"TASKS[{alias!r}] uses the django-tasks backport, but 'django_tasks' is not in "
        "INSTALLED_APPS.",
        hint="Add 'django_tasks' to INSTALLED_APPS.",
        id="django_pgqueue.E106",
    )


def _backport_app_problems() -> list[checks.CheckMessage]:
    """E106 on Django 5.2: the django-tasks backport registers the Tasks check (and
    with it the backend's E101 to E109) in its own app's ready(), so without
    ``django_tasks`` installed nothing would check TASKS at all: say it here."""
    if find_spec("django.tasks") is not None:
        return []  # Django 6.0+: no app to install
    tasks = getattr(django_settings, "TASKS", None)
    if not isinstance(tasks, Mapping):
        return []
    entries = [(alias, e) for alias, e in tasks.items() if isinstance(e, Mapping)]
    if find_spec("django_tasks") is None:  # no Tasks framework: nothing reads TASKS
        return [
            checks.Error(
                f"TASKS[{alias!r}] uses PgQueueBackend, but this Django has no Tasks "
                "framework: Django 5.2 needs the django-tasks backport.",
                hint="pip install \"django-pgqueue[backport]\", and add 'django_tasks' to "
                "INSTALLED_APPS.",
                id="django_pgqueue.E106",
            )
            for alias, entry in entries
            if str(entry.get("BACKEND", "")).startswith("django_pgqueue.")
        ]
    if apps.is_installed("django_tasks"):
        return []
    return [
        backport_app_missing(alias)
        for alias, entry in entries
        if is_our_backend(entry.get("BACKEND"))
    ]


def is_our_backend(path: object) -> bool:
    """Whether the dotted ``path`` of a TASKS BACKEND names PgQueueBackend or a
    subclass of it (one that cannot be imported is not: Django's check says so)."""
    try:
        backend = import_string(str(path))
    except Exception:
        return False
    return any(
        cls.__name__ == "PgQueueBackend" and cls.__module__.startswith("django_pgqueue.backend")
        for cls in getattr(backend, "__mro__", ())
    )


def no_backend_ours() -> bool:
    """Whether no TASKS entry is PgQueueBackend (TASKS left out, say: Django's
    ImmediateBackend then declares and runs every task)."""
    configured = getattr(django_settings, "TASKS", None)
    return not (
        isinstance(configured, Mapping)
        and any(
            isinstance(entry, Mapping) and is_our_backend(entry.get("BACKEND"))
            for entry in configured.values()
        )
    )


def _set_by_project(name: str) -> bool:
    """Whether the project's settings set ``name`` (not Django's default)."""
    # LazySettings forwards is_overridden to its settings; django-stubs omit it.
    return bool(django_settings.is_overridden(name))  # type: ignore[misc]


def _declaration_problems() -> list[checks.CheckMessage]:
    """E005: a task the worker would find refused as it is declared (a queue its
    backend does not list): the worker imports every tasks module at start, so say
    it here rather than there."""
    try:
        registry.discover()
    except Exception as exc:
        problem = declared.declaration_problem(exc)
        if problem is None:
            # Anything else (an import that fails in an app's tasks.py, say) stops a
            # worker at start, with its traceback: a warning, as it may be a
            # dependency only the workers' environment has.
            return [
                checks.Warning(
                    declared.import_failure(exc),
                    hint="A worker started in this environment stops at start. If only "
                    "the workers' environment can import these modules, silence "
                    "django_pgqueue.W004 here.",
                    id="django_pgqueue.W004",
                )
            ]
        if no_backend_ours() and not problem.startswith(declared.NO_SUCH_ENTRY):
            # Not ours refused it: the likely mistake is TASKS itself (W003's case).
            problem += (
                " No TASKS entry is PgQueueBackend"
                + ("" if _set_by_project("TASKS") else " (TASKS is not set)")
                + ", so another backend declares these tasks, and no worker would run "
                "them: set TASKS['default']['BACKEND'] to "
                "'django_pgqueue.backend.PgQueueBackend'"
                + (" and list the queues in its QUEUES." if "queue" in problem.lower() else ".")
            )
        return [
            checks.Error(
                problem,
                hint="Correct the task's declaration, or the backend's TASKS settings.",
                id="django_pgqueue.E005",
            )
        ]
    return []


@checks.register(checks.Tags.database)
def check_pooler(
    app_configs: Any = None, databases: Collection[str] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """W001: PREPARE (or psycopg's prepare_threshold) on behind a pooler. W002: workers
    behind a pooler without LISTEN_DATABASE (they poll). Run by ``migrate`` and
    ``check --database``, since they connect."""
    try:
        settings = conf.get()
    except ImproperlyConfigured:
        return []  # E001
    alias = conf.database()
    # Not when the database is missing or not PostgreSQL (E002): a problem of the
    # tasks modules (E004, E005, W004, which may be silenced) is no reason to stay quiet.
    if not databases or alias not in databases or database_problem() is not None:
        return []
    try:
        pooled = alias_through_pooler(alias)
    except Exception as exc:
        if is_transient(exc):
            return []  # the server is away: Django's own checks say so
        raise
    if not pooled:
        return []
    found: list[checks.CheckMessage] = []
    what = preparing(alias, settings.PREPARE)
    if what:
        found.append(
            checks.Warning(
                f"database {alias!r} reaches PostgreSQL through a connection pooler, and {what}: "
                "a transaction pooler that keeps no prepared statements (PgBouncer before 1.21, "
                "or without max_prepared_statements) fails their next use on another server "
                "connection",
                hint="Set PGQUEUE['PREPARE'] = False and leave OPTIONS['prepare_threshold'] "
                "unset (None, Django's default) for this database, or silence this warning if "
                "the pool keeps prepared statements or sessions.",
                id="django_pgqueue.W001",
            )
        )
    if settings.LISTEN_NOTIFY and settings.LISTEN_DATABASE is None:
        found.append(
            checks.Warning(
                f"database {alias!r} reaches PostgreSQL through a connection pooler and "
                "PGQUEUE['LISTEN_DATABASE'] is not set: workers cannot LISTEN (or lock their "
                "worker id) there, so they poll for new jobs",
                hint="Name a DATABASES alias, or give a DSN, that connects to PostgreSQL "
                "directly in PGQUEUE['LISTEN_DATABASE'].",
                id="django_pgqueue.W002",
            )
        )
    return found
