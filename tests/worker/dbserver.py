"""Stop, crash and start the test database's server, for the fault tests.

The embedded server is ours to control. A DATABASE_URL server is controlled
only when it is a local Debian cluster (pg_ctlcluster) and we are root, as in CI;
otherwise :func:`server` returns None and the test skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable

import pytest
from django.db import connection


class DatabaseServer:
    def __init__(self, stop: Callable[[str], None], start: Callable[[], None]) -> None:
        self._stop = stop
        self._start = start

    def stop(self) -> None:
        """A fast shutdown: connections are cut, nothing committed is lost."""
        self._stop("fast")

    def crash(self) -> None:
        """``pg_ctl stop -m immediate``: the server dies as if killed, and recovers on start."""
        self._stop("immediate")

    def start(self) -> None:
        self._start()


def server() -> DatabaseServer | None:
    from devtools import embedded_pg

    embedded = embedded_pg.current()
    if embedded is not None:
        return DatabaseServer(embedded.stop, embedded.start)
    port = str(connection.settings_dict.get("PORT") or 5432)
    host = connection.settings_dict.get("HOST") or ""
    if (
        os.geteuid() != 0
        or host not in ("127.0.0.1", "localhost", "")
        or not shutil.which("pg_lsclusters")
    ):
        return None
    clusters = subprocess.run(
        ["pg_lsclusters", "--no-header"], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    match = [line.split()[:2] for line in clusters if line.split()[2:3] == [port]]
    if not match:
        return None
    ctl = ["pg_ctlcluster", "--skip-systemctl-redirect", *match[0]]

    def stop(mode: str) -> None:
        subprocess.run([*ctl, "stop", "-m", mode], check=True, capture_output=True)

    def start() -> None:
        subprocess.run([*ctl, "start"], check=True, capture_output=True)

    return DatabaseServer(stop, start)


def server_or_skip() -> DatabaseServer:
    found = server()
    if found is None:
        pytest.skip(
            "cannot stop this database server (not embedded, nor a local cluster we "
            "may control as root)"
        )
    return found
