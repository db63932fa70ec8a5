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


@dataclasses.dataclass(frozen=True)
class Target:
    """``value`` compared with ``op``; ``of_baseline`` makes it a multiple of the baseline."""

    op: Literal[">=", "<="]
    value: float
    of_baseline: bool = False

    def met(self, ours: float | None, base: float | None) -> bool | None:
        if ours is None or (self.of_baseline and not base):
            return None
        bound = self.value * (base or 0.0) if self.of_baseline else self.value
        return ours >= bound if self.op == ">=" else ours <= bound

    def __str__(self) -> str:
        op = "≥" if self.op == ">=" else "≤"
        if self.of_baseline:
            return f"{op} {self.value:g}\N{MULTIPLICATION SIGN} baseline"
        return f"{op} {self.value:,g}"


@dataclasses.dataclass(frozen=True)
class Row:
    """One figure of the table: ours, the baseline's and the peer's, in one unit."""

    workload: str
    measure: str
    unit: str
    ours: float | None
    base: float | None = None
    peer: float | None = None
    target: Target | None = None
    note: str = ""


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
    peer_drain_jobs: int = 5_000  # db_worker runs ~100 jobs/s here, flat in the backlog size
    sweep_jobs: int = 5_000
    lab_jobs: int = 1_000
    hold_jobs: int = 200
    latency_jobs: int = 200
    finished_rows: tuple[int, ...] = (0, 100_000, 1_000_000)
    claims: int = 1_000
    big_drain_jobs: int = 200_000
    repeats: int = 3


QUICK = Scale(enqueue_jobs=2_000, drain_jobs=3_000, peer_drain_jobs=500, sweep_jobs=1_000,
              lab_jobs=400, hold_jobs=80, latency_jobs=50, finished_rows=(0, 20_000, 100_000),
              claims=300, big_drain_jobs=20_000, repeats=1)


def db_url() -> str:
    """libpq URL of the benchmark database (the server's URL with our database name)."""
    from django.db import connection

    params = connection.get_connection_params()
    user = params.get("user") or "postgres"
    password = f":{params['password']}" if params.get("password") else ""
    return (f"postgresql://{user}{password}@{params.get('host') or '127.0.0.1'}:"
            f"{params.get('port') or 5432}/{connection.settings_dict['NAME']}")


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
            row = conn.execute("SELECT n_tup_ins + n_tup_upd FROM pg_stat_user_tables "
                               "WHERE relname = %s", [table]).fetchone()
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
    fields = raw[raw.rindex(b")") + 2:].split()
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
    def start(cls, command: str, *args: str, settings: str = SETTINGS,
              env: dict[str, str] | None = None) -> Process:
        full_env = {**os.environ, "DJANGO_SETTINGS_MODULE": settings, **(env or {})}
        # A file, not a pipe: a pipe nobody reads could fill and block the child.
        log = tempfile.TemporaryFile()  # noqa: SIM115 (closed with the Process)
        started = time.time()
        popen = subprocess.Popen([sys.executable, "-m", "django", command, *args], cwd=ROOT,
                                 env=full_env, stdout=log, stderr=subprocess.STDOUT)
        return cls(f"{command} {' '.join(args)}", popen, started, log)

    def wait(self, timeout: float = 600, progress: Callable[[], int] | None = None,
             stall: float = STALL) -> int:
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
                next_poll, value = now + POLL, progress()
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
            raise RuntimeError(f"{self.name} exited {self.returncode}:\n"
                               f"{self.output()[-3000:]}")
