"""``/metrics`` and ``/healthz`` from a worker process (``runworker --metrics-port``).

One small threaded HTTP server on ``METRICS_ADDR:METRICS_PORT``. ``/metrics`` is
the worker's metrics (``metrics.py``), the queue gauges (refreshed on the
worker's maintenance thread, one worker at a time computing them) and whatever
else ``registry`` holds (with the default registry: the process's own metrics
and any a task defines). ``/healthz`` answers 200 while the claim loop and the
heartbeat thread go round, 503 when either is stuck. Imported only with a port.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from django.db import connections
from prometheus_client import CollectorRegistry, make_wsgi_app

from django_pgqueue import conf
from django_pgqueue.dberrors import first_line
from django_pgqueue.monitoring.gauges import QueueGauges
from django_pgqueue.monitoring.metrics import WorkerMetrics
from django_pgqueue.monitoring.models import QueueGauge
from django_pgqueue.queue import pauses
from django_pgqueue.worker.config import WorkerConfig
from django_pgqueue.worker.events import Events
from django_pgqueue.worker.presence import gone_after
from django_pgqueue.worker.services import Timer, Timers

logger = logging.getLogger("django_pgqueue")

#: Seconds a scrape waits for its read of the pause table before it serves the last.
PAUSES_WAIT = 1.0
#: Seconds a connection has to send its request (to the end of its headers), and
#: may wait between two writes of the response, before the server closes it: each
#: connection holds a thread, and the connections a client opened and forgot, or
#: sends a byte at a time, must not hold theirs for ever.
IDLE_TIMEOUT = 10.0

Environ = dict[str, Any]
StartResponse = Callable[..., Any]


class Observed(Protocol):
    """What the exporter reads of a worker (``worker.runner.Worker`` has it)."""

    config: WorkerConfig
    events: Events
    maintenance: Timers
    heartbeat: Timers
    loop_at: float
    stopping: bool


def claim_loop_limit(config: WorkerConfig) -> float:
    """Seconds without a round of the claim loop after which it counts as stuck: it
    goes round at least every poll interval, and retries a failed claim within 5 s."""
    return 2 * max(config.poll_interval, 5.0) + 5.0


def health(worker: Observed) -> tuple[bool, dict[str, Any]]:
    """Whether the worker's claim loop and heartbeat thread are alive, and the detail."""
    now = time.monotonic()
    loop_age = now - worker.loop_at
    loop_limit = claim_loop_limit(worker.config)
    beat_age = now - worker.heartbeat.last_ok
    beat_limit = gone_after(worker.config)
    loop_ok = worker.stopping or loop_age <= loop_limit
    # The server starts before the worker's threads: a heartbeat thread not started
    # yet is not stuck (its age still counts), one that has ended is.
    started = worker.heartbeat.ident is not None
    beat_ok = (worker.heartbeat.is_alive() or not started) and beat_age <= beat_limit
    detail = {
        "status": "ok" if loop_ok and beat_ok else "stuck",
        "stopping": worker.stopping,
        "claim_loop": {"ok": loop_ok, "age": round(loop_age, 3), "limit": loop_limit},
        "heartbeat": {
            "ok": beat_ok,
            "alive": worker.heartbeat.is_alive(),
            "age": round(beat_age, 3),
            "limit": beat_limit,
        },
    }
    return loop_ok and beat_ok, detail


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class _PacedWriter(io.BufferedIOBase):
    """Writes all it is given, each ``send()`` waiting at most ``idle`` seconds:
    ``sendall()``'s timeout bounds the whole write, which cut a big page to a slow
    but steady reader (a scrape) once it took longer than IDLE_TIMEOUT."""

    def __init__(self, sock: socket.socket, idle: float) -> None:
        self._sock = sock
        self._idle = idle

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self._sock.settimeout(self._idle)  # the request's reader may have left less
        with memoryview(b) as view, view.cast("B") as data:
            sent = 0
            while sent < len(data):
                sent += self._sock.send(data[sent:])
            return sent

    def fileno(self) -> int:
        return self._sock.fileno()


class _RequestReader(io.RawIOBase):
    """Reads the socket until ``deadline`` (a ``time.monotonic()``; None: each wait
    bounded by ``idle`` alone). A bound on each read alone let a client that sends a
    byte every 9 s hold a server thread for ever (slowloris)."""

    def __init__(self, sock: socket.socket, idle: float) -> None:
        self._sock = sock
        self._idle = idle
        self.deadline: float | None = time.monotonic() + idle

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        wait = self._idle
        if self.deadline is not None:
            wait = min(wait, self.deadline - time.monotonic())
            if wait <= 0:
                raise TimeoutError("the request was not sent within IDLE_TIMEOUT")
        self._sock.settimeout(wait)
        return self._sock.recv_into(buffer)

    def fileno(self) -> int:
        return self._sock.fileno()


class _QuietHandler(WSGIRequestHandler):
    def setup(self) -> None:
        super().setup()
        idle = IDLE_TIMEOUT  # read here, so that a test can shorten it
        self.connection.settimeout(idle)
        self.rfile.close()  # the socket's own file: it would keep the socket open
        self._reader = _RequestReader(self.connection, idle)
        self.rfile = io.BufferedReader(self._reader)
        self.wfile = _PacedWriter(self.connection, idle)

    def parse_request(self) -> bool:
        """The request line and headers are read: the deadline ends here (a body, which
        no page of ours reads, and the response are bounded per wait)."""
        parsed = super().parse_request()
        self._reader.deadline = None
        return parsed

    def handle(self) -> None:
        # A client that went quiet or away is no error of ours: the connection is
        # closed without the traceback socketserver would print.
        with contextlib.suppress(TimeoutError, ConnectionError):
            super().handle()

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes every few seconds are not worth a log line each."""


class Exporter:
    """The metrics of one worker, served over HTTP until :meth:`close`."""

    def __init__(
        self, worker: Observed, registry: CollectorRegistry, *, refresh_interval: float
    ) -> None:
        self.worker = worker
        self.registry = registry
        self.metrics = WorkerMetrics(registry, worker.config.concurrency)
        self.metrics.subscribe(worker.events)
        self.gauges = QueueGauges()
        registry.register(self.gauges)
        self.refresh_interval = refresh_interval
        # On the maintenance thread: its guard retries a database outage.
        worker.maintenance.timers.append(
            Timer("queue gauges", refresh_interval, self.refresh_gauges)
        )
        self._metrics_app = make_wsgi_app(registry)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._pauses_lock = threading.Lock()
        self._pauses_reader: threading.Thread | None = None

    def refresh_gauges(self) -> None:
        # Half the interval: with many workers the gauges are recomputed about
        # once per interval, by whichever gets there first.
        alias = self.worker.config.database
        rows = QueueGauge.objects.refresh(self.refresh_interval / 2, using=alias)
        self.gauges.update(rows, pauses.paused(alias))

    def _read_pauses(self) -> None:
        """The pause table is read at each scrape, as the web view does: a queue
        paused a moment ago reads paused, not after the next refresh. The read has
        a thread of its own, waited for at most ``PAUSES_WAIT``: a database that
        hangs (a lock, a network black hole) leaves the last read served rather than
        the scrape unanswered, and a scrape that comes while a read still hangs
        waits for that one instead of starting another."""
        with self._pauses_lock:
            reader = self._pauses_reader
            if reader is None or not reader.is_alive():
                reader = threading.Thread(
                    target=self._pauses_read, name="pgqueue-metrics-pauses", daemon=True
                )
                self._pauses_reader = reader
                reader.start()
        reader.join(PAUSES_WAIT)

    def _pauses_read(self) -> None:
        """A failed read leaves the last one (the refresh's age tells the database is
        away). The thread's connection is its own: closed here."""
        alias = self.worker.config.database
        try:
            self.gauges.update_paused(pauses.paused(alias))
        except Exception as exc:
            logger.debug("could not read the paused queues: %s", first_line(exc))
        finally:
            connections[alias].close()

    def app(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            ok, detail = health(self.worker)
            body = json.dumps(detail).encode()
            status = "200 OK" if ok else "503 Service Unavailable"
            start_response(status, [("Content-Type", "application/json")])
            return [body]
        if path == "/metrics":
            self._read_pauses()
            result: Iterable[bytes] = self._metrics_app(environ, start_response)
            return result
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: try /metrics or /healthz\n"]

    def serve(self, addr: str, port: int) -> tuple[str, int]:
        """Start serving in a daemon thread; the address and port bound (port 0 picks one)."""
        server_class = _Server6 if ":" in addr else _Server  # "::", "::1": IPv6
        server = make_server(addr, port, self.app, server_class, _QuietHandler)
        self._server = server
        self._thread = threading.Thread(
            # shutdown() waits out a poll: 0.5 s by default, past an idle worker's
            # 0.2 s to exit on SIGTERM.
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="pgqueue-metrics",
            daemon=True,
        )
        self._thread.start()
        address, bound = server.server_address[:2]
        host = str(address)
        shown = f"[{host}]" if ":" in host else host  # IPv6 in a URL
        logger.info("serving metrics on http://%s:%d/metrics (and /healthz)", shown, bound)
        return host, int(bound)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self.metrics.close()
        self.registry.unregister(self.gauges)


def serve(worker: Observed, addr: str, port: int, registry: CollectorRegistry) -> Exporter:
    """Attach metrics to ``worker`` (before it runs) and serve them on ``addr:port``."""
    exporter = Exporter(worker, registry, refresh_interval=conf.get().METRICS_REFRESH_INTERVAL)
    try:
        exporter.serve(addr, port)
    except BaseException:
        exporter.close()
        raise
    return exporter
