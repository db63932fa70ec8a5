"""docs/quickstart.md, followed literally in a fresh project: every command and file
of the page, taken from the page itself, against a fresh database on the test server.

The only departures, each forced by where the test runs: ``pip install`` is not run
(the package under test is already installed, editable, in this environment), the
commands use this environment's ``python`` and ``django-admin``, and the page's
``DATABASES`` is followed by one naming a database of the test server.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

pytest.importorskip("django.tasks", reason="the page is written for Django 6's django.tasks")

pytestmark = pytest.mark.slow

PAGE = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
BIN = Path(sys.executable).parent


def blocks(kind: str) -> list[str]:
    """The page's fenced blocks of one kind (python, console, text), in order."""
    return [
        body for fence, body in FENCE.findall(PAGE.read_text(encoding="utf-8")) if fence == kind
    ]


def block(kind: str, first_line: str) -> str:
    """The one block of ``kind`` whose first line is ``first_line``."""
    (found,) = [b for b in blocks(kind) if b.splitlines()[0] == first_line]
    return found


@pytest.fixture
def fresh_database(db_url: str) -> Iterator[str]:
    """The URL of a new, empty database on the test server, dropped afterwards."""
    parts = urlsplit(db_url)
    name = f"{parts.path.lstrip('/')}_quickstart"[:63]
    server = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    yield urlunsplit(parts._replace(path=f"/{name}"))
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Project:
    """A shell session in a temporary directory: ``cd`` moves it, the rest runs."""

    def __init__(self, root: Path) -> None:
        self.cwd = root
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("DJANGO")},
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": "",
        }
        self.env.pop("DATABASE_URL", None)  # the project has its own settings

    def run(self, line: str, stdin: str | None = None) -> str:
        argv = shlex.split(line)
        if argv[0] == "cd":
            self.cwd = self.cwd / argv[1]
            return ""
        if argv[0] == "pip":
            return ""  # installed already: the package under test, editable
        done = subprocess.run(
            argv,
            cwd=self.cwd,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"{line!r} failed:\n{output}"
        return output

    def shell(self, code: str) -> str:
        return self.run("python manage.py shell -v 0", stdin=code)


def database_settings(url: str) -> str:
    parts = urlsplit(url)
    return (
        "\n# The test's own server, after the page's DATABASES:\n"
        "DATABASES = {'default': {'ENGINE': 'django.db.backends.postgresql', "
        f"'NAME': {parts.path.lstrip('/')!r}, 'USER': {parts.username or 'postgres'!r}, "
        f"'PASSWORD': {parts.password or ''!r}, 'HOST': {parts.hostname or '127.0.0.1'!r}, "
        f"'PORT': {parts.port or 5432}}}}}\n"
    )


def test_the_quick_start_runs_as_written(tmp_path: Path, fresh_database: str) -> None:
    project = Project(tmp_path)
    commands = [
        line
        for body in blocks("console")
        for line in body.splitlines()
        if line.strip() and not line.startswith("#")
    ]
    # Step 1: install, start a project and an app.
    setup = commands[: commands.index("python manage.py migrate")]
    for line in setup:
        project.run(line)
    settings = project.cwd / "mysite" / "settings.py"
    assert settings.is_file(), "startproject did not make mysite/settings.py"

    # Step 2: the settings as the page shows them, then migrate.
    page_settings = block("python", "# mysite/settings.py")
    with settings.open("a", encoding="utf-8") as file:
        file.write("\n" + page_settings + database_settings(fresh_database))
    project.run("python manage.py migrate")
    assert "System check identified no issues" in project.run("python manage.py check")

    # Step 3: the task.
    (project.cwd / "shop" / "tasks.py").write_text(block("python", "# shop/tasks.py"))

    # Step 4: enqueue in a transaction, and a delayed job.
    shells = [b for b in blocks("python") if b.startswith("# python manage.py shell")]
    assert project.shell(shells[0]).strip() == "READY READY"

    # Step 5: the worker, and its banner as the page shows it.
    (worker,) = [line for line in commands if line.startswith("python manage.py runworker")]
    output = project.run(worker)
    banner = blocks("text")[0]
    for line in banner.splitlines()[1:]:  # the first line holds a time and a pid
        assert f"\n{line}\n" in output, f"{line!r} not in:\n{output}"
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO starting worker ", output, re.M)

    # Step 6: what happened, exactly as the page prints it.
    expected = blocks("text")[1].strip()
    assert project.shell(shells[1]).strip() == expected

    # In your tests: the page's test file, run as the page runs it.
    (project.cwd / "shop" / "tests.py").write_text(block("python", "# shop/tests.py"))
    (pytest_line,) = [line for line in commands if line.startswith("python -m pytest")]
    output = project.run(f"{pytest_line} -p no:cacheprovider -p no:randomly")
    assert re.search(r"=+ 1 passed in ", output.splitlines()[-1]), output
