from __future__ import annotations

import re
from pathlib import Path

from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

import django_pgqueue
from django_pgqueue.sql import PARTS, QUERIES, _compact, query, variant

EXPECTED = {
    "schedules_lock",
    "schedules_lock_wait",
    "schedules_sync",
    "schedule_tick",
    "schedulers_up_since",
    "enqueue",
    "enqueue_keyless",
    "enqueue_many",
    "live_job_by_unique_key",
    "claim",
    "claim_queues",
    "complete",
    "fail",
    "heartbeat",
    "release",
    "reap",
    "expire_orphans",
    "expired_leases",
    "retry",
    "lock_for_retry",
    "cancel",
    "pause_queue",
    "resume_queue",
    "paused_queues",
    "queue_paused",
    "prune",
    "count_prunable",
    "stats",
    "reserve_ids",
    "copy_jobs",
    "notify_queues",
    "backend_pid",
    "lock_worker_id",
    "keep_session",
    "worker_register",
    "database_now",
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


def test_statements_are_sent_without_their_comments() -> None:
    """The comments are for readers of queries.sql; sent, they made the claim too
    long for psycopg's cache of parsed placeholders (4 KiB), a cost on every call."""
    for name, text in QUERIES.items():
        assert "--" not in text, name  # no string literal in queries.sql holds one
        assert all(line.strip() for line in text.splitlines()), name
    hot = [
        variant("claim", limit=1024),
        variant("claim_queues", limit=1024, queues=("default", "emails", "reports")),
        *(
            query(name)
            for name in ("enqueue", "enqueue_keyless", "complete", "fail", "heartbeat", "release")
        ),
    ]
    for text in hot:
        assert len(text.encode()) <= MAX_CACHED_STATEMENT_LENGTH, text[:60]


def test_a_keyless_enqueue_is_the_enqueue_without_its_on_conflict() -> None:
    """One text, two statements: they differ only in the clause a job without a
    unique_key cannot need."""
    with_key, keyless = query("enqueue"), query("enqueue_keyless")
    clause = re.search(r"\n\s*ON CONFLICT .*?DO NOTHING", with_key, re.DOTALL)
    assert clause is not None
    assert "ON CONFLICT" not in keyless
    assert with_key.replace(clause[0], "") == keyless


def test_compacting_keeps_string_literals_whole() -> None:
    text = "SELECT 'a -- b', 'it''s -- x' -- a comment\n\n  -- a line of comment\nFROM t -- end"
    assert _compact(text) == "SELECT 'a -- b', 'it''s -- x'\nFROM t"


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


#: The statements only the worker's session connection runs (worker/session.py).
SESSION_ONLY = {"lock_worker_id", "keep_session"}


def test_nothing_session_scoped_runs_outside_the_session_connection() -> None:
    """Behind PgBouncer in transaction mode, every statement but the worker session's
    (worker/session.py: its id's lock and LISTEN) must leave the connection as it found it."""
    for name, text in QUERIES.items():
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
        found = SESSION_SCOPED.findall(code)
        assert not found or name in SESSION_ONLY, f"{name}: session-scoped {found}"
        for call in re.findall(r"set_config\(([^;]*?)\)\s+AS", code, re.DOTALL):
            assert call.rstrip().endswith("true"), f"{name}: set_config not transaction-local"
    package = Path(django_pgqueue.__file__).parent
    listens = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if re.search(r"\"(LISTEN|SET) ", path.read_text(encoding="utf-8"))
    )
    assert listens == ["worker/session.py"]


def test_each_rule_on_times_written_by_hand_has_one_home() -> None:
    """A time no worker writes (infinity) is judged by one shared part per column,
    in every statement that reads it."""
    for part, users in {
        "_alive_until_written": ("schedulers_up_since", "workers_forget"),
        "_dead_within": ("stats", "dead_since"),
        "_done_unwritten": ("prune", "count_prunable"),
    }.items():
        for name in users:
            assert PARTS[part] in query(name), (part, name)
    for name, text in QUERIES.items():
        if name not in ("schedulers_up_since", "workers_forget"):
            assert "alive_until <=" not in text, name
        if name not in ("stats", "dead_since"):
            assert "done_at <= now()" not in text, name
