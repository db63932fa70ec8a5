"""A bound on how long a command run from the shell may take (``queuestats --check``).

A health check run by cron, a systemd timer or a probe must end: one that waits
for ever on a database that hangs (a lock it queues behind, a server that accepts
connections and never answers) piles up behind the next. The server ends a
statement that waits past ``statement_timeout``, but nothing on the server ends a
connection attempt or a read that gets no answer: :class:`Deadline` ends the
process then, with one line on stderr and exit status 1.
"""

from __future__ import annotations

import os
import sys
import threading


class Deadline:
    """Ends the process after ``seconds`` with ``CommandError: message`` on stderr and
    exit status 1, unless :meth:`done` is called first."""

    def __init__(self, seconds: float, message: str) -> None:
        self.message = message
        self._lock = threading.Lock()
        self._done = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.name = "pgqueue-deadline"
        self._timer.daemon = True

    def start(self) -> Deadline:
        self._timer.start()
        return self

    def done(self) -> None:
        """The command reached its end (its output or its own error) in time. Should
        the deadline be printing its line now, this waits for the process's end, so
        that one line only is printed."""
        with self._lock:
            self._done = True
            self._timer.cancel()

    def _expire(self) -> None:
        with self._lock:
            if self._done:
                return
            sys.stderr.write(f"CommandError: {self.message}\n")
            sys.stderr.flush()
            sys.stdout.flush()
            os._exit(1)
