"""What every workload shares: result rows, connections, CPU accounting, worker processes."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Literal

import psycopg

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = "benchmarks.settings"
PEER_SETTINGS = "benchmarks.peer_settings"
CLK_TCK = os.sysconf("SC_CLK_TCK")
POLL = 2.0  # seconds between progress checks of a draining worker
STALL = 60.0  # a drain with no row written for this long has failed
DB_URL_ENV = "BENCH_DB_URL"
#: A worker's environment with Django's task-signal log lines turned down: the
#: ``django.tasks`` logger at WARNING (settings.py), so the per-job INFO lines of
#: ``task_started`` and ``task_finished`` are not written (failures still are, at
#: ERROR). The rows measured with it show what those lines cost the Tasks path.
QUIET_TASK_LOGS = {"BENCH_TASKS_LOG_LEVEL": "WARNING"}
#: How those rows say so.
WITHOUT_TASK_LOGS = (
    "Tasks path without Django's per-job INFO lines (`django.tasks` logger at WARNING)"
)


#: The table's figure columns: the Tasks path, the direct API, the psycopg reference
#: (a bare INSERT in W1, the article's queue elsewhere), then the peers.
COLUMNS: dict[str, str] = {
    "tasks": "Tasks path",
    "direct": "direct API",
    "ref": "psycopg reference",
    "pgqueuer": "PgQueuer",
    "procrastinate": "Procrastinate",
    "django-tasks-db": "django-tasks-db",
}
PEERS = ("pgqueuer", "procrastinate", "django-tasks-db")


@dataclasses.dataclass(frozen=True)
class Target:
    """The ``subject`` column's figure compared with ``op`` to ``value``, or to
    ``value`` times the ``of`` column's figure of the same row."""

    op: Literal[">=", "<="]
    value: float
    of: str | None = None
    subject: str = "tasks"

    def ratio(self, row: Row) -> float | None:
        """The subject's figure over the ``of`` column's (None if either is missing)."""
        ours, ref = row.values.get(self.subject), row.values.get(self.of or "")
        return ours / ref if ours is not None and ref else None

    def met(self, row: Row) -> bool | None:
        ours = row.values.get(self.subject)
        if ours is None:
            return None
        if self.of is None:
            return ours >= self.value if self.op == ">=" else ours <= self.value
        ratio = self.ratio(row)
        if ratio is None:
            return None
        return ratio >= self.value if self.op == ">=" else ratio <= self.value

    def __str__(self) -> str:
        op = "≥" if self.op == ">=" else "≤"
        if self.of is None:
            return f"{op} {self.value:,g}"
        return f"{op} {self.value:g}\N{MULTIPLICATION SIGN} {COLUMNS[self.of]}"


@dataclasses.dataclass(frozen=True)
class Row:
    """One figure of the table, per column, in one unit.

    A column missing from ``values`` was not measured for this row (a blank
    cell); present with None, it was meant to be and could not be ("n/a").
    """

    workload: str
    measure: str
    unit: str
    values: dict[str, float | None]
    targets: tuple[Target, ...] = ()
    note: str = ""


def peer_values(facts: dict[str, Any], key: str) -> dict[str, float | None]:
    """Each peer's figure ``key`` from its subprocess (None where it has none)."""
    ran: dict[str, dict[str, float] | None] = facts.get("peers", {})
    return {name: (ran.get(name) or {}).get(key) for name in PEERS if name in ran}


@dataclasses.dataclass
class Outcome:
    """What a workload returns: rows for the main table, and markdown sections of detail."""

    rows: list[Row]
    sections: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Scale:
    """Sizes of the workloads (``--quick`` shrinks them)."""

    enqueue_jobs: int = 20_000
    drain_jobs: int = 20_000
    drain_repeats: int = 2  # W2's Tasks-path and direct drains, alternating
    peer_drain_jobs: int = 5_000  # db_worker runs ~300 jobs/s here, flat in the backlog size
    sweep_jobs: int = 5_000
    lab_jobs: int = 1_000
    hold_jobs: int = 200
    latency_jobs: int = 200
    finished_rows: tuple[int, ...] = (0, 100_000, 1_000_000)
    claims: int = 1_000
    big_drain_jobs: int = 200_000
    queue_backlogs: tuple[int, ...] = (0, 100_000, 1_000_000)  # W6's other queue
    queue_claims: int = 500
    queue_budget: float = 10.0  # seconds of timed claims per W6 case, at most
    repeats: int = 3


QUICK = Scale(
    enqueue_jobs=2_000,
    drain_jobs=3_000,
    drain_repeats=1,
    peer_drain_jobs=500,
    sweep_jobs=1_000,
    lab_jobs=400,
    hold_jobs=80,
    latency_jobs=50,
    finished_rows=(0, 20_000, 100_000),
    claims=300,
    big_drain_jobs=20_000,
    queue_backlogs=(0, 20_000, 100_000),
    queue_claims=200,
    queue_budget=3.0,
    repeats=1,
)


def db_url() -> str:
    """libpq URL of the benchmark database: ``BENCH_DB_URL`` (the runner sets it, and
    sets each peer's own), else Django's default database."""
    if os.environ.get(DB_URL_ENV):
        return os.environ[DB_URL_ENV]
    from django.db import connection

    params = connection.get_connection_params()
    user = params.get("user") or "postgres"
    password = f":{params['password']}" if params.get("password") else ""
    return (
        f"postgresql://{user}{password}@{params.get('host') or '127.0.0.1'}:"
        f"{params.get('port') or 5432}/{connection.settings_dict['NAME']}"
    )


def connect(autocommit: bool = True) -> psycopg.Connection[Any]:
    return psycopg.connect(db_url(), autocommit=autocommit)


def execute(*statements: str) -> None:
    """Run statements on a fresh autocommit connection (setup, not measured)."""
    with connect() as conn:
        for statement in statements:
            conn.execute(statement.encode())


def settle() -> None:
    """Flush dirty pages before a timed section, so a checkpoint does not land in it."""
    with contextlib.suppress(psycopg.Error):
        execute("CHECKPOINT")


def writes(table: str) -> Callable[[], int]:
    """Rows inserted or updated in ``table`` so far, from the statistics (no table scan)."""

    def count() -> int:
        with connect() as conn:
            row = conn.execute(
                "SELECT n_tup_ins + n_tup_upd FROM pg_stat_user_tables WHERE relname = %s", [table]
            ).fetchone()
        return int(row[0]) if row else 0

    return count


def reset_jobs() -> None:
    execute("TRUNCATE pgqueue_job RESTART IDENTITY")
    settle()


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


class DatabaseCpu:
    """CPU seconds used by the server processes (postmaster and its children).

    Found through /proc from our own backend's parent, so it works for the embedded
    server and for a DATABASE_URL server on this machine; None for a remote one.
    A backend that exits moves its CPU into the postmaster's children totals,
    which are counted too, so connections opened and closed meanwhile are included.
    """

    def __init__(self) -> None:
        self.postmaster: int | None = None
        with contextlib.suppress(psycopg.Error, OSError, ValueError), connect() as conn:
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            backend = int(row[0]) if row else -1
            postmaster = _stat(backend)[1]
            if b"postgres" in Path(f"/proc/{postmaster}/cmdline").read_bytes():
                self.postmaster = postmaster

    def seconds(self) -> float | None:
        if self.postmaster is None:
            return None
        _, _, own, children = _stat(self.postmaster)
        total = own + children
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    _, ppid, used, _ = _stat(int(entry.name))
                    if ppid == self.postmaster:
                        total += used
        return total / CLK_TCK


def _stat(pid: int) -> tuple[int, int, int, int]:
    """(pid, ppid, utime+stime, cutime+cstime) in clock ticks, from /proc/<pid>/stat."""
    raw = Path(f"/proc/{pid}/stat").read_bytes()
    fields = raw[raw.rindex(b")") + 2 :].split()
    return pid, int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


@contextlib.contextmanager
def cpu_meter() -> Iterator[dict[str, float | None]]:
    """Measure this process's and the database's CPU seconds over the block."""
    db = DatabaseCpu()
    out: dict[str, float | None] = {}
    before_db, before = db.seconds(), time.process_time()
    yield out
    after_db = db.seconds()
    out["self"] = time.process_time() - before
    out["db"] = after_db - before_db if after_db is not None and before_db is not None else None


@dataclasses.dataclass
class Process:
    """A management command run in a child process, with its exit rusage."""

    name: str
    popen: subprocess.Popen[bytes]
    started: float  # time.time() just before the process was started
    log: IO[bytes]
    cpu: float = 0.0
    returncode: int | None = None

    @classmethod
    def start(
        cls, command: str, *args: str, settings: str = SETTINGS, env: dict[str, str] | None = None
    ) -> Process:
        """``python -m django command args`` under ``settings``."""
        return cls.spawn(
            "-m", "django", command, *args, env={"DJANGO_SETTINGS_MODULE": settings, **(env or {})}
        )

    @classmethod
    def spawn(cls, *args: str, env: dict[str, str] | None = None) -> Process:
        """``python args`` with this environment plus ``env``; output to a file."""
        # A file, not a pipe: a pipe nobody reads could fill and block the child.
        log = tempfile.TemporaryFile()  # noqa: SIM115 (closed with the Process)
        started = time.time()
        popen = subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        name = " ".join(args[2:] if args[:2] == ("-m", "django") else args)
        return cls(name, popen, started, log)

    def wait(
        self, timeout: float = 600, progress: Callable[[], int] | None = None, stall: float = STALL
    ) -> int:
        """Wait for the exit; records its CPU seconds.

        The process is killed after ``timeout``, or when ``progress()`` (polled every
        POLL seconds) has not changed for ``stall`` seconds, and RuntimeError says why.
        """
        now = time.monotonic()
        deadline, next_poll, last_change, last = now + timeout, now + POLL, now, -1
        failure = ""
        while True:
            pid, status, usage = os.wait4(self.popen.pid, os.WNOHANG)
            if pid:
                break
            now = time.monotonic()
            if progress is not None and now >= next_poll and not failure:
                try:
                    value = progress()
                except BaseException:
                    # The database went away (or we were interrupted): do not leave
                    # the child running on its own, it would outlive this run.
                    self.popen.kill()
                    self.popen.wait()
                    raise
                next_poll = now + POLL
                if value != last:
                    last, last_change = value, now
                elif now - last_change > stall:
                    failure = f"made no progress for {stall:g} s"
                    self.popen.kill()
            if now > deadline and not failure:
                failure = f"ran past {timeout:g} s"
                self.popen.kill()
            time.sleep(0.005)
        self.cpu = usage.ru_utime + usage.ru_stime
        self.returncode = os.waitstatus_to_exitcode(status)
        self.popen.returncode = self.returncode
        if failure:
            raise RuntimeError(f"{self.name} {failure}, killed:\n{self.output()[-1500:]}")
        return self.returncode

    def stop(self, timeout: float = 30) -> int:
        self.popen.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def check(self) -> None:
        if self.returncode != 0:
            raise RuntimeError(f"{self.name} exited {self.returncode}:\n{self.output()[-3000:]}")
