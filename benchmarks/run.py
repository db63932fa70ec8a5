"""``python -m benchmarks [--only W1,W3] [--quick]``: run, print and save the table.

One invocation, one server: the settings start an embedded PostgreSQL (or use
DATABASE_URL), the runner creates the ``pgqueue_bench`` database in it, migrates,
runs each peer (PgQueuer, Procrastinate, django-tasks-db) in a subprocess in a
database of its own on the same server, then each workload against django-pgqueue
(the Tasks path and the direct API) and the article's baseline, and writes the
markdown to ``benchmarks/results/latest.md``.
"""

from __future__ import annotations

import argparse
import atexit
import datetime as dt
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from benchmarks import jobbody
from benchmarks.common import DB_URL_ENV, QUICK, ROOT, SETTINGS, Outcome, Scale
from benchmarks.peers import PEERS, Peer

WORKLOADS = {
    "W1": "benchmarks.w1_enqueue",
    "W2": "benchmarks.w2_drain",
    "W3": "benchmarks.w3_lab",
    "W4": "benchmarks.w4_latency",
    "W5": "benchmarks.w5_scale",
    "W6": "benchmarks.w6_queues",
}
PEER_WORKLOADS = {"W1", "W2", "W3", "W4"}
OUTPUT = ROOT / "benchmarks" / "results" / "latest.md"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--only",
        type=_workloads,
        default=list(WORKLOADS),
        help="comma-separated workloads to run (default: all)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for development")
    parser.add_argument("--no-peer", action="store_true", help="skip every peer")
    parser.add_argument(
        "--peers",
        type=_peers,
        default=[peer.name for peer in PEERS],
        help=f"comma-separated peers to run (default: {','.join(peer.name for peer in PEERS)})",
    )
    parser.add_argument("--output", type=Path, default=OUTPUT, help="markdown file to write")
    return parser.parse_args(argv)


def _workloads(value: str) -> list[str]:
    names = [name.strip().upper() for name in value.split(",") if name.strip()]
    unknown = sorted(set(names) - set(WORKLOADS))
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown workload(s) {unknown}; choose from {', '.join(WORKLOADS)}"
        )
    return [name for name in WORKLOADS if name in names]


def _peers(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    known = [peer.name for peer in PEERS]
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown peer(s) {unknown}; choose from {', '.join(known)}"
        )
    return [name for name in known if name in names]


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def database_url(url: str, name: str) -> str:
    """``url`` (libpq URL) naming database ``name`` instead."""
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def create_database(name: str) -> None:
    import psycopg

    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"'.encode())


def prepare_database() -> None:
    """Start (or reach) the server, create the benchmark database, migrate it."""
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    import psycopg

    from devtools import embedded_pg

    # A durable embedded server unless DATABASE_URL is set (or BENCH_FSYNC=off).
    embedded_pg.ensure_database_url(durable=os.environ.get("BENCH_FSYNC", "on") != "off")
    from benchmarks import settings

    server = embedded_pg.current()
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [settings.BENCH_DB_NAME]
        ).fetchone()
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
    from benchmarks.common import db_url

    os.environ[DB_URL_ENV] = db_url()  # for the workloads, and the base of each peer's


def use_job_file() -> None:
    """A fresh job file for this run (removed at exit); every worker appends to it."""
    handle, job_file = tempfile.mkstemp(prefix="pgqueue-bench-jobs-", suffix=".txt")
    os.close(handle)
    atexit.register(os.unlink, job_file)
    os.environ[jobbody.ENV] = job_file


def run_peer(peer: Peer, only: list[str], quick: bool) -> tuple[dict[str, float] | None, str]:
    """The peer's figures (None if it could not run) and a line saying how it went."""
    from importlib.util import find_spec

    from benchmarks.settings import BENCH_DB_NAME

    if find_spec(peer.requires) is None:
        return None, f"{peer.name}: not installed (`pip install -e . --group bench`), n/a"
    name = BENCH_DB_NAME + peer.database_suffix
    create_database(name)
    log(f"peer {peer.name}: {','.join(only)}")
    env = {**os.environ, DB_URL_ENV: database_url(os.environ[DB_URL_ENV], name)}
    if peer.settings:
        env["DJANGO_SETTINGS_MODULE"] = peer.settings
    started = time.perf_counter()
    args = [sys.executable, "-m", "benchmarks.peers", peer.name, "--only", ",".join(only)]
    result = subprocess.run(
        [*args, *(["--quick"] if quick else [])],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        log(f"peer {peer.name} failed (exit {result.returncode}); its column reads n/a")
        return None, f"{peer.name}: failed (exit {result.returncode}), n/a; see the run's log"
    figures: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures, (
        f"{peer.name}: ran {','.join(only)} in {time.perf_counter() - started:.0f} s, "
        f"database `{name}`"
    )


def run_peers(names: list[str], only: list[str], quick: bool) -> tuple[dict[str, Any], list[str]]:
    """Every chosen peer's figures, under facts["peers"], and their status lines."""
    wanted = [name for name in only if name in PEER_WORKLOADS]
    ran: dict[str, dict[str, float] | None] = {}
    status = []
    if wanted:
        for peer in PEERS:
            if peer.name in names:
                ran[peer.name], line = run_peer(peer, wanted, quick)
                status.append(f"- peer {line}")
    return {"peers": ran}, status


def main(argv: list[str] | None = None) -> None:
    options = parse(argv)
    scale = QUICK if options.quick else Scale()
    started, clock = dt.datetime.now(dt.UTC), time.perf_counter()
    from benchmarks import report

    load_before = report.load_average()
    log("starting PostgreSQL and migrating")
    prepare_database()
    use_job_file()
    # The peers' figures, and what one workload learns for the next (W2's best settings).
    facts, peer_status = run_peers(
        [] if options.no_peer else options.peers, options.only, options.quick
    )
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
    flags = "".join(
        [
            f" --only {','.join(options.only)}" if options.only != list(WORKLOADS) else "",
            " --quick" if options.quick else "",
            " --no-peer" if options.no_peer else "",
            f" --peers {','.join(options.peers)}"
            if not options.no_peer and len(options.peers) < len(PEERS)
            else "",
        ]
    )
    markdown = report.document(
        outcomes,
        report.environment(),
        started=started,
        elapsed=time.perf_counter() - clock,
        load=(load_before, report.load_average()),
        options=flags,
        peer_status=peer_status,
    )
    print(markdown)
    options.output.parent.mkdir(parents=True, exist_ok=True)
    options.output.write_text(markdown)
    log(f"wrote {options.output}")
    if failed:
        sys.exit(f"benchmark workloads failed: {', '.join(failed)}")
