"""Which of a thread's retried failures are logged.

A worker's threads retry what a database outage causes, and said each retry on a
line of its own. The heartbeat and maintenance threads retry a failing action
every second, so a server that is down (or a ``PORT`` typo in ``DATABASES``) gave
three warnings a second for as long as it lasted, the cause lost in the flood.
The first failure is said at once; the same failure again, at most once every
:data:`EVERY` seconds, with how many retries failed in between.
"""

from __future__ import annotations

import time

#: Seconds between two lines of a thread for the same failure.
EVERY = 5.0


class RepeatedFailure:
    """One thread's record of the failure it last said (not shared between threads)."""

    def __init__(self, every: float = EVERY) -> None:
        self.every = every
        self._line: str | None = None
        self._said_at = 0.0
        self._held = 0

    def held_back(self, line: str) -> int | None:
        """None to leave this failure unsaid; else how many were left unsaid since
        the last line (0 for a first or a different failure)."""
        now = time.monotonic()
        if line == self._line and now - self._said_at < self.every:
            self._held += 1
            return None
        held, self._held = self._held, 0
        self._line, self._said_at = line, now
        return held

    def clear(self) -> None:
        """The thread is well again: its next failure is said at once."""
        self._line, self._held = None, 0
