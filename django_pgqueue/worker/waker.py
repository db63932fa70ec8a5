"""A wake-up flag that signal handlers and other threads can set: a pipe, not a lock.

``threading.Event.set()`` takes a lock; a signal handler runs between two
bytecodes of the main thread, possibly while that thread holds the very same
lock inside ``Event.wait()`` or ``clear()``, and would wait for it for ever.
Writing a byte to a non-blocking pipe takes no lock, and ``select`` wakes the
main loop as soon as it is written (``signal.set_wakeup_fd`` can write it too).
"""

from __future__ import annotations

import contextlib
import os
import select


class Waker:
    """Set by any thread or signal handler; waited on by the claim loop."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    @property
    def fileno(self) -> int:
        """For ``select``: readable while set."""
        return self._read

    @property
    def write_fd(self) -> int:
        """For ``signal.set_wakeup_fd``."""
        return self._write

    def set(self) -> None:
        with contextlib.suppress(BlockingIOError):  # a full pipe is set already
            os.write(self._write, b"\x00")

    def clear(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._read, 4096):
                pass

    def wait(self, timeout: float) -> bool:
        """Sleep until set or ``timeout`` seconds pass; True if set. Does not clear."""
        ready, _, _ = select.select([self._read], [], [], max(0.0, timeout))
        return bool(ready)

    def close(self) -> None:
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)
