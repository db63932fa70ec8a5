"""An embedded server's watchdog: the server goes when the process that owns it goes.

``devtools.embedded_pg`` starts one per server, as a child of the owner in a session
of its own (a Ctrl-C or a signal to the owner's process group does not reach it),
with ``python -I`` and the standard library only. It waits for the owner to exit,
however it exits (SIGKILL, ``os._exit``, a crash), then stops the server with
``pg_ctl stop -m immediate`` and removes the server's temporary folder.

An owner that cleans up itself first dismisses the watchdog with a line
``release`` on its stdin (:func:`release`); the watchdog then exits without
touching anything.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import shutil
import subprocess
import sys
from pathlib import Path

READY = b"watching\n"


def spawn(
    *,
    pg_ctl: Path,
    data_dir: Path,
    remove: Path | None,
    user: tuple[int, int] | None,
    env: dict[str, str],
) -> subprocess.Popen[bytes]:
    """Start a watchdog of this process for the server in ``data_dir``; return once it
    watches. ``remove`` is the folder to delete after the stop, ``user`` the (uid, gid)
    to run ``pg_ctl`` as."""
    args = [
        sys.executable,
        "-I",
        __file__,
        "--owner",
        str(os.getpid()),
        "--pg-ctl",
        str(pg_ctl),
        "--data-dir",
        str(data_dir),
    ]
    if remove is not None:
        args += ["--remove", str(remove)]
    if user is not None:
        args += ["--user", f"{user[0]}:{user[1]}"]
    watchdog = subprocess.Popen(
        args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd="/",
        env=env,
        start_new_session=True,
    )
    assert watchdog.stdout is not None
    if watchdog.stdout.readline() != READY:
        release(watchdog)
        raise ChildProcessError(f"the server's watchdog did not start ({__file__})")
    return watchdog


def release(watchdog: subprocess.Popen[bytes]) -> None:
    """Dismiss a watchdog: its owner has stopped the server and cleaned up."""
    with watchdog:  # closes its pipes and waits for it
        assert watchdog.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # else it is gone already
            watchdog.stdin.write(b"release\n")
            watchdog.stdin.flush()


def main() -> None:
    parser = argparse.ArgumentParser(prog="pg_watchdog")
    parser.add_argument("--owner", type=int, required=True, help="the pid to outlive")
    parser.add_argument("--pg-ctl", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--remove", type=Path, help="a folder to remove after the stop")
    parser.add_argument("--user", help="uid:gid to run pg_ctl as (when we are root)")
    args = parser.parse_args()
    if watch(args.owner):
        clean_up(args)


def watch(owner: int) -> bool:
    """Block until ``owner`` exits (True) or releases us (False)."""
    try:
        # A pidfd names this very process, so a recycled pid cannot fool us.
        pidfd: int | None = os.pidfd_open(owner)
    except OSError:
        pidfd = None  # no pidfd here: notice the owner's death by being re-parented
    if os.getppid() != owner:
        return True  # it died before we looked
    sys.stdout.buffer.write(READY)
    sys.stdout.flush()
    stdin = sys.stdin.fileno()
    poller = select.poll()
    poller.register(stdin, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    while True:
        ready = {fd for fd, _ in poller.poll(1000)}
        if stdin in ready:
            line = os.read(stdin, 64)
            if line.startswith(b"release"):
                return False
            if not line:  # the owner closed it or died: the pidfd or our parent says which
                poller.unregister(stdin)
        if pidfd in ready or os.getppid() != owner:
            return True


def clean_up(args: argparse.Namespace) -> None:
    as_user: dict[str, object] = {}
    if args.user:
        uid, gid = (int(part) for part in args.user.split(":"))
        as_user = {"user": uid, "group": gid, "extra_groups": []}
    if (args.data_dir / "postmaster.pid").exists():
        subprocess.run(  # type: ignore[call-overload]
            [
                str(args.pg_ctl),
                "stop",
                "-D",
                str(args.data_dir),
                "-m",
                "immediate",
                "-w",
                "-t",
                "30",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
            env={**os.environ, "LC_ALL": "C", "LANG": "C"},
            check=False,
            **as_user,
        )
    if args.remove:
        shutil.rmtree(args.remove, ignore_errors=True)


if __name__ == "__main__":
    main()
