"""What a worker checks before it claims anything.

Each check that fails is one line and exit status 1, before any job is touched:
the worker inside an open transaction (a ``TestCase``), the job table's
migrations not applied, the worker id held by another live worker. A database
that cannot be reached yet is no reason not to start: the claim loop waits for
it (but a ``--burst`` run, which is over once the queue is empty, stops after
START_PATIENCE seconds). A server that turns the worker away for good (the
database does not exist, the role or its password is wrong) stops it at once.
Tasks are discovered here too, so that the banner can list them.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterator

from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from django_pgqueue import declared, registry, wording
from django_pgqueue.dberrors import REFUSED_FOR_GOOD, first_line, is_transient, migrate_command
from django_pgqueue.jobdb import worker_in_transaction
from django_pgqueue.queue import claims
from django_pgqueue.worker.services import reset_connection
from django_pgqueue.worker.session import WorkerSession, open_at_start

logger = logging.getLogger("django_pgqueue")

#: How long a --burst worker tries to reach the database at start before it stops.
START_PATIENCE = 5.0
#: Pooled connections a worker's own threads may hold besides its job threads: the
#: claim loop, completer, heartbeat, maintenance, scheduler and metrics server (the
#: session connection, for LISTEN and the worker id's lock, is never pooled).
OWN_CONNECTIONS = 6
#: psycopg_pool's ConnectionPool size when OPTIONS["pool"] gives none.
POOL_DEFAULT_SIZE = 4


def start_problem(
    database: str,
    session: WorkerSession,
    *,
    wait_for_database: bool = True,
    concurrency: int = 1,
) -> tuple[str | None, bool]:
    """(why the worker must not start, or None; whether it has a session connection).
    ``wait_for_database``: a database that cannot be reached is waited for, rather
    than a reason not to start."""
    problem = pool_problem(database, concurrency) or worker_in_transaction(database)
    if problem:  # a pool too small; or claims would see rows its threads cannot (a TestCase)
        return problem, False
    try:
        registry.discover()
    except ImproperlyConfigured as exc:  # a TASK_MODULES entry or TASKS alias that does not exist
        return declared.declaration_problem(exc) or str(exc), False
    except Exception as exc:
        problem = declared.declaration_problem(exc)
        if problem is None:
            raise  # a bug in a tasks module: its traceback says where
        return problem, False
    problem = schema_problem_at_start(database, wait_for_database=wait_for_database)
    if problem:
        return problem, False
    problem, has_session = open_at_start(session, database)
    if problem is None and session.is_open and session.lock_holds:
        expire_orphans(session.worker_id, database)
    return problem, has_session


def pool_problem(alias: str, concurrency: int) -> str | None:
    """One line if ``alias`` uses Django's connection pool (``OPTIONS["pool"]``) with
    fewer connections than the worker may hold at once. Each of its threads keeps
    the connection it opened, so a pool that runs dry makes the next thread wait
    (30 s at a time, again and again): the worker hangs without saying why."""
    pool = connections.settings[alias].get("OPTIONS", {}).get("pool")
    if not pool:
        return None
    options = pool if isinstance(pool, dict) else {}
    size = options.get("max_size") or options.get("min_size") or POOL_DEFAULT_SIZE
    needed = concurrency + OWN_CONNECTIONS
    if size >= needed:
        return None
    return (
        f"database {alias!r} uses Django's connection pool with at most {size} connections, "
        f"and this worker may hold {needed} at once: one for each of its {concurrency} job "
        f"threads (--concurrency) and {OWN_CONNECTIONS} for its own. Set "
        f"DATABASES[{alias!r}]['OPTIONS']['pool'] = {{'max_size': {needed}}} (or more), or "
        "give the worker settings without the pool (docs/operations.md#djangos-connection-pool)"
    )


def expire_orphans(worker: str, database: str) -> None:
    """The id's lock is ours and nothing is claimed yet: jobs still running under this
    id are a dead process's (a restart under a fixed --worker-id). Their leases end
    now, so the reaper returns them at once, not after the lease."""
    try:
        orphans = claims.expire_orphans(worker, database)
    except Exception as exc:
        if not is_transient(exc):
            raise
        reset_connection(database)
        return  # the reaper returns them once their leases expire
    if orphans:
        logger.warning(
            "%s still held by an earlier process with worker id %r: their leases "
            "end now, and the reaper returns them: %s",
            wording.count(len(orphans), "job"),
            worker,
            orphans,
        )


def schema_problem_at_start(alias: str, *, wait_for_database: bool = True) -> str | None:
    """One line if django_pgqueue's migrations are not all applied to ``alias``, if
    the server refuses the connection for good (REFUSED_FOR_GOOD), or, unless
    ``wait_for_database``, if it cannot be reached within START_PATIENCE: a server
    still starting up gets that long."""
    give_up = time.monotonic() + START_PATIENCE
    said = False
    while True:
        try:
            # A server that accepts and never answers is bounded too (--burst).
            patience = None if wait_for_database else give_up - time.monotonic()
            with connecting_within(alias, patience):
                executor = MigrationExecutor(connections[alias])
                targets = [
                    node
                    for node in executor.loader.graph.leaf_nodes()
                    if node[0] == "django_pgqueue"
                ]
                plan = executor.migration_plan(targets)
            break
        except Exception as exc:
            if not is_transient(exc):
                raise
            if REFUSED_FOR_GOOD.search(str(exc)):  # no restart of the server cures it
                return f"cannot reach the database: {first_line(exc)}"
            if wait_for_database:  # the claim loop waits for the database
                logger.warning("cannot check the migrations yet: %s", first_line(exc))
                return None
            if time.monotonic() >= give_up:
                return f"cannot reach the database: {first_line(exc)}"
            if not said:  # once, however long the first try took
                said = True
                logger.warning(
                    "cannot reach the database yet, trying for %gs: %s",
                    START_PATIENCE,
                    first_line(exc),
                )
            time.sleep(0.5)
        finally:
            reset_connection(alias)  # this thread's connection starts fresh for the claim loop
    if not plan:
        return None
    names = ", ".join(migration.name for migration, _ in plan)
    return (
        f"django_pgqueue's migrations are not all applied to database {alias!r} "
        f"({names}): run `{migrate_command(alias)}`"
    )


@contextlib.contextmanager
def connecting_within(alias: str, seconds: float | None) -> Iterator[None]:
    """This thread's connection to ``alias``, if it connects inside, gives up after
    ``seconds`` (None: no bound of ours). Nothing on the server ends a connection
    attempt that gets no answer (a host that drops packets, a server or pooler that
    accepts and never answers): without ``connect_timeout`` a ``--burst`` worker
    waited there for ever. Only this thread's connection is touched; a pooled alias
    (``OPTIONS["pool"]``) keeps its pool's settings, and a shorter
    ``connect_timeout`` of the settings is kept."""
    wrapper = connections[alias]
    settings = wrapper.settings_dict
    options = settings.get("OPTIONS") or {}
    bound = None if seconds is None else max(2, math.ceil(seconds))  # libpq reads 1 as 2
    try:
        given = float(options.get("connect_timeout") or 0)
    except (TypeError, ValueError):
        given = 0.0
    if bound is None or options.get("pool") or 0 < given <= bound:
        yield
        return
    wrapper.settings_dict = {**settings, "OPTIONS": {**options, "connect_timeout": bound}}
    try:
        yield
    finally:
        wrapper.settings_dict = settings
