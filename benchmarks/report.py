"""The markdown: the machine and versions, the main table, then each workload's detail."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from collections.abc import Sequence

from benchmarks.common import Outcome, Row, connect

X = "\N{MULTIPLICATION SIGN}"
HEADER = ("| workload | measure | django-pgqueue | baseline (article, psycopg) | vs baseline "
          "| peer (django-tasks-db) | target | met |\n"
          "| --- | --- | ---: | ---: | ---: | ---: | --- | :---: |")


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


def _ratio(row: Row) -> str:
    if row.ours is None or not row.base:
        return ""
    return f"{row.ours / row.base:.2f}{X}"


def line(row: Row) -> str:
    target = str(row.target) if row.target else ""
    met = row.target.met(row.ours, row.base) if row.target else None
    mark = "" if met is None else ("✓" if met else "✗")
    cells = [row.workload, f"{row.measure} ({row.unit})", number(row.ours, row.unit),
             number(row.base, row.unit), _ratio(row), number(row.peer, row.unit), target, mark]
    return "| " + " | ".join(cells) + " |"


def table(rows: Sequence[Row]) -> str:
    return "\n".join([HEADER, *(line(row) for row in rows)])


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
        settings = dict(conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('server_version', 'fsync', 'synchronous_commit', 'full_page_writes', "
            "'shared_buffers', 'wal_sync_method', 'track_commit_timestamp')").fetchall())
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
        "database": "embedded (devtools.embedded_pg)" if os.environ.get(
            "PGQUEUE_EMBEDDED_OWNER_PID") else "DATABASE_URL",
    }


def document(outcomes: Sequence[Outcome], env: dict[str, str], *, started: dt.datetime,
             elapsed: float, load: tuple[str, str], options: str) -> str:
    rows = [row for outcome in outcomes for row in outcome.rows]
    sections = [section for outcome in outcomes for section in outcome.sections]
    head = [
        f"# django-pgqueue benchmark, {started:%Y-%m-%d %H:%M} UTC",
        "",
        f"- machine: {env['machine']}",
        f"- PostgreSQL {env['postgresql']}, {env['database']}",
        f"- Python {env['python']}",
        f"- run: `python -m benchmarks{options}`, {elapsed:.0f} s; load average "
        f"{load[0]} before, {load[1]} after",
        "",
        f"Ratios are django-pgqueue {X} the baseline measured in the same run "
        "(higher is better for jobs/s, lower for times).",
        "",
    ]
    notes = [f"- {row.workload}, {row.measure}: {row.note}" for row in rows if row.note]
    return "\n".join([*head, table(rows), "", *notes, "", *sections]).rstrip() + "\n"


def load_average() -> str:
    """1, 5 and 15 minute load averages: how busy the machine was besides us."""
    try:
        return "/".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "?"
