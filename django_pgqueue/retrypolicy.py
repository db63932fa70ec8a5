"""Whether and when a job runs again after a run that did not succeed.

One :class:`RetryPolicy` decides, for the executor (a task raised) and the
reaper (a run's lease expired) alike. A task carries its own (``retry_on`` and
``discard_on``, given where the task is declared: the worker reads them from the
task, never from the row); the default retries every exception. The delays are
``backoff.retry_delay``: exponential from the job's ``backoff`` (or
``PGQUEUE["BACKOFF_BASE"]``), capped, with jitter.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from django_pgqueue import conf, validation
from django_pgqueue.backoff import retry_delay

Classes = tuple[type[BaseException], ...]


@dataclasses.dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``retry_on``: only these exceptions are retried (None: every exception);
    ``discard_on``: these bury the job at once, and win over ``retry_on``."""

    retry_on: Classes | None = None
    discard_on: Classes = ()

    @classmethod
    def build(cls, retry_on: Any = None, discard_on: Any = None) -> RetryPolicy:
        """A checked policy; :class:`~django_pgqueue.exceptions.InvalidJob` names a bad value."""
        return cls(
            None if retry_on is None else validation.EXCEPTIONS(retry_on, "retry_on"),
            () if discard_on is None else validation.EXCEPTIONS(discard_on, "discard_on"),
        )

    def retries(self, exc: BaseException) -> bool:
        """Whether a run that raised ``exc`` may be tried again (attempts allowing)."""
        if self.discard_on and isinstance(exc, self.discard_on):
            return False
        return self.retry_on is None or isinstance(exc, self.retry_on)

    def delay(self, attempt: int, backoff: float | None) -> float:
        """Seconds before the run after ``attempt`` (1 for the first one)."""
        settings = conf.get()
        base = settings.BACKOFF_BASE if backoff is None else backoff
        # A job's own backoff may exceed the global cap: its first delay is honoured.
        return retry_delay(attempt, base, max(settings.BACKOFF_MAX, base), settings.BACKOFF_JITTER)

    def after_failure(
        self, exc: BaseException, attempt: int, max_attempts: int, backoff: float | None
    ) -> float | None:
        """Seconds before the next run of a job whose run raised ``exc``; None buries it."""
        if attempt >= max_attempts or not self.retries(exc):
            return None
        return self.delay(attempt, backoff)

    def after_lease_expired(
        self, attempt: int, max_attempts: int, backoff: float | None
    ) -> float | None:
        """The same for a run whose worker stopped renewing its lease (it died, hung or
        lost the database): a failure under the job's backoff, so that a job that
        kills its worker is not taken up again at once. Not an exception of the
        task's, so ``retry_on`` and ``discard_on`` do not apply."""
        if attempt >= max_attempts:
            return None
        return self.delay(attempt, backoff)

    @staticmethod
    def may_snooze(snoozes: int) -> bool:
        """Whether a job snoozed ``snoozes`` times before may snooze once more."""
        return snoozes < conf.get().MAX_SNOOZES


DEFAULT = RetryPolicy()


def policy_of(target: Any) -> RetryPolicy:
    """The retry policy of a registered task object (the default if it has none)."""
    found = getattr(target, "retry_policy", None)
    return found if isinstance(found, RetryPolicy) else DEFAULT
