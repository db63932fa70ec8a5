"""``python -m benchmarks.peers.pgqueuer_worker [--drain]``: PgQueuer's worker, as ``pgq run``.

``pgq run`` of PgQueuer 1.6.0 stops before it starts with the typer installed here
(0.29: its ``--log-level`` reaches the logging set-up as a string, AttributeError
'str' object has no attribute 'name'). This runs what the command would: its
logging at its default level (INFO), then ``pgqueuer.run`` (its supervisor, "as
``pgq run`` does, without the CLI") on uvloop when present, with ``pgq run``'s
defaults except the concurrency, which is 8 (``--max-concurrent-tasks 8``, and
batches of 4, the largest PgQueuer allows with it).
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

from benchmarks.peers.base import SLOTS

BATCH = SLOTS // 2  # PgQueuer requires max_concurrent_tasks >= 2 * batch_size


def main() -> None:
    import pgqueuer
    from pgqueuer.core import logconfig
    from pgqueuer.domain.types import QueueExecutionMode

    mode = QueueExecutionMode.drain if "--drain" in sys.argv else QueueExecutionMode.continuous
    logconfig.setup_fancy_logger(logconfig.LogLevel.INFO)
    run = pgqueuer.run(
        "benchmarks.peers.pgqueuer_peer:create",
        batch_size=BATCH,
        max_concurrent_tasks=SLOTS,
        mode=mode,
        dequeue_timeout=timedelta(seconds=30),
    )
    try:
        import uvloop
    except ImportError:
        asyncio.run(run)
    else:
        uvloop.run(run)


if __name__ == "__main__":
    main()
