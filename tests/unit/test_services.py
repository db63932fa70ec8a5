"""The worker's timer thread runs a timer at once when hurried (a stop request's NOTIFY
makes the heartbeat run now), and keeps its schedule otherwise."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from django_pgqueue.worker.services import (
    ConnectionEpoch,
    RunAgainIn,
    Supervision,
    Timer,
    Timers,
)


class Calls:
    """When an action was called, to wait on from the test's thread."""

    def __init__(self) -> None:
        self.at: list[float] = []
        self._changed = threading.Condition()

    def record(self) -> None:
        with self._changed:
            self.at.append(time.monotonic())
            self._changed.notify_all()

    def wait_for(self, count: int, timeout: float = 10.0) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.at) >= count, timeout), self.at


def timers_of(timer: Timer) -> Timers:
    return Timers(
        "default",
        [timer],
        Supervision(fatal=lambda reason: None, epoch=ConnectionEpoch()),
        name="test-timers",
    )


def test_hurry_runs_the_timer_now_and_a_hurry_during_its_run_runs_it_again() -> None:
    runs = Calls()

    def action() -> None:
        runs.record()
        if len(runs.at) == 2:
            timers.hurry("beat")  # while it runs: it must run once more

    timers = timers_of(Timer("beat", 3600.0, action))
    timers.start()
    try:
        runs.wait_for(1)  # at start
        hurried = time.monotonic()
        timers.hurry("beat")
        runs.wait_for(3)
        assert runs.at[2] - hurried < 1.0  # not an hour later
        time.sleep(0.1)
        assert len(runs.at) == 3  # and then back on its hourly schedule
    finally:
        timers.stop()
        timers.join(5)
    assert not timers.is_alive()


def test_an_action_that_asks_to_run_again_sooner_runs_then_keeps_its_interval() -> None:
    """An hourly timer whose action returns RunAgainIn(0.05) (the heartbeat after a
    beat that skipped locked rows) runs again at once, and only until it stops asking."""
    runs = Calls()

    def action() -> RunAgainIn | None:
        runs.record()
        return RunAgainIn(0.05) if len(runs.at) < 3 else None

    timers = timers_of(Timer("beat", 3600.0, action))
    timers.start()
    try:
        runs.wait_for(3)
        assert runs.at[2] - runs.at[0] < 2.0  # not an hour apart
        time.sleep(0.3)
        assert len(runs.at) == 3  # then back on its hourly schedule
    finally:
        timers.stop()
        timers.join(5)


def listener_of(listen_database: str | None, on_abort: Callable[[], None] = lambda: None) -> Any:
    """A Listener of worker ``host:1:ab`` on database "default", not started."""
    from django_pgqueue.worker.listener import Listener
    from django_pgqueue.worker.session import WorkerSession

    session = WorkerSession("host:1:ab", "default", listen_database, "pgqueue_jobs", 1.0)
    return Listener(
        session,
        None,
        wake=lambda: None,
        on_listening=lambda: None,
        supervision=Supervision(fatal=lambda reason: None, epoch=ConnectionEpoch()),
        on_abort=on_abort,
    )


def test_the_listener_renews_at_once_only_for_a_stop_request_naming_its_worker() -> None:
    aborts: list[str] = []
    listener = listener_of(None, on_abort=lambda: aborts.append("now"))
    for payload in ('{"abort": "other:2:cd"}', "{not json", '["abort"]', '{"abort": "host:1:ab"}'):
        listener._control(payload)
    assert aborts == ["now"]


def test_a_listener_on_a_dsn_resets_the_worker_databases_connections_not_the_dsn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After an error a service thread drops its Django connections; a listener whose
    LISTEN_DATABASE is a DSN has none for it (a DSN is no Django alias, and the lookup
    wrote the DSN, password and all, to the debug log): it drops the worker's."""
    dsn = "postgres://u:s3cret@127.0.0.1:1/db"
    listener = listener_of(dsn)
    assert (listener.alias, listener.session.alias) == ("default", dsn)
    with caplog.at_level("DEBUG", logger="django_pgqueue"):
        listener._survive(psycopg.OperationalError("connection refused"))
    assert "s3cret" not in caplog.text


def test_a_timer_that_keeps_failing_stops_the_thread_counting_as_well() -> None:
    """``last_ok`` (what /healthz reads) stays where it was while a timer fails,
    although the steps between its retries, with nothing due, return normally; it
    moves again once the timer succeeds."""
    failing = threading.Event()
    failing.set()
    tries = Calls()

    def renew() -> None:
        tries.record()
        if failing.is_set():
            raise psycopg.OperationalError("connection refused")  # transient: retried

    # Every 5 s, so a failed run is retried a second later (not at each step).
    timers = timers_of(Timer("heartbeat", 5.0, renew))
    started = timers.last_ok
    timers.start()
    try:
        tries.wait_for(2)  # retried a second later; the steps in between return
        assert timers.last_ok == started
        failing.clear()
        tries.wait_for(len(tries.at) + 1)
        deadline = time.monotonic() + 5
        while timers.last_ok == started and time.monotonic() < deadline:
            time.sleep(0.01)
        assert timers.last_ok > started
    finally:
        timers.stop()
        timers.join(5)


def refused() -> None:
    """A real connection to a port nothing listens on: what a server that is down, or
    a PORT typo in DATABASES, gives each retry."""
    psycopg.connect("host=127.0.0.1 port=1 dbname=none connect_timeout=5").close()


def test_a_failure_a_timer_keeps_retrying_is_logged_once_then_with_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Retried every second, a down database gave the heartbeat and maintenance
    threads a warning a second each for as long as it lasted; the first is said at
    once, then the same failure at most every ``every`` seconds, counted."""
    from django_pgqueue.worker.repeats import RepeatedFailure

    failing = threading.Event()
    failing.set()
    tries = Calls()

    def renew() -> None:
        tries.record()
        if failing.is_set():
            refused()

    timers = timers_of(Timer("heartbeat", 5.0, renew))  # a failed run: again in 1 s
    timers.repeats = RepeatedFailure(every=600)  # 5 s in a worker: none due by itself here
    with caplog.at_level("WARNING", logger="django_pgqueue"):
        timers.start()
        try:
            tries.wait_for(3)  # about 0, 1 and 2 s: the first said, the others held back
            said = [r.getMessage() for r in caplog.records]
            assert len(said) == 1, said
            assert said[0].startswith("test-timers: connection failed: ")
            assert said[0].endswith("; retrying"), said[0]
            timers.repeats._said_at -= 600  # as if the interval had passed: the next is said
            deadline = time.monotonic() + 5
            while len(caplog.records) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            said = [r.getMessage() for r in caplog.records]
            counted = re.fullmatch(
                re.escape(said[0]) + r" \(failed (\d+) more times? since the last line\)", said[1]
            )
            assert counted, said[1]
            assert 1 <= int(counted[1]) <= len(tries.at) - 2  # the tries between the two lines
            failing.clear()
            tries.wait_for(5)  # well again, then down again: said at once
            failing.set()
            timers.hurry("heartbeat")
            tries.wait_for(6)
            deadline = time.monotonic() + 5
            while len(caplog.records) < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert [r.getMessage() for r in caplog.records][2:] == [said[0]]
        finally:
            timers.stop()
            timers.join(5)
