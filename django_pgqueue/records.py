"""The values the queue passes around: job states, a job to enqueue, a claimed job, outcomes.

Plain data with no database access. The job states live here and nowhere else:
the model, the queue, the worker, the commands and the admin import them.
``JobSpec.build`` is where every enqueue option is validated before anything is written.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from collections.abc import Sequence
from typing import Any

from django.db import models
from django.utils import timezone

from django_pgqueue import conf, custom_names, known, registry, signatures, validation
from django_pgqueue.exceptions import InvalidJob, InvalidJobArguments
from django_pgqueue.jsonargs import dumps
from django_pgqueue.retrypolicy import policy_of


class JobStatus(models.TextChoices):
    """A job's state; docs/concepts.md draws the machine and who moves a job out of each."""

    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    DEAD = "dead", "Dead"
    CANCELLED = "cancelled", "Cancelled"


#: States a job never leaves by itself (prune deletes them; retry revives dead and
#: cancelled ones).
FINISHED: tuple[str, ...] = (
    JobStatus.DONE.value,
    JobStatus.DEAD.value,
    JobStatus.CANCELLED.value,
)
#: States that hold a unique_key: a second enqueue of the key is a duplicate.
LIVE: tuple[str, ...] = (JobStatus.QUEUED.value, JobStatus.RUNNING.value)


@dataclasses.dataclass(frozen=True, slots=True)
class JobSpec:
    """One job to enqueue, validated; ``args`` and ``kwargs`` are JSON text."""

    task: str
    args: str
    kwargs: str
    queue: str
    priority: int
    max_attempts: int
    run_at: dt.datetime | None
    unique_key: str | None
    concurrency_key: str | None
    backoff: float | None
    #: The job's retry policy as the row keeps it (``RetryPolicy.to_json()``).
    retry_policy: str | None = None

    @classmethod
    def build(
        cls,
        task: Any,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> JobSpec:
        """Validate one job. ``task`` is a dotted path or a registered task, whose own
        options (``@task(queue=..., max_attempts=...)``) and retry policy are the
        defaults; so are those of a task a path names, when it is known here."""
        if options:  # their values are checked as they are used
            validation.check_options(options, values=False)
        defaults = getattr(task, "options", None)
        if isinstance(task, str):
            runnable = registry.loaded(task, importing=True)
            if runnable is None:  # looked for as a worker looks; refused if it would not find it
                runnable = known.find_or_refuse(task)
            found: Any = getattr(runnable, "target", runnable)
            if getattr(found, "path", None) == task and hasattr(found, "options"):
                task, defaults = found, found.options  # as it would be enqueued as itself
            else:
                defaults = known.framework_defaults(found)
        return cls._build(task, args, kwargs, **({**defaults, **options} if defaults else options))

    @classmethod
    def _build(
        cls,
        task: Any,
        args: Sequence[Any],
        kwargs: dict[str, Any] | None,
        *,
        queue: str | None = None,
        priority: int = 0,
        run_at: dt.datetime | None = None,
        delay: float | dt.timedelta | None = None,
        max_attempts: int | None = None,
        unique_key: str | None = None,
        concurrency_key: str | None = None,
        backoff: float | dt.timedelta | None = None,
        retry_on: Any = None,
        discard_on: Any = None,
    ) -> JobSpec:
        settings = conf.get()
        path = validation.TASK_PATH(task if isinstance(task, str) else getattr(task, "path", task))
        custom_names.check_findable(path, task)  # where a worker would look for it
        queue = settings.DEFAULT_QUEUE if queue is None else validation.QUEUE(queue)
        priority = validation.PRIORITY(priority)
        max_attempts = (
            settings.MAX_ATTEMPTS if max_attempts is None else validation.ATTEMPTS(max_attempts)
        )
        if run_at is not None and delay is not None:
            raise InvalidJob("give run_at or delay, not both")
        if delay is not None:
            run_at = timezone.now() + dt.timedelta(seconds=validation.DELAY(delay))
        elif run_at is not None:
            run_at = validation.RUN_AT(run_at)
        if unique_key is not None:
            validation.KEY(unique_key, "unique_key")
        if concurrency_key is not None:
            validation.KEY(concurrency_key, "concurrency_key")
        seconds = None if backoff is None else validation.BACKOFF(backoff)
        policy = policy_of(task)
        if retry_on is not None or discard_on is not None:
            policy = policy.replace(retry_on, discard_on)
        if isinstance(args, str | bytes | dict) or not isinstance(args, Sequence):
            raise InvalidJob(f"args must be a list or tuple, not {type(args).__name__}")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise InvalidJob(f"kwargs must be a dict, not {type(kwargs).__name__}")
        args_json, kwargs_json = dumps(list(args), "args"), dumps(kwargs or {}, "kwargs")
        # The call must fit the function, as the worker will check again: refused
        # here, the mistake is reported to the caller instead of burying the job.
        target = task if getattr(task, "func", None) is not None else registry.loaded(path)
        if target is not None:
            try:
                signatures.check_arguments(getattr(target, "target", target), args, kwargs or {})
            except TypeError as exc:
                raise InvalidJobArguments(str(exc)) from None
        return cls(
            path,
            args_json,
            kwargs_json,
            queue,
            priority,
            max_attempts,
            run_at,
            unique_key,
            concurrency_key,
            seconds,
            policy.to_json(),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A job this worker holds the lease on: what the runner needs, nothing more.

    ``run`` is the claim's token (the row's ``lease_token``), never reused, so it
    tells this run from any other: outcomes and lease renewals are fenced on it.
    ``attempt`` counts against ``max_attempts``. ``problem`` is set when the row
    could not be decoded: the job is buried with it, without running anything.
    """

    id: int
    run: int
    task: str
    args: Any
    kwargs: Any
    queue: str
    priority: int
    attempt: int
    max_attempts: int
    concurrency_key: str | None
    unique_key: str | None
    backoff: float | None = None
    problem: str | None = None
    #: Times the job was snoozed (``raise Snooze(...)``) so far.
    snoozes: int = 0
    #: What a Tasks-framework result reports, as the claim returned it: epoch
    #: seconds, and the error history and worker ids as JSON text (decoded only
    #: by the Tasks backend, which needs them).
    enqueued_at: float = 0.0
    run_at: float = 0.0
    started_at: float = 0.0
    attempted_at: float = 0.0
    errors: str | None = None
    worker_ids: str = "[]"
    #: The job's retry policy (``RetryPolicy.from_json`` reads it).
    retry_policy: str | None = None

    @property
    def key(self) -> tuple[int, int]:
        """(job id, run): one run of one job."""
        return (self.id, self.run)


#: ClaimedJob's fields in order, each with the setter of its slot.
_CLAIMED_SLOTS: tuple[tuple[str, Any], ...] = tuple(
    (field.name, getattr(ClaimedJob, field.name).__set__)
    for field in dataclasses.fields(ClaimedJob)
)


def claimed_job(fields: dict[str, Any]) -> ClaimedJob:
    """``ClaimedJob(**fields)`` for a dict that holds exactly its fields, as a claim
    returns them; TypeError names the difference when it does not.

    The worker builds one per claimed job, on its claim loop, holding the GIL
    that the job threads wait for. The dataclass's own ``__init__`` matches 21
    keyword arguments and sets each frozen field through ``object.__setattr__``;
    setting the slots directly, which is what that ends in, makes the same object
    in about half the time.
    """
    if len(fields) == len(_CLAIMED_SLOTS):
        job: ClaimedJob = object.__new__(ClaimedJob)
        try:
            for name, put in _CLAIMED_SLOTS:
                put(job, fields[name])
        except KeyError:
            pass  # a field it lacks, for one it has too many
        else:
            return job
    expected = {name for name, _ in _CLAIMED_SLOTS}
    raise TypeError(
        "a claimed row does not match ClaimedJob: "
        f"unexpected {sorted(fields.keys() - expected)}, missing {sorted(expected - fields.keys())}"
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Success:
    job_id: int
    run: int
    result: str  # JSON text


@dataclasses.dataclass(frozen=True, slots=True)
class Failure:
    """A run that did not succeed: it failed, or ended its job ``cancelled``
    (``cancel``), or snoozed (``snooze``). The error entry's shape (attempt, time,
    exception, message, traceback) is built by the database, in ``pgqueue_error_entry``."""

    job_id: int
    run: int
    exception: str  # the exception's class path
    message: str
    traceback: str
    delay: float  # seconds before the next try, if one is left
    final: bool = False  # bury now, whatever attempts are left
    #: End the job ``cancelled`` (Cancel, or a stop request); ``message``: the reason.
    cancel: bool = False
    #: Not a failure (``raise Snooze``): queued again in ``delay`` s, attempt not spent.
    snooze: bool = False


#: What one run ends with, as the completer records it.
Outcome = Success | Failure


@dataclasses.dataclass(frozen=True, slots=True)
class Renewal:
    """What a heartbeat found: the runs it renewed; those an operator asked to stop
    (with the reason; lost ones too, if a reaper ended their job cancelled), renewed
    ones of paused queues; the runs still held that it skipped, locked elsewhere."""

    kept: set[tuple[int, int]]
    cancel_requested: dict[tuple[int, int], str]
    paused: set[tuple[int, int]] = dataclasses.field(default_factory=set)
    busy: set[tuple[int, int]] = dataclasses.field(default_factory=set)


@dataclasses.dataclass(frozen=True, slots=True)
class Reaped:
    """A job the reaper returned to the queue or buried: its lease expired."""

    id: int
    task: str
    queue: str
    attempt: int
    max_attempts: int
    worker: str  # the worker that stopped renewing the lease
    delay: float | None = None  # until its next attempt; None: buried


@dataclasses.dataclass(frozen=True, slots=True)
class ReapResult:
    """What a reap did (``cancelled``: runs an operator had asked to stop)."""

    returned: int = 0
    buried: int = 0
    cancelled: int = 0
    buried_jobs: tuple[Reaped, ...] = ()
    returned_jobs: tuple[Reaped, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class QueueStats:
    queue: str
    status: str
    jobs: int
    oldest_ready_age: float | None
    dead_last_24h: int
    lease_expired: int


class RunOutcome(enum.StrEnum):
    """What one run came to, as the worker's metrics and signals name it (the
    ``outcome`` label of ``pgqueue_jobs_completed_total``)."""

    SUCCEEDED = "succeeded"
    RETRIED = "retried"  # failed, back to queued for another attempt
    DEAD = "dead"
    CANCELLED = "cancelled"
    RELEASED = "released"  # given back by a stopping worker, the attempt not spent

    @classmethod
    def of(cls, status: str) -> RunOutcome:
        """The outcome of a run whose recording left the job in ``status``."""
        if status == JobStatus.DONE:
            return cls.SUCCEEDED
        if status == JobStatus.QUEUED:
            return cls.RETRIED
        return cls(status)  # dead (and cancelled) name the state itself
