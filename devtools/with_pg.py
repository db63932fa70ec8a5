"""``python -m devtools.with_pg [--durable] [--demo-data] (-m MODULE | SCRIPT) [ARG ...]``

Runs a Python module or script, in this process, on an embedded PostgreSQL
started for it (or on ``DATABASE_URL`` when that is set), and stops the server
when the program ends. For programs that do not start one themselves:
``make admin`` runs ``manage.py runserver`` on the demo's database
(``--demo-data``), ``make bench`` runs ``-m benchmarks`` on a durable server
(``--durable``: fsync and synchronous_commit on).
"""

from __future__ import annotations

import runpy
import signal
import sys

from devtools import embedded_pg
from devtools.demo import DEMO_DATA

USAGE = "usage: python -m devtools.with_pg [--durable] [--demo-data] (-m MODULE | SCRIPT) [ARG ...]"


def main(argv: list[str]) -> None:
    flags = {"--durable": False, "--demo-data": False}
    while argv and argv[0] in flags:
        flags[argv.pop(0)] = True
    if len(argv) >= 2 and argv[0] == "-m":
        module, script, args = argv[1], None, argv[2:]
    elif argv and not argv[0].startswith("-"):
        module, script, args = None, argv[0], argv[1:]
    else:
        sys.exit(USAGE)
    embedded_pg.ensure_database_url(
        data_dir=DEMO_DATA if flags["--demo-data"] else None, durable=flags["--durable"]
    )
    # SIGTERM as an exit, so the server gets a clean stop (SIGKILL leaves it to the watchdog).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if module is not None:
        sys.argv = [module, *args]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        assert script is not None
        sys.argv = [script, *args]
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
