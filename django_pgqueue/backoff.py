"""Retry delay policy: exponential, capped, with jitter."""

from __future__ import annotations

import random


def retry_delay(
    attempt: int, base: float, cap: float, jitter: float, rand: random.Random | None = None
) -> float:
    """Seconds to wait before the run after ``attempt`` (1 for the first failure).

    ``base * 2 ** (attempt - 1)``, capped at ``cap``, then moved by up to
    ``jitter`` of itself either way so that jobs which failed together do not
    all come back together. Never more than ``cap``, never negative.
    """
    # 2.0 ** 1024 overflows a float, and MAX_ATTEMPTS is a million: past 2 ** 64
    # every base a job may have is past every cap anyway.
    delay = min(cap, base * 2.0 ** min(max(attempt - 1, 0), 64))
    spread = (rand or random).uniform(-jitter, jitter)
    return max(0.0, min(cap, delay * (1.0 + spread)))
