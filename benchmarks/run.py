"""``python -m benchmarks [--only W1,W3] [--quick]``: run, print and save the table.

One invocation, one database: the settings start an embedded PostgreSQL (or use
DATABASE_URL), the runner creates the ``pgqueue_bench`` database in it, migrates,
runs the peer (django-tasks-db) in a subprocess with its own settings, then each
workload against django-pgqueue and the article's baseline, and writes the
markdown to ``benchmarks/results/latest.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from benchmarks.common import PEER_SETTINGS, QUICK, ROOT, SETTINGS, Outcome, Scale

WORKLOADS = {
    "W1": "benchmarks.w1_enqueue",
    "W2": "benchmarks.w2_drain",
    "W3": "benchmarks.w3_lab",
    "W4": "benchmarks.w4_latency",
    "W5": "benchmarks.w5_scale",
}
PEER_WORKLOADS = {"W1", "W2", "W3", "W4"}
OUTPUT = ROOT / "benchmarks" / "results" / "latest.md"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--only", type=_workloads, default=list(WORKLOADS),
                        help="comma-separated workloads to run (default: W1,W2,W3,W4,W5)")
    parser.add_argument("--quick", action="store_true", help="small sizes, for development")
    parser.add_argument("--no-peer", action="store_true", help="skip django-tasks-db")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="markdown file to write")
    return parser.parse_args(argv)


def _workloads(value: str) -> list[str]:
    names = [name.strip().upper() for name in value.split(",") if name.strip()]
    unknown = sorted(set(names) - set(WORKLOADS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown workload(s) {unknown}; choose from "
                                         f"{', '.join(WORKLOADS)}")
    return [name for name in WORKLOADS if name in names]


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def prepare_database() -> None:
    """Start (or reach) the server, create the benchmark database, migrate it."""
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    import psycopg

    from benchmarks import settings  # starts the embedded server unless DATABASE_URL is set
    from devtools import embedded_pg

    server = embedded_pg.current()
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                              [settings.BENCH_DB_NAME]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{settings.BENCH_DB_NAME}"'.encode())
        row = conn.execute("SHOW track_commit_timestamp").fetchone()
        tracked = bool(row and row[0] == "on")
        if server is not None and not tracked:
            # W4 reads each enqueue's commit time from the server (a restart is needed).
            conn.execute("ALTER SYSTEM SET track_commit_timestamp = on")
    if server is not None and not tracked:
        server.restart()
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def run_peer(only: list[str], quick: bool) -> dict[str, Any]:
    """The peer's figures, from ``python -m benchmarks.peer`` under its own settings."""
    wanted = [name for name in only if name in PEER_WORKLOADS]
    if not wanted:
        return {}
    try:
        import django_tasks_db  # noqa: F401
    except ImportError:
        print("peer: skipped (pip install django-tasks-db)")
        return {}
    log(f"peer (django-tasks-db): {','.join(wanted)}")
    args = [sys.executable, "-m", "benchmarks.peer", "--only", ",".join(wanted)]
    result = subprocess.run([*args, *(["--quick"] if quick else [])], cwd=ROOT,
                            env={**os.environ, "DJANGO_SETTINGS_MODULE": PEER_SETTINGS},
                            stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        log(f"peer failed (exit {result.returncode}); its column is left empty")
        return {}
    figures: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def main(argv: list[str] | None = None) -> None:
    options = parse(argv)
    scale = QUICK if options.quick else Scale()
    started, clock = dt.datetime.now(dt.UTC), time.perf_counter()
    from benchmarks import report

    load_before = report.load_average()
    log("starting PostgreSQL and migrating")
    prepare_database()
    # The peer's figures, and what one workload learns for the next (W2's best settings).
    facts = {} if options.no_peer else run_peer(options.only, options.quick)
    outcomes: list[Outcome] = []
    failed = []
    for name in options.only:
        log(f"{name}: running")
        module = importlib.import_module(WORKLOADS[name])
        try:
            outcomes.append(module.run(scale, facts))
        except Exception as exc:  # one broken workload must not lose the others' figures
            traceback.print_exc()
            failed.append(name)
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            outcomes.append(Outcome([], [f"**{name} failed**: {message}\n"]))
    flags = "".join([f" --only {','.join(options.only)}" if options.only != list(WORKLOADS)
                     else "", " --quick" if options.quick else "",
                     " --no-peer" if options.no_peer else ""])
    markdown = report.document(outcomes, report.environment(), started=started,
                               elapsed=time.perf_counter() - clock,
                               load=(load_before, report.load_average()), options=flags)
    print(markdown)
    options.output.parent.mkdir(parents=True, exist_ok=True)
    options.output.write_text(markdown)
    log(f"wrote {options.output}")
    if failed:
        sys.exit(f"benchmark workloads failed: {', '.join(failed)}")
