"""A real Worker run in a thread of the test process, observed through its events.

The worker talks to the test database over its own connections, exactly as in
``runworker``; the test waits on the events it emits (claimed, started,
finished, recorded, heartbeat, listening, idle, ...) instead of sleeping.
Subprocess tests remain for what needs a process: signals and crashes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections

from django_pgqueue.worker.config import WorkerConfig
from django_pgqueue.worker.events import NAMES, Events
from django_pgqueue.worker.runner import Worker


class Recorder:
    """Every event a worker emitted, with a way to wait for one."""

    def __init__(self, events: Events) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self._changed = threading.Condition()
        for name in NAMES:
            events.subscribe(name, self._taker(name))

    def _taker(self, name: str) -> Callable[..., None]:
        def take(**data: Any) -> None:
            with self._changed:
                self.seen.append((name, data))
                self._changed.notify_all()

        return take

    def count(self, name: str, where: Callable[[dict[str, Any]], bool] = lambda d: True) -> int:
        with self._changed:
            return sum(1 for seen, data in self.seen if seen == name and where(data))

    def wait_total(self, name: str, key: str, total: int, timeout: float = 10.0) -> float:
        """Wait until the ``key`` values of the ``name`` events add up to ``total``
        (outcomes recorded in however many batches); the seconds."""
        start = time.monotonic()
        with self._changed:
            while sum(data[key] for seen, data in self.seen if seen == name) < total:
                left = timeout - (time.monotonic() - start)
                if left <= 0:
                    raise AssertionError(
                        f"timed out after {timeout}s waiting for {name!r} events' {key} "
                        f"to reach {total}"
                    )
                self._changed.wait(left)
        return time.monotonic() - start

    def wait(
        self,
        name: str,
        count: int = 1,
        timeout: float = 10.0,
        where: Callable[[dict[str, Any]], bool] = lambda d: True,
    ) -> float:
        """Wait until ``name`` was emitted ``count`` times (matching ``where``); the seconds."""
        start = time.monotonic()
        with self._changed:
            while sum(1 for seen, data in self.seen if seen == name and where(data)) < count:
                left = timeout - (time.monotonic() - start)
                if left <= 0:
                    names = [seen for seen, _ in self.seen]
                    raise AssertionError(
                        f"timed out after {timeout}s waiting for {count} "
                        f"{name!r} events; seen: {names[-30:]}"
                    )
                self._changed.wait(left)
        return time.monotonic() - start


class WorkerThread:
    """``Worker(config)`` running in a thread; ``stop()`` returns its exit status."""

    def __init__(self, **overrides: Any) -> None:
        overrides.setdefault("worker_id", "inproc")
        self.events = Events()
        self.recorder = Recorder(self.events)
        self.worker = Worker(WorkerConfig.from_settings(**overrides), self.events)
        self.status: int | None = None
        self._thread = threading.Thread(target=self._run, name="test-worker", daemon=True)

    def _run(self) -> None:
        try:
            self.status = self.worker.run()
        finally:
            connections.close_all()

    def start(self) -> WorkerThread:
        self._thread.start()
        return self

    def wait(
        self,
        name: str,
        count: int = 1,
        timeout: float = 10.0,
        where: Callable[[dict[str, Any]], bool] = lambda d: True,
    ) -> float:
        return self.recorder.wait(name, count, timeout, where)

    def join(self, timeout: float) -> int:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the worker did not stop within {timeout}s"
        assert self.status is not None
        return self.status

    def stop(self, timeout: float = 15.0) -> int:
        self.worker.request_stop()
        return self.join(timeout)


@contextmanager
def worker_thread(**overrides: Any) -> Iterator[WorkerThread]:
    """A started in-process worker, stopped (and checked to have stopped) at the end."""
    running = WorkerThread(**overrides).start()
    try:
        yield running
    finally:
        if running._thread.is_alive():
            running.stop()
