"""The worker's start-up warning about prepared statements behind a pooler: system
check W001's about psycopg's ``prepare_threshold``, and silenced with it (the
first statement's look handles ``PREPARE``). The pooler is faked here; tests/cluster
runs a real one."""

from __future__ import annotations

import pytest
from django.db import connections
from django.test import override_settings

from django_pgqueue.worker import session as session_module
from django_pgqueue.worker.session import WorkerSession, open_at_start

pytestmark = pytest.mark.django_db(transaction=True)


def start_warnings(db_url: str, caplog: pytest.LogCaptureFixture) -> list[str]:
    """The warnings of a worker start whose DATABASE is "pooled" (its session direct)."""
    session = WorkerSession("pooled-start", "default", db_url, None, 1.0)
    caplog.clear()
    with caplog.at_level("WARNING", logger="django_pgqueue"):
        try:
            assert open_at_start(session, "default") == (None, True)
        finally:
            session.close()
    return [r.getMessage() for r in caplog.records if "prepared statements" in r.getMessage()]


def test_the_start_warning_names_what_prepares_and_is_silenced_with_w001(
    db_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_module, "alias_through_pooler", lambda alias: True)
    database = connections["default"].settings_dict
    with override_settings(PGQUEUE={"PREPARE": False}):
        assert start_warnings(db_url, caplog) == []
        # psycopg's own preparing, which W001 warns about too (with server-side
        # binding Django's queries in task code fail behind PgBouncer 1.18).
        options = {**database.get("OPTIONS", {}), "prepare_threshold": 5}
        monkeypatch.setitem(database, "OPTIONS", options)
        (warning,) = start_warnings(db_url, caplog)
        assert "through a connection pooler while OPTIONS['prepare_threshold'] = 5" in warning
    with override_settings(PGQUEUE={"PREPARE": True}):
        # PREPARE's own warning comes from the first statement's look, which stops
        # preparing (tests/integration/test_pooler_look.py): not a second one here.
        (warning,) = start_warnings(db_url, caplog)
        assert "through a connection pooler while OPTIONS['prepare_threshold'] = 5" in warning
        assert "PREPARE" not in warning
        monkeypatch.setitem(database, "OPTIONS", {**options, "prepare_threshold": None})
        assert start_warnings(db_url, caplog) == []
        monkeypatch.setitem(database, "OPTIONS", options)
        # Silenced as the docs say to (a pool that keeps prepared statements).
        with override_settings(SILENCED_SYSTEM_CHECKS=["django_pgqueue.W001"]):
            assert start_warnings(db_url, caplog) == []


def test_the_polling_warning_is_silenced_with_w002(
    db_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behind a pooler without LISTEN_DATABASE the worker polls, and says so at
    every start, as W002 does; a project that silenced W002 (polling is what it
    wants) still got the warning each time."""
    monkeypatch.setattr(session_module, "through_pooler", lambda conn: True)

    def polling_said() -> list[tuple[str, str]]:
        session = WorkerSession("pooled-only", "default", None, "pgqueue_jobs", 1.0)
        caplog.clear()
        with caplog.at_level("INFO", logger="django_pgqueue"):
            assert open_at_start(session, "default") == (None, False)
        return [
            (r.levelname, r.getMessage()[:60]) for r in caplog.records if "polls" in r.getMessage()
        ]

    said = "database 'default' reaches PostgreSQL through a connection p"
    with override_settings(PGQUEUE={"PREPARE": False}):
        assert polling_said() == [("WARNING", said)]
        with override_settings(SILENCED_SYSTEM_CHECKS=["django_pgqueue.W002"]):
            assert polling_said() == [("INFO", said)]
