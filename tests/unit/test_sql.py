from __future__ import annotations

import re
from pathlib import Path

import django_pgqueue
from django_pgqueue.sql import QUERIES, query

EXPECTED = {
    "schedules_sync",
    "schedule_tick",
    "schedulers_up_since",
    "enqueue",
    "enqueue_many",
    "live_job_by_unique_key",
    "claim",
    "claim_queues",
    "complete",
    "fail",
    "heartbeat",
    "release",
    "reap",
    "expired_leases",
    "retry",
    "cancel",
    "pause_queue",
    "resume_queue",
    "paused_queues",
    "prune",
    "count_prunable",
    "stats",
    "reserve_ids",
    "copy_jobs",
    "notify_queues",
    "backend_pid",
    "lock_worker_id",
    "worker_register",
    "worker_leave",
    "workers_forget",
    "refresh_queue_gauges",
    "queue_gauges",
    "dead_since",
}


def test_every_named_query_is_loaded_once() -> None:
    assert set(QUERIES) == EXPECTED
    assert all(text and not text.endswith(";") for text in QUERIES.values())


def test_every_parameter_is_typed_so_server_side_binding_works() -> None:
    for name, text in QUERIES.items():
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
        untyped = re.findall(r"%\((\w+)\)s(?!::)", code)
        assert untyped == [], f"{name}: untyped parameters {untyped}"


def test_claim_is_one_statement_with_skip_locked_and_materialised_ids() -> None:
    # The claim of every queue has two branches (in order; by queue while one is
    # paused), each locking as it reads.
    for name, branches in (("claim", 2), ("claim_queues", 1)):
        claim = query(name)
        assert claim.count("FOR UPDATE OF j SKIP LOCKED") == branches, name
        assert "AS MATERIALIZED" in claim, name
        assert "-- include:" not in claim, name  # the shared parts are filled in
        assert claim.count("UPDATE pgqueue_job AS j") == 1, name


def test_the_two_claims_differ_only_in_how_they_pick_candidates() -> None:
    lease = query("claim").split("chosen AS MATERIALIZED")[1]
    assert query("claim_queues").split("chosen AS MATERIALIZED")[1] == lease
    assert "unnest(%(queues)s::text[])" in query("claim_queues")
    assert "%(queues)s" not in query("claim")


def test_comments_hold_no_placeholders() -> None:
    """A comment is part of the statement's text: psycopg would ask for its parameter."""
    for name, text in QUERIES.items():
        comments = [line for line in text.splitlines() if line.lstrip().startswith("--")]
        assert not [c for c in comments if "%(" in c], name


def test_a_claim_variant_binds_no_limit_and_no_queues() -> None:
    from django_pgqueue.sql import variant

    text = variant("claim_queues", limit=16, queues=("emails", "sms"))
    assert "%(limit)s" not in text
    assert "%(queues)s" not in text
    assert "LIMIT 16" in text
    assert "ARRAY['emails', 'sms']::text[]" in text
    assert set(re.findall(r"%\((\w+)\)s", text)) == {"worker", "lease", "token", "commit"}


#: Statements that change a session's state, which a transaction pooler would hand
#: to whoever gets the server connection next.
SESSION_SCOPED = re.compile(
    r"^\s*(SET|RESET|LISTEN|UNLISTEN|PREPARE|DISCARD|LOAD)\b|pg_(try_)?advisory_lock\(",
    re.IGNORECASE,
)


def test_nothing_session_scoped_runs_outside_the_session_connection() -> None:
    """Behind PgBouncer in transaction mode, every statement but the worker session's
    (worker/session.py: its id's lock and LISTEN) must leave the connection as it found it."""
    for name, text in QUERIES.items():
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
        found = SESSION_SCOPED.findall(code)
        assert not found or name == "lock_worker_id", f"{name}: session-scoped {found}"
        for call in re.findall(r"set_config\(([^;]*?)\)\s+AS", code, re.DOTALL):
            assert call.rstrip().endswith("true"), f"{name}: set_config not transaction-local"
    package = Path(django_pgqueue.__file__).parent
    listens = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if re.search(r"\"(LISTEN|SET) ", path.read_text(encoding="utf-8"))
    )
    assert listens == ["worker/session.py"]
