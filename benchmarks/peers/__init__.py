"""The peers: other Python queues on PostgreSQL, measured through their own APIs.

Each runs as ``python -m benchmarks.peers NAME --only W1,W2 [--quick]`` in its
own database on the benchmark's server (``BENCH_DB_URL`` names it), with its own
enqueue API and its own worker, running the shared job body; it prints its
figures as one JSON object on the last line of stdout.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Peer:
    name: str  # the table's column (benchmarks.common.COLUMNS)
    module: str  # STEPS (workload: function) and setup()
    requires: str  # importable only when the peer is installed
    database_suffix: str  # its database is the benchmark's name plus this
    settings: str | None = None  # DJANGO_SETTINGS_MODULE, for a Django peer


PEERS = (
    Peer("pgqueuer", "benchmarks.peers.pgqueuer_peer", "pgqueuer", "_pgqueuer"),
    Peer("procrastinate", "benchmarks.peers.procrastinate_peer", "procrastinate", "_procrastinate"),
    Peer(
        "django-tasks-db",
        "benchmarks.peers.django_tasks_db_peer",
        "django_tasks_db",
        "_dtdb",
        settings="benchmarks.peer_settings",
    ),
)
