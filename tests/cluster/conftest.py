"""Set-ups past one machine: a real PgBouncer in front of the test database, and
a primary with a streaming standby (tests/cluster/test_failover.py).

The pooler is Debian's ``pgbouncer``, installed from apt when missing and we are
root (devtools/pgbouncer.py); elsewhere these tests skip, unless ``CI`` is set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from django.db import connection

from devtools.pgbouncer import PgBouncer, PgBouncerMissing
from tests.worker.conftest import ROOT, start_worker

__all__ = ["start_worker"]  # the fixture, for these tests too


def direct_alias(url: str) -> dict[str, Any]:
    """A DATABASES entry (merged over "default") that reaches ``url``'s server directly."""
    parts = urlsplit(url)
    return {
        "HOST": parts.hostname,
        "PORT": str(parts.port or 5432),
        "USER": unquote(parts.username or "postgres"),
        "PASSWORD": unquote(parts.password or ""),
        "NAME": parts.path.lstrip("/"),
    }


def pooled_env(bouncer: PgBouncer, db_url: str, **pgqueue: Any) -> dict[str, str]:
    """The environment of a Django process whose "default" database goes through
    ``bouncer``, with the settings a transaction pool needs: no prepared statements
    (PgBouncer 1.18 keeps none), no server-side cursors (Django's advice), and the
    worker's session on a direct alias, "direct" (unless ``pgqueue`` says otherwise)."""
    settings = {"PREPARE": False, "LISTEN_DATABASE": "direct", **pgqueue}
    return {
        "DATABASE_URL": bouncer.url(connection.settings_dict["NAME"]),
        "PGQUEUE_TEST_DATABASES": json.dumps(
            {"default": {"DISABLE_SERVER_SIDE_CURSORS": True}, "direct": direct_alias(db_url)}
        ),
        "PGQUEUE_TEST_PGQUEUE": json.dumps({k: v for k, v in settings.items() if v is not None}),
    }


def run_django(code: str, env: dict[str, str], timeout: float = 60) -> str:
    """Run ``code`` in ``manage.py shell`` of a fresh Django process; the last line it printed."""
    result = subprocess.run(
        [sys.executable, "-m", "django", "shell", "--settings=tests.settings", "-c", code],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture
def pgbouncer(db_url: str) -> Iterator[Callable[..., PgBouncer]]:
    """Start PgBouncers (``PgBouncer(...)``'s options) in front of the test database."""
    started: list[PgBouncer] = []

    def start(**options: Any) -> PgBouncer:
        try:
            bouncer = PgBouncer(db_url, **options)
        except PgBouncerMissing as exc:
            if os.environ.get("CI"):
                raise
            pytest.skip(str(exc))
        started.append(bouncer)
        return bouncer.start()

    yield start
    for bouncer in started:
        bouncer.stop()
