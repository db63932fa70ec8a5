"""Narrow exception classes for the mistakes a caller can make."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured


class PgQueueError(Exception):
    """Base class of every error django-pgqueue raises on purpose."""


class InvalidJob(PgQueueError, ValueError):
    """An enqueue was refused before anything was written (bad option or argument)."""


class InvalidJobArguments(InvalidJob, TypeError):
    """Job arguments that cannot be stored as JSON (the message names the bad value),
    or that do not fit the task's signature (the message shows it)."""


class UnreadablePolicy(PgQueueError, ValueError):
    """A job row's ``retry_policy`` that is no policy (written by hand); says why."""


class UnknownTask(PgQueueError, LookupError):
    """A job names a task path that is not a registered task."""


class JobTimeout(PgQueueError):
    """A job ran past the worker's job timeout (``--job-timeout``); it is recorded as failed."""


class WorkerIdInUse(PgQueueError):
    """Another live worker runs with this worker id (``--worker-id``): two would share fencing."""


class TooManySnoozes(PgQueueError):
    """A job snoozed more often than ``PGQUEUE["MAX_SNOOZES"]`` allows; it is buried."""


class LeaseExpired(PgQueueError):
    """A run's worker stopped renewing its lease (it died, hung or lost the database):
    the reaper took the job back. Named in the job's error history."""


class WorkerShutdown(PgQueueError):
    """A stopping worker gave the run back before it finished. Named in the job's
    error history."""


class OutcomeNotStored(PgQueueError):
    """The database refused a run's outcome (its result or error); the job is buried."""


class InvalidSchedule(PgQueueError, ImproperlyConfigured):
    """An entry of ``PGQUEUE["PERIODIC"]`` that cannot run (the message names it), or a
    schedule name that no schedule has."""


class SchedulesBusy(PgQueueError):
    """Another transaction held the schedule table (its lock, or a row: an UPDATE by
    hand not committed) past the wait allowed: nothing was written."""
