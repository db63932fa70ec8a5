"""A PgBouncer in front of a PostgreSQL server, for the tests of pooled set-ups.

The pooler is Debian's ``pgbouncer`` package (1.18 on Debian 12). As root it is
installed from apt when missing (:func:`ensure_installed`), as the browser test's
Chromium is; elsewhere a test that needs it skips unless ``CI`` is set.

**Access.** It listens on 127.0.0.1 at a free port, with no Unix socket; clients
authenticate with SCRAM against a password of its own (the server's when the
server has one, so a test's URL needs only a new port), kept in a folder only the
pooler's user may enter. It reaches the server with the server's own password.
PgBouncer refuses to run as root, so as root it runs as the ``postgres`` user,
like the embedded server.

**Lifetime.** It runs in the foreground as our child and is told to die with the
thread that started it (``setpriv --pdeathsig``), so a killed test run leaves no
pooler behind; :meth:`PgBouncer.stop` ends it and removes its folder.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import psycopg

__all__ = ["PgBouncer", "PgBouncerMissing", "ensure_installed"]

BINARY = "/usr/sbin/pgbouncer"
RUN_AS = "postgres"


class PgBouncerMissing(RuntimeError):
    """PgBouncer is not installed and cannot be installed here."""


def ensure_installed() -> str:
    """The pgbouncer binary; installed from apt (quietly) when missing and we are root."""
    found = shutil.which("pgbouncer") or (BINARY if os.path.exists(BINARY) else None)
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise PgBouncerMissing("pgbouncer is not installed (apt-get install pgbouncer)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "pgbouncer"]):
        result = subprocess.run(command, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            raise PgBouncerMissing(f"{' '.join(command)} failed: {result.stderr.strip()[-300:]}")
    # Debian's package enables a system service on port 6432; ours are our own.
    subprocess.run(["service", "pgbouncer", "stop"], capture_output=True)
    return BINARY


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _ids() -> tuple[int, int] | None:
    if os.geteuid() != 0:
        return None
    account = pwd.getpwnam(RUN_AS)
    return account.pw_uid, account.pw_gid


class PgBouncer:
    """One PgBouncer in front of the server of ``server_url`` (a postgres:// URL).

    ``pool_mode`` and ``pool_size`` are PgBouncer's ``pool_mode`` and
    ``default_pool_size``; ``settings`` adds lines to its ``[pgbouncer]`` section,
    ``database_options`` options to its one (wildcard) database entry, such as
    ``connect_query``. Every database of the server is reachable through it under
    its own name.
    """

    def __init__(
        self,
        server_url: str,
        *,
        pool_mode: str = "transaction",
        pool_size: int = 20,
        settings: dict[str, str] | None = None,
        database_options: dict[str, str] | None = None,
    ) -> None:
        self.binary = ensure_installed()
        server = urlsplit(server_url)
        self.server_host = server.hostname or "127.0.0.1"
        self.server_port = server.port or 5432
        self.user = unquote(server.username or "postgres")
        self.server_password = unquote(server.password) if server.password else None
        self.password = self.server_password or secrets.token_urlsafe(24)
        self.port = _free_port()
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.settings = dict(settings or {})
        self.database_options = dict(database_options or {})
        self.folder = Path(tempfile.mkdtemp(prefix="pgqueue-pgbouncer-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log_file(self) -> Path:
        return self.folder / "pgbouncer.log"

    def url(self, dbname: str) -> str:
        """A URL that reaches database ``dbname`` through the pooler."""
        user = quote(self.user, safe="")
        return f"postgres://{user}:{quote(self.password, safe='')}@127.0.0.1:{self.port}/{dbname}"

    def _write_config(self) -> Path:
        server = f"host={self.server_host} port={self.server_port} user={self.user}"
        if self.server_password:
            server += f" password={self.server_password}"
        for name, value in self.database_options.items():
            server += " " + name + "='" + value.replace("'", "''") + "'"
        options = {
            "listen_addr": "127.0.0.1",
            "listen_port": str(self.port),
            "unix_socket_dir": "",
            "auth_type": "scram-sha-256",
            "auth_file": str(self.folder / "userlist.txt"),
            "admin_users": self.user,
            "stats_users": self.user,
            "pool_mode": self.pool_mode,
            "default_pool_size": str(self.pool_size),
            "max_client_conn": "1000",
            "logfile": str(self.log_file),
            "pidfile": str(self.folder / "pgbouncer.pid"),
            # psycopg sends none of these, but a libpq client may.
            "ignore_startup_parameters": "extra_float_digits,options",
            **self.settings,
        }
        config = self.folder / "pgbouncer.ini"
        config.write_text(
            "[databases]\n"
            f"* = {server}\n\n"
            "[pgbouncer]\n" + "".join(f"{name} = {value}\n" for name, value in options.items())
        )
        (self.folder / "userlist.txt").write_text(f'"{self.user}" "{self.password}"\n')
        ids = _ids()
        for path in (self.folder, *self.folder.iterdir()):
            os.chmod(path, 0o700 if path.is_dir() else 0o600)
            if ids:
                os.chown(path, *ids)
        return config

    def start(self, timeout: float = 15.0) -> PgBouncer:
        config = self._write_config()
        ids = _ids()
        kwargs: dict[str, Any] = (
            {"user": ids[0], "group": ids[1], "extra_groups": []} if ids else {}
        )
        # setpriv (util-linux, always on Debian) makes it die with the thread that
        # started it, without a preexec_fn (unsafe in a process with threads).
        die_with_us = ["setpriv", "--pdeathsig", "TERM"] if shutil.which("setpriv") else []
        with open(self.folder / "stderr.log", "wb") as stderr:  # the child keeps its own copy
            self.process = subprocess.Popen(
                [*die_with_us, self.binary, str(config)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                cwd="/",
                **kwargs,
            )
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.admin("SHOW VERSION")
                return self
            except psycopg.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"PgBouncer did not start: {self._last_log_line()}"
                    ) from None
                time.sleep(0.05)

    def admin(self, command: str) -> list[dict[str, Any]]:
        """Run ``command`` (``SHOW POOLS``...) on the admin console; the rows by column."""
        with psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            dbname="pgbouncer",
            user=self.user,
            password=self.password,
            autocommit=True,
            connect_timeout=2,
            prepare_threshold=None,
        ) as conn:
            cursor = conn.execute(command)
            if cursor.description is None:  # PAUSE, RESUME...: no rows
                return []
            names = [column.name for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def server_connections(self, dbname: str) -> int:
        """How many server connections the pooler holds for ``dbname`` now."""
        return sum(1 for row in self.admin("SHOW SERVERS") if row["database"] == dbname)

    def transactions(self, dbname: str) -> int:
        """Transactions the pooler has passed to ``dbname`` since it started."""
        rows = [row for row in self.admin("SHOW STATS") if row["database"] == dbname]
        return int(rows[0]["total_xact_count"]) if rows else 0

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        with contextlib.suppress(OSError):
            shutil.rmtree(self.folder)

    def _last_log_line(self) -> str:
        lines: list[str] = []
        for log in (self.log_file, self.folder / "stderr.log"):
            with contextlib.suppress(OSError):
                lines += log.read_text().strip().splitlines()
        return lines[-1] if lines else "nothing was logged"

    def __enter__(self) -> PgBouncer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
