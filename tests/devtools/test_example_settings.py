"""The example project's public SECRET_KEY and DEBUG are for the local demo only."""

from __future__ import annotations

import subprocess
import sys

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
