"""The example project's public SECRET_KEY and DEBUG are for the local demo only."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.devtools.conftest import ROOT, child_env

PROBE = (
    "import example_project.settings as s\n"
    "print(s.DEBUG, s.SECRET_KEY == 'example-only-not-secret', sorted(s.ALLOWED_HOSTS))"
)


def settings_of(**env: str) -> subprocess.CompletedProcess[str]:
    """Import the example's settings in a child with only ``env`` of the demo's variables."""
    base = {
        name: value for name, value in child_env().items() if name not in ("DEBUG", "SECRET_KEY")
    }
    return subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**base, "DATABASE_URL": "postgres://demo@127.0.0.1:1/demo", **env},
    )


@pytest.mark.slow
def test_the_demo_defaults_serve_loopback_only() -> None:
    done = settings_of()
    assert done.stdout.strip() == "True True ['127.0.0.1', 'localhost', 'testserver']"


@pytest.mark.slow
def test_debug_off_needs_a_secret_key_of_its_own() -> None:
    refused = settings_of(DEBUG="false")
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines()[-1] == (
        "django.core.exceptions.ImproperlyConfigured: DEBUG is off: set SECRET_KEY, "
        "the default is public"
    )
    assert settings_of(DEBUG="false", SECRET_KEY="s3cret").stdout.strip() == (
        "False False ['127.0.0.1', 'localhost', 'testserver']"
    )


@pytest.mark.slow
def test_manage_py_without_database_url_runs_on_the_examples_embedded_server() -> None:
    """The example project falls back to the embedded PostgreSQL (its demo database,
    here under a TMPDIR of the test's own), kept between commands."""
    # Not pytest's tmp_path: the server may run as the postgres user, which must
    # be able to enter every directory above its data.
    base = Path(tempfile.mkdtemp(prefix="pgqueue-example-"))
    base.chmod(0o755)

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
            env=child_env(TMPDIR=str(base), DJANGO_SETTINGS_MODULE="example_project.settings"),
        )

    try:
        migrated = manage("migrate", "-v", "0")
        assert migrated.returncode == 0, migrated.stderr
        checked = manage("queuestats", "--check")  # the same database, migrated
        assert (checked.returncode, checked.stdout.strip()) == (0, "ok"), checked.stderr
        assert not list(base.glob("*/data/postmaster.pid"))  # stopped after each command
    finally:
        shutil.rmtree(base, ignore_errors=True)
