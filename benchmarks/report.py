"""The markdown: the machine and versions, the main table, then each workload's detail."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from collections.abc import Sequence
from importlib import metadata

from benchmarks.common import COLUMNS, Outcome, Row, Target, connect

X = "\N{MULTIPLICATION SIGN}"
HEADER = (
    "| workload | measure | " + " | ".join(COLUMNS.values()) + " | target | met |\n"
    "| --- | --- | " + " | ".join("---:" for _ in COLUMNS) + " | --- | --- |"
)


def number(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "jobs/s" or abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 0.1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def verdict(target: Target, row: Row) -> str:
    """✓ or ✗ (with the ratio for a relative target), or n/a."""
    met = target.met(row)
    if met is None:
        return "n/a"
    mark = "✓" if met else "✗"
    ratio = target.ratio(row) if target.of else None
    return f"{mark} {ratio:.2f}{X}" if ratio is not None else mark


def line(row: Row) -> str:
    cells = [row.workload, f"{row.measure} ({row.unit})"]
    cells += [number(row.values[key], row.unit) if key in row.values else "" for key in COLUMNS]
    cells += [
        "; ".join(str(t) for t in row.targets),
        "; ".join(verdict(t, row) for t in row.targets),
    ]
    return "| " + " | ".join(cells) + " |"


def table(rows: Sequence[Row]) -> str:
    return "\n".join([HEADER, *(line(row) for row in rows)])


def scorecard(rows: Sequence[Row]) -> str:
    """One line: how many targets are met, and which are missed."""
    verdicts = [(row, t, t.met(row)) for row in rows for t in row.targets]
    met = sum(1 for _, _, ok in verdicts if ok)
    missed = [f"{row.workload} {row.measure} ({t})" for row, t, ok in verdicts if ok is False]
    unknown = sum(1 for _, _, ok in verdicts if ok is None)
    text = f"**Targets met: {met} of {len(verdicts)}.**"
    if missed:
        text += " Missed: " + "; ".join(missed) + "."
    if unknown:
        text += f" {unknown} could not be judged (a figure is n/a)."
    return text


def _cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown CPU"
    models = [ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")]
    return models[0] if models else "unknown CPU"


def _memory() -> str:
    try:
        with open("/proc/meminfo") as meminfo:
            kib = int(meminfo.readline().split()[1])
    except (OSError, ValueError, IndexError):
        return "? GiB"
    return f"{kib / 2**20:.0f} GiB"


def environment() -> dict[str, str]:
    import django
    import psycopg

    with connect() as conn:
        settings = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('server_version', 'fsync', 'synchronous_commit', 'full_page_writes', "
                "'shared_buffers', 'wal_sync_method', 'track_commit_timestamp')"
            ).fetchall()
        )
    shared = int(settings.get("shared_buffers", "0")) * 8 // 1024
    return {
        "machine": f"{os.cpu_count()} CPUs ({_cpu_model()}), {_memory()} RAM, {platform.system()} "
        f"{platform.release()}",
        "postgresql": f"{settings.get('server_version')} (fsync={settings.get('fsync')}, "
        f"synchronous_commit={settings.get('synchronous_commit')}, "
        f"full_page_writes={settings.get('full_page_writes')}, "
        f"wal_sync_method={settings.get('wal_sync_method')}, "
        f"track_commit_timestamp={settings.get('track_commit_timestamp')}, "
        f"shared_buffers={shared}MB)",
        "python": f"{platform.python_version()}, Django {django.get_version()}, psycopg "
        f"{psycopg.__version__} ({psycopg.pq.__impl__})",
        "database": "embedded (devtools.embedded_pg)"
        if os.environ.get("PGQUEUE_EMBEDDED_OWNER_PID")
        else "DATABASE_URL",
        "peers": ", ".join(
            f"{name} {_version(name)}"
            for name in ("pgqueuer", "asyncpg", "procrastinate", "django-tasks-db")
        ),
    }


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "(not installed)"


COLUMN_NOTES = [
    "Columns: **Tasks path** is what the README tells users to write: `@task` from "
    "`django.tasks` on `PgQueueBackend`, `.enqueue()`, `manage.py runworker`. **direct API** "
    "is `django_pgqueue.task` and `Job.objects`, the engine underneath. **psycopg reference** "
    "is, in W1, a bare INSERT of the same row into `pgqueue_job` (and the article's own "
    "INSERT on its rows), elsewhere the design article's queue (`benchmarks/baseline.py`). "
    "The peers ran in subprocesses, each in its own database on the same server, through "
    "their own enqueue APIs and workers. Every job of every column runs the same body: "
    "append one line to a file. Ratios in the met column are measured in this run.",
    "A blank cell was not measured; n/a was meant to be and could not be.",
]


def document(
    outcomes: Sequence[Outcome],
    env: dict[str, str],
    *,
    started: dt.datetime,
    elapsed: float,
    load: tuple[str, str],
    options: str,
    peer_status: Sequence[str] = (),
) -> str:
    rows = [row for outcome in outcomes for row in outcome.rows]
    sections = [section for outcome in outcomes for section in outcome.sections]
    head = [
        f"# django-pgqueue benchmark, {started:%Y-%m-%d %H:%M} UTC",
        "",
        f"- machine: {env['machine']}",
        f"- PostgreSQL {env['postgresql']}, {env['database']}",
        f"- Python {env['python']}",
        f"- peers: {env['peers']}",
        f"- run: `python -m benchmarks{options}`, {elapsed:.0f} s; load average "
        f"{load[0]} before, {load[1]} after",
        "",
        *COLUMN_NOTES,
        *peer_status,
        "",
    ]
    notes = [f"- {row.workload}, {row.measure}: {row.note}" for row in rows if row.note]
    return (
        "\n".join([*head, table(rows), "", scorecard(rows), "", *notes, "", *sections]).rstrip()
        + "\n"
    )


def load_average() -> str:
    """1, 5 and 15 minute load averages: how busy the machine was besides us."""
    try:
        return "/".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "?"
