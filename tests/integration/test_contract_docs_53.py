"""The docs as a new user follows them (issues 7 and 13): every code block of the
README and of docs/ is taken from the page itself and checked against the code, or
run. tests/unit/test_docs.py checks the settings' defaults, the commands' options
and the check ids; this file checks what the code blocks and the reference's
limits say: imports, ``manage.py`` lines, ``make`` targets, ``PGQUEUE`` dicts,
the settings' bounds, the commands' JSON, and snippets run as written."""

from __future__ import annotations

import ast
import datetime as dt
import importlib
import importlib.util
import io
import json
import re
import shlex
import textwrap
import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command, get_commands, load_command_class
from django.db import connections
from django.dispatch import receiver
from django.test import override_settings

from django_pgqueue import conf, enqueue
from django_pgqueue.models import Job
from django_pgqueue.testing import run_jobs
from tests.testapp.tasks import add, mark

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^( *)```(\S*)\n(.*?)^\1```", re.MULTILINE | re.DOTALL)
#: Modules of the reader's project (or optional peers) that the snippets import.
THEIRS = {"shop", "mysite", "pytest", "django_tasks_db"}


def blocks(*kinds: str) -> list[tuple[str, str]]:
    """Every fenced block of these kinds in the README and docs, as (where, body)."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if match[2] in kinds:
                line = text[: match.start()].count("\n") + 1
                found.append((f"{page.relative_to(ROOT)}:{line}", textwrap.dedent(match[3])))
    return found


def section(page: str, heading: str) -> str:
    text = (ROOT / page).read_text(encoding="utf-8")
    match = re.search(rf"^#+ {re.escape(heading)}\n(.*?)(?=^#+ |\Z)", text, re.M | re.S)
    assert match, f"{page} has no heading {heading}"
    return " ".join(match[1].split())  # line breaks as spaces


def _framework(module: str) -> str:
    """``django.tasks...`` as this Django has it: on 5.2, the backport's ``django_tasks``,
    which the docs tell 5.2 users to import instead."""
    if module.startswith("django.tasks") and importlib.util.find_spec("django.tasks") is None:
        return "django_tasks" + module.removeprefix("django.tasks")
    return module


def test_every_python_block_parses_and_its_imports_exist() -> None:
    python = blocks("python")
    assert len(python) > 30
    missing = []
    for where, body in python:
        tree = ast.parse(body, where)  # `[..., "x"]` is Python too
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.partition(".")[0] not in THEIRS:
                        importlib.import_module(_framework(alias.name))
            elif isinstance(node, ast.ImportFrom) and node.module:
                if node.module.partition(".")[0] in THEIRS:
                    continue
                module = importlib.import_module(_framework(node.module))
                for alias in node.names:
                    if not hasattr(module, alias.name):
                        missing.append(f"{where}: from {node.module} import {alias.name}")
    assert missing == []


def manage_py_lines() -> list[tuple[str, str, list[str]]]:
    """Every ``manage.py COMMAND ...`` of a console, ini or yaml block: (where, command,
    its arguments), from a shell line or a container's ``command:`` list."""
    lines = []
    for where, body in blocks("console", "ini", "yaml"):
        for line in body.splitlines():
            if listed := re.search(r'"manage\.py", "(\w+)"((?:, "[^"]*")*)\]', line):
                lines.append((where, listed[1], re.findall(r'"([^"]*)"', listed[2])))
            elif shell := re.search(r"manage\.py (\w+)([^#'\n]*)", line):
                # systemd's %i and %H are the instance and the host
                args = shlex.split(shell[2].replace("%i", "1").replace("%H", "host"))
                lines.append((where, shell[1], args))
    return lines


def test_every_manage_py_line_of_the_docs_is_a_command_its_parser_takes() -> None:
    lines = manage_py_lines()
    assert len(lines) > 25
    commands = get_commands()
    ours = {name for where, name, args in lines if commands.get(name) == "django_pgqueue"}
    assert len(ours) == 7
    for where, name, args in lines:
        assert name in commands, f"{where}: no command {name}"
        parser = load_command_class(commands[name], name).create_parser("manage.py", name)
        parser.parse_args(args)  # a CommandError names the line's mistake


def test_every_make_target_the_docs_name_is_in_the_makefile() -> None:
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    named = {
        (where, target)
        for where, body in blocks("console")
        for target in re.findall(r"^(?:\S+=\S+ )*make ([\w-]+)", body, re.MULTILINE)
    }
    assert len(named) > 10
    assert [f"{where}: make {t}" for where, t in sorted(named) if t not in targets] == []


def test_every_pgqueue_dict_of_the_docs_is_valid_settings() -> None:
    dicts = [(w, b) for w, b in blocks("python") if re.search(r"^PGQUEUE = ", b, re.M)]
    assert len(dicts) >= 4
    for where, body in dicts:
        assignment = next(
            node
            for node in ast.parse(body).body
            if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "PGQUEUE"
        )
        raw = eval(ast.unparse(assignment.value), {"timedelta": dt.timedelta})
        try:
            conf._build(raw)
        except ImproperlyConfigured as exc:  # pragma: no cover - the failure's message
            pytest.fail(f"{where}: {exc}")


#: Each documented bound of docs/reference/settings.md (the words after "Default:",
#: or the paragraph on durations) with values just inside and outside it.
TEN_YEARS, A_YEAR = 315_360_000, 31_536_000
BOUNDS: list[tuple[str, str, list[tuple[Any, bool]]]] = [
    ("MAX_ATTEMPTS", "A whole number from 1 to 1,000,000.", [(1, True), (0, False)]),
    ("MAX_ATTEMPTS", "A whole number from 1 to 1,000,000.", [(10**6, True), (10**6 + 1, False)]),
    ("BACKOFF_BASE", "Seconds, from 0 to a year (31,536,000).", [(0, True), (-1, False)]),
    ("BACKOFF_BASE", "from 0 to a year", [(A_YEAR, True), (A_YEAR + 1, False)]),
    ("BACKOFF_MAX", "above 0 and at most a year (31,536,000)", [(A_YEAR, True), (0, False)]),
    ("BACKOFF_MAX", "at most a year", [(A_YEAR + 1, False)]),
    ("CONCURRENCY", "A whole number from 1 to 1,000 ", [(1000, True), (1001, False)]),
    ("PREFETCH", "from 0 to 2,147,483,647", [(2**31 - 1, True), (2**31, False)]),
    ("MAX_SNOOZES", "from 0 to 1,000,000", [(0, True), (10**6, True), (10**6 + 1, False)]),
    ("METRICS_PORT", "from 0 to 65535", [(0, True), (65535, True), (65536, False)]),
    ("CHANNEL", "at most 63 bytes", [("c" * 63, True), ("c" * 64, False)]),
    ("LEASE", "at least 0.1", [(0.1, True), (0.09, False)]),
    ("SHUTDOWN_TIMEOUT", "Seconds, 0 or more.", [(0, True), (-0.1, False)]),
]
SECONDS_ABOVE_0 = ["POLL_INTERVAL", "REAP_INTERVAL", "PRUNE_INTERVAL", "JOB_TIMEOUT"]


def settings_section(key: str) -> str:
    return section("docs/reference/settings.md", f"`{key}`")


def accepted(key: str, value: Any) -> bool:
    try:
        conf._build({key: value, **({"HEARTBEAT_INTERVAL": 0.01} if key == "LEASE" else {})})
    except ImproperlyConfigured:
        return False
    return True


@pytest.mark.parametrize(("key", "words", "probes"), BOUNDS, ids=[b[0] for b in BOUNDS])
def test_each_documented_bound_of_a_setting_is_the_codes(
    key: str, words: str, probes: list[tuple[Any, bool]]
) -> None:
    assert words in settings_section(key)
    assert [(value, accepted(key, value)) for value, _ in probes] == probes


def test_every_duration_is_bounded_at_ten_years_as_the_settings_page_says() -> None:
    intro = " ".join((ROOT / "docs/reference/settings.md").read_text().split())
    assert "at most ten years (315,360,000 seconds; the backoff keys, a year)" in intro
    for key in sorted(conf.DURATIONS - {"BACKOFF_BASE", "BACKOFF_MAX"}):
        assert accepted(key, TEN_YEARS) == (key != "HEARTBEAT_INTERVAL"), key  # < LEASE
        assert not accepted(key, TEN_YEARS + 1), key
    for key in SECONDS_ABOVE_0:
        assert "above 0" in settings_section(key), key
        assert not accepted(key, 0), key


def test_a_heartbeat_interval_not_below_the_lease_is_e001_as_documented() -> None:
    """The page said the system check does not compare the two: it does, when the
    settings are read; only a --lease given to runworker is compared at its start."""
    text = settings_section("HEARTBEAT_INTERVAL")
    assert "The system check does not compare" not in text
    with override_settings(PGQUEUE={"HEARTBEAT_INTERVAL": 90}):
        errors = [m for m in checks.run_checks() if m.id == "django_pgqueue.E001"]
    assert [e.msg for e in errors] == [
        "PGQUEUE['HEARTBEAT_INTERVAL'] = 90: expected fewer seconds than LEASE (60), "
        "or leases lapse between renewals"
    ]
    assert f"`{errors[0].msg}`" in text
    with override_settings(PGQUEUE={"HEARTBEAT_INTERVAL": 90, "LEASE": 120}):
        from django_pgqueue.worker import WorkerConfig

        with pytest.raises(ImproperlyConfigured) as refused:
            WorkerConfig.from_settings(lease=60)
    assert f"`{refused.value}`" in text


def test_the_every_bound_of_a_periodic_entry_is_the_codes() -> None:
    row = next(
        line
        for line in (ROOT / "docs/periodic.md").read_text().splitlines()
        if "| `every` |" in line
    )
    assert "(at least 1, at most ten years)" in row
    for every, ok in [(1, True), (0.5, False), (TEN_YEARS, True), (TEN_YEARS + 1, False)]:
        entry = {"ping": {"task": "tests.testapp.tasks.noop", "every": every}}
        assert accepted("PERIODIC", entry) == ok, every


def json_of(command: str, *args: str) -> Any:
    out = io.StringIO()
    call_command(command, *args, stdout=out)
    return json.loads(out.getvalue())


def documented_queuestats_keys() -> tuple[set[str], set[str], set[str]]:
    """The top-level, per-queue and per-worker keys commands.md gives for --json."""
    text = section("docs/reference/commands.md", "`queuestats`")
    (example,) = [body for where, body in blocks("json") if "queues" in body]
    shown = json.loads(example)
    extra = re.search(r"also `workers`, one entry per registered worker with its (.*?), and", text)
    assert extra
    assert "`running_on_gone_workers`" in text
    workers = set(re.findall(r"`(\w+)`", extra[1]))
    return set(shown) | {"workers", "running_on_gone_workers"}, set(shown["queues"][0]), workers


@pytest.mark.django_db(transaction=True)
def test_the_testing_guides_worker_thread_runs_and_queuestats_json_is_as_documented() -> None:
    """docs/tasks.md's worker-in-a-thread snippet, as written (with a task of the test
    app on queue "emails"), and ``queuestats --json`` read while it runs: the keys
    docs/reference/commands.md lists, at each level."""
    from django_pgqueue.worker import Events, Worker, WorkerConfig

    (snippet,) = [b for _, b in blocks("python") if "WorkerConfig.from_settings" in b]
    assert 'WorkerConfig.from_settings(queues=["emails"], concurrency=2), events)' in snippet
    events = Events()
    started = threading.Event()
    events.subscribe("started", lambda job: started.set())
    worker = Worker(WorkerConfig.from_settings(queues=["emails"], concurrency=2), events)
    status: list[int] = []

    def run() -> None:
        try:
            status.append(worker.run())
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        mark.using(queue="emails").enqueue(label="docs-thread", sleep=0.5)
        assert started.wait(10)
        stats = json_of("queuestats", "--json")
    finally:
        worker.request_stop()
        thread.join(30)
    assert not thread.is_alive()
    assert status == [0]
    top, per_queue, per_worker = documented_queuestats_keys()
    assert set(stats) == top
    assert {"queue": "emails", "status": "running", "jobs": 1}.items() <= stats["queues"][0].items()
    assert all(set(row) == per_queue for row in stats["queues"])
    (registered,) = stats["workers"]
    assert set(registered) == per_worker
    assert registered["concurrency"] == 2
    assert registered["queues"] == ["emails"]


@pytest.mark.django_db(transaction=True)
def test_schedules_json_has_the_keys_the_reference_lists() -> None:
    text = section("docs/reference/commands.md", "`schedules`")
    keys = re.search(
        r"`--json` prints a list with one object per schedule, with the keys (.*?)\.", text
    )
    assert keys
    documented = set(re.findall(r"`(\w+)`", re.sub(r"\(.*?\)", "", keys[1])))
    periodic = {
        "ping": {"task": "tests.testapp.tasks.noop", "every": 30},
        "nightly": {"task": "tests.testapp.tasks.noop", "cron": "0 3 * * *"},
    }
    with override_settings(PGQUEUE={**settings.PGQUEUE, "PERIODIC": periodic}):
        before = {row["name"]: row for row in json_of("schedules", "--json")}
        call_command("schedules", "--disable", "ping", stdout=io.StringIO())
        after = {row["name"]: row for row in json_of("schedules", "--json")}
    assert all(set(row) == documented for row in [*before.values(), *after.values()])
    assert [before["ping"]["seen"], after["ping"]["seen"], after["nightly"]["seen"]] == [
        False,
        True,
        False,
    ]
    assert after["ping"]["state"] == "disabled"
    assert after["ping"]["next_tick"] is None
    assert after["nightly"]["last_job_id"] is None
    assert after["nightly"]["ticks"] == 0
    assert dt.datetime.fromisoformat(after["nightly"]["next_tick"]).tzinfo is not None


@pytest.mark.django_db(transaction=True)
def test_the_direct_api_snippets_run_as_written() -> None:
    """docs/tasks.md's enqueue, unique key and bad-argument examples, and the
    observability page's signal receiver, with the test app's tasks."""
    from django_pgqueue.signals import job_finished

    with pytest.raises(TypeError) as bad:
        enqueue("tests.testapp.tasks.mark", [{"when": dt.date(2026, 1, 1)}])
    (pycon,) = [b for _, b in blocks("pycon")]
    assert f"{type(bad.value).__module__}.{type(bad.value).__name__}: {bad.value}" in pycon

    first = mark.using(delay=60, unique_key="receipt:7").enqueue("a")
    again = mark.using(unique_key="receipt:7").enqueue("a")
    assert (first.duplicate, again.duplicate, again.id) == (False, True, first.id)
    by_path = enqueue("tests.testapp.tasks.add", [1, 2], priority=20)
    assert Job.objects.get(pk=by_path.id).priority == 20

    seen: list[str] = []

    @receiver(job_finished, sender=add)
    def count_receipts(sender: Any, job: Any, outcome: Any, **kwargs: Any) -> None:
        seen.append(f"receipts.{outcome}")

    try:
        ran = run_jobs(queues=["default"])
    finally:
        job_finished.disconnect(count_receipts, sender=add)
    assert ran.done == [by_path.id]
    assert seen == ["receipts.succeeded"]


def quoted_argument_errors() -> list[tuple[str, list[str], str]]:
    """Each ``CommandError: COMMAND: ...`` line the docs quote for a bad argument, with
    the command line that makes it: (command, arguments, the line)."""
    quoted = set()
    for page in PAGES:
        quoted |= set(re.findall(r"CommandError: \w+: [^`\n]*", page.read_text()))
    cases = []
    for line in sorted(quoted):
        if bad := re.fullmatch(r"CommandError: (\w+): argument (--[\w-]+): .*, got '(.*)'", line):
            cases.append((bad[1], [bad[2], bad[3]], line))
        elif typo := re.fullmatch(r"CommandError: (\w+): unrecognized arguments: (\S+) .*", line):
            cases.append((typo[1], [typo[2]], line))
        else:  # pragma: no cover - a new kind of quote: teach this test to make it
            pytest.fail(f"no command line known for {line!r}")
    return cases


@pytest.mark.slow
def test_each_quoted_argument_error_is_what_the_command_prints(db_url: str) -> None:
    from tests.worker.conftest import django_command

    cases = quoted_argument_errors()
    assert len(cases) >= 3
    for command, args, line in cases:
        done = django_command(db_url, command, *args)
        assert (done.returncode, done.stdout, done.stderr) == (2, "", line + "\n"), args


OLD_SETTINGS = """
from tests.settings import *  # noqa: F403
INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks_db"]  # noqa: F405
OLD = "django_tasks_db.DatabaseBackend"  # the backend before the move
TASKS = {"default": {**TASKS["default"], "BACKEND": OLD}}  # noqa: F405
"""
NEW_SETTINGS = """
from tests.settings import *  # noqa: F403
INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks_db"]  # noqa: F405
"""


@pytest.mark.slow
def test_the_django_tasks_db_move_of_the_migrating_page_runs_as_written(
    db_url: str, tmp_path: Path
) -> None:
    """docs/migrating.md, step 4: a task deferred a month on django-tasks-db, moved
    with the page's snippet by a process whose alias now names PgQueueBackend."""
    pytest.importorskip("django_tasks_db")
    from tests.worker.conftest import django_command

    (tmp_path / "old_settings.py").write_text(OLD_SETTINGS)
    (tmp_path / "new_settings.py").write_text(NEW_SETTINGS)
    (snippet,) = [b for _, b in blocks("python") if "DBTaskResult" in b]
    old = {"DJANGO_SETTINGS_MODULE": "old_settings", "PYTHONPATH": f"{ROOT}:{tmp_path}"}
    new = {**old, "DJANGO_SETTINGS_MODULE": "new_settings"}
    done = django_command(db_url, "migrate", "django_tasks_database", "-v0", env=old)
    assert done.returncode == 0, done.stderr
    try:
        moved(db_url, snippet, old, new)
    finally:  # the test database keeps no table of an app its settings lack
        django_command(db_url, "migrate", "django_tasks_database", "zero", "-v0", env=old)


def moved(db_url: str, snippet: str, old: dict[str, str], new: dict[str, str]) -> None:
    from tests.worker.conftest import django_command

    deferred = (
        "from datetime import timedelta; from django.utils import timezone;"
        "from example_project.shop.tasks import send_confirmation as t;"
        "print(t.using(run_after=timezone.now() + timedelta(days=30)).enqueue(42).id)"
    )
    done = django_command(db_url, "shell", "-c", deferred, env=old)
    assert done.returncode == 0, done.stderr
    done = django_command(db_url, "shell", "-c", snippet, env=new)
    assert done.returncode == 0, done.stderr
    (job,) = Job.objects.all()
    assert (job.task, job.args, job.queue, job.status) == (
        "example_project.shop.tasks.send_confirmation",
        [42],
        "emails",
        "queued",
    )
    assert dt.timedelta(days=29) < job.run_at - dt.datetime.now(dt.UTC) <= dt.timedelta(days=30)
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM django_tasks_database_dbtaskresult")
        assert cursor.fetchone() == (0,)


@pytest.mark.slow
def test_a_worker_holds_the_connections_the_settings_page_says(db_url: str) -> None:
    """docs/reference/settings.md said a worker holds up to CONCURRENCY + 4
    connections; the sizing section of operations.md, and runworker's own check of a
    pool, count CONCURRENCY + 6. Measured: three job threads that used the database,
    and the worker's own."""
    import signal

    from tests.conftest import run_counts
    from tests.worker.conftest import WorkerProcess, wait_for

    text = settings_section("CONCURRENCY")
    (documented,) = re.findall(r"a worker can hold up to `CONCURRENCY \+ (\d+)` connections", text)
    assert f"plan on `concurrency + {documented}`" in " ".join(
        (ROOT / "docs/operations.md").read_text().split()
    )
    for i in range(3):
        mark.enqueue(f"docs-conn-{i}", sleep=1.0)  # each records a row after its sleep
    worker = WorkerProcess(db_url, "--concurrency", "3", "--prefetch", "0")
    mine = connections["default"]
    seen: list[int] = []

    def held() -> int:
        with mine.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            (count,) = cursor.fetchone()
        seen.append(count)
        return int(count)

    try:
        wait_for(lambda: sum(run_counts("docs-conn-").values()) == 3, 30, "three runs")
        wait_for(lambda: held() == 3 + int(documented), 10, "the documented connections")
    finally:
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    assert max(seen) == 3 + int(documented)


@pytest.mark.slow
def test_a_lease_under_the_documented_minimum_is_a_bad_option_value(db_url: str) -> None:
    """commands.md: `--lease S` is "at least 0.1", and a bad option value ends the
    command with one line and exit status 2 before anything runs. --lease 0.09 passed
    the parser (any number above 0) and stopped the worker later, exit 1, with a line
    in another shape (``lease=0.09: expected at least 0.1 seconds``)."""
    from tests.worker.conftest import django_command

    row = next(
        line
        for line in (ROOT / "docs/reference/commands.md").read_text().splitlines()
        if line.startswith("| `--lease S` |")
    )
    assert "at least 0.1" in row
    expected = (
        "runworker: argument --lease: expected a number of seconds, at least 0.1 "
        "(at most ten years), got '0.09'"
    )
    done = django_command(db_url, "runworker", "--burst", "--lease", "0.09")
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"CommandError: {expected}\n")
    with pytest.raises(CommandError) as refused:
        call_command("runworker", burst=True, lease=0.09)
    assert (refused.value.returncode, str(refused.value)) == (2, expected)
    ran = django_command(db_url, "runworker", "--burst", "--lease", "0.1", "-v", "0")
    assert (ran.returncode, ran.stderr) == (0, "")


def option_row(page: str, option: str) -> str:
    return next(
        line
        for line in (ROOT / page).read_text().splitlines()
        if line.startswith(f"| `{option}` |")
    )


def taken(make: Any, option: str, value: Any) -> bool:
    from django_pgqueue.backend.compat import InvalidTask

    try:
        make(**{option: value})
    except (ValueError, InvalidTask):  # InvalidJob is a ValueError
        return False
    return True


def test_the_enqueue_options_bounds_are_the_codes() -> None:
    """docs/tasks.md's and docs/backend.md's option tables give each bound the
    code enforces (they gave none for max_attempts, delay and backoff)."""
    from django_pgqueue.backend import options
    from example_project.shop.tasks import send_confirmation

    direct = {
        "max_attempts": (
            "1 to 1,000,000",
            [(1, True), (0, False), (10**6, True), (10**6 + 1, False)],
        ),
        "delay": (
            "0 to ten years",
            [(0, True), (-1, False), (TEN_YEARS, True), (TEN_YEARS + 1, False)],
        ),
        "backoff": ("0 to a year", [(0, True), (-1, False), (A_YEAR, True), (A_YEAR + 1, False)]),
    }
    for option, (words, probes) in direct.items():
        assert words in option_row("docs/tasks.md", option), option
        got = [(v, taken(mark.using, option, v)) for v, _ in probes]
        assert got == probes, option
    tasks = {
        "max_attempts": ("1 to 1,000,000", direct["max_attempts"][1]),
        "backoff": ("(0 to a year)", direct["backoff"][1]),
    }
    for option, (words, probes) in tasks.items():
        assert words in option_row("docs/backend.md", option), option
        got = [(v, taken(partial(options, send_confirmation), option, v)) for v, _ in probes]
        assert got == probes, option


def test_the_backend_option_checks_state_the_codes_bounds() -> None:
    page = (ROOT / "docs/reference/checks.md").read_text()
    rows = {
        "E104": ("is not a whole number from 1 to 1,000,000.", "MAX_ATTEMPTS", 10**6, 10**6 + 1),
        "E107": ("from 0 to a year (31,536,000).", "BACKOFF", A_YEAR, A_YEAR + 1),
    }
    for check, (words, key, inside, outside) in rows.items():
        row = next(line for line in page.splitlines() if f"`django_pgqueue.{check}`" in line)
        assert words in row, check
        found = []
        for value in (inside, outside):
            backend = {"BACKEND": "django_pgqueue.backend.PgQueueBackend", "QUEUES": []}
            with override_settings(TASKS={"default": {**backend, "OPTIONS": {key: value}}}):
                found.append(
                    [m.id for m in checks.run_checks() if m.id == f"django_pgqueue.{check}"]
                )
        assert found == [[], [f"django_pgqueue.{check}"]], check
