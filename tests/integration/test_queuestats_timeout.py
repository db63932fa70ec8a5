"""``queuestats`` and ``queuestats --json`` against a database that hangs: bounded by
``--timeout`` (10 s by default) as ``--check`` is. They waited for ever behind a lock
or on a server that never answers, and the monitoring script that ran them every
minute piled up behind itself."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from tests.integration.test_contract_ops_53b import (  # noqa: F401  (fixtures)
    locked,
    no_answer,
    run_stats,
    silent_server,
)

pytestmark = pytest.mark.django_db(transaction=True)

MODES = [pytest.param([], id="table"), pytest.param(["--json"], id="json")]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("table", ["pgqueue_job", "pgqueue_queue", "pgqueue_worker"])
def test_stats_fail_within_their_timeout_behind_a_lock(
    db_url: str,
    locked: Callable[[str], None],  # noqa: F811
    table: str,
    mode: list[str],
) -> None:
    locked(table)
    done, took = run_stats(db_url, *mode, "--timeout", "2", bound=30)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"CommandError: {no_answer('2')}\n"
    assert took < 10  # Python and Django's start, then 2 s


@pytest.mark.parametrize("mode", MODES)
def test_stats_default_to_a_ten_second_timeout(
    db_url: str,
    locked: Callable[[str], None],  # noqa: F811
    mode: list[str],
) -> None:
    locked("pgqueue_job")
    done, took = run_stats(db_url, *mode, bound=40)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"CommandError: {no_answer('10')}\n"
    assert 10 <= took < 20


@pytest.mark.parametrize("mode", MODES)
def test_stats_fail_within_their_timeout_on_a_server_that_never_answers(
    silent_server: str,  # noqa: F811
    mode: list[str],
) -> None:
    done, took = run_stats(silent_server, *mode, "--timeout", "2", bound=30)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"CommandError: {no_answer('2')}\n"
    assert took < 10


def test_stats_with_a_timeout_print_as_before(db_url: str) -> None:
    done, _ = run_stats(db_url, "--json", "--timeout", "5", bound=30)
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout)["paused_queues"] == []
    done, _ = run_stats(db_url, "--timeout", "5", bound=30)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.endswith("no workers registered\n")


def test_call_command_stats_behind_a_lock_raise_within_their_timeout(
    locked: Callable[[str], None],  # noqa: F811
) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        (before,) = cursor.fetchone()
    locked("pgqueue_worker")
    for options in ({}, {"json": True}):
        started = time.monotonic()
        with pytest.raises(CommandError) as unanswered:
            call_command("queuestats", timeout=1, stdout=io.StringIO(), **options)
        assert time.monotonic() - started < 5
        assert (unanswered.value.returncode, str(unanswered.value)) == (1, no_answer("1"))
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone() == (before,)
