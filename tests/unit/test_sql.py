from __future__ import annotations

import re

from django_pgqueue.sql import QUERIES, query

EXPECTED = {
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
    "retry",
    "cancel",
    "prune",
    "count_prunable",
    "stats",
    "reserve_ids",
    "copy_jobs",
    "notify_queues",
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
    for name in ("claim", "claim_queues"):
        claim = query(name)
        assert claim.count("FOR UPDATE OF j SKIP LOCKED") == 1, name
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
