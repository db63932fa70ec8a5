"""The worker's scheduler thread: enqueues each due tick of ``PGQUEUE["PERIODIC"]``.

Every worker runs one (burst workers and ``--max-jobs`` workers excepted), and
the database decides which of them enqueues a tick (``schedule_tick``, a
compare-and-set in the statement that inserts the job). The thread keeps each
schedule's next tick in memory, so while nothing is due it sends no statement;
it looks at most once a second, and sends one statement per due tick.

Missed ticks: when the scheduler starts, the ticks since a schedule's last one
that came before any worker still alive was up (the registry tells) were
missed; ``catch_up`` says how many of them to enqueue ("latest", the default:
the most recent one; "none"; "all": as many as fit). Later ticks, due while some
scheduler was up, are all enqueued. One look enqueues at most ``MAX_TICKS`` ticks of
a schedule, missed and due together: the most recent. A scheduler that looks more
than a minute late (the database unreachable, the process paused) counts the ticks
since its last look as missed, as one starting then would.

Each schedule is looked at apart: one whose tick fails for a reason of its own (its
job refused by the database, say) is logged and tried again later, with a growing
pause, while the others go on. An error of the connection or of the schema is the
thread's guard's (``ServiceThread``): it stops the look, and the guard retries it.

A last tick ahead of the clock (a worker's clock running fast) holds the
schedule until then, each instant still enqueued once; the scheduler says so
when it starts. A time no worker writes (``infinity``, a year BC: a row written
by hand) counts as none (``schedules_sync``, ``schedule_tick``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time

from django_pgqueue import conf
from django_pgqueue.dberrors import first_line, is_transient, schema_problem
from django_pgqueue.exceptions import SchedulesBusy
from django_pgqueue.periodic.calls import job_spec
from django_pgqueue.periodic.spec import MAX_TICKS, ScheduleSpec
from django_pgqueue.queue import schedules
from django_pgqueue.queue.schedules import Declared
from django_pgqueue.records import JobSpec
from django_pgqueue.worker.config import WorkerConfig
from django_pgqueue.worker.events import Events
from django_pgqueue.worker.services import ServiceThread, Supervision, bookkeeping_thread

logger = logging.getLogger("django_pgqueue")

#: The longest the thread sleeps: the clock may be set while it does.
LONGEST_PAUSE = 60.0
#: A look later than planned by more than this finds the ticks since the last look
#: missed, not due (see Scheduler._ticks): the scheduler looks at least this often.
FELL_BEHIND = dt.timedelta(seconds=LONGEST_PAUSE)
#: The longest a tick's statement waits for a lock: the schedule's row, which another
#: worker taking the same tick holds for milliseconds, or a job holding the task's
#: unique_key that an open transaction enqueued. Past it the tick is tried again at
#: the next look, and the other schedules are not held up meanwhile.
LOCK_WAIT = "500ms"
#: How many missed ticks each catch_up value enqueues.
CATCH_UP_LIMITS = {"none": 0, "latest": 1, "all": MAX_TICKS}


#: Later than any tick: a schedule not looked at yet.
NEVER = dt.datetime.max.replace(tzinfo=dt.UTC)
#: Earlier than any look: a schedule whose looks have not failed.
LONG_AGO = dt.datetime.min.replace(tzinfo=dt.UTC)


@dataclasses.dataclass
class Planned:
    """One schedule as this worker's scheduler follows it."""

    spec: ScheduleSpec
    declared: Declared
    job: JobSpec
    #: Every tick up to this instant has been dealt with (enqueued, here or elsewhere).
    cursor: dt.datetime
    due: dt.datetime
    #: Since when a scheduler running this schedule has been up, without a break.
    up_since: dt.datetime = NEVER
    #: Its last tick's statement waited for a lock too long (said once, not each look).
    blocked: bool = False
    #: Looks in a row that failed for a reason of this schedule's own (see Scheduler._look).
    failures: int = 0
    #: After such a failure, no look before this instant.
    retry_at: dt.datetime = LONG_AGO

    @property
    def next_look(self) -> dt.datetime:
        return max(self.due, self.retry_at)

    @classmethod
    def of(cls, spec: ScheduleSpec) -> Planned:
        return cls(spec, declared(spec), job_spec(spec), cursor=NEVER, due=NEVER)


def declared(spec: ScheduleSpec) -> Declared:
    """What the schedule's row says of it (shown to operators; ticks are matched by name)."""
    return Declared(spec.name, spec.task, spec.expression, spec.timezone, spec.enabled)


class Scheduler(ServiceThread):
    """Enqueues the due ticks of the settings' schedules (see the module's docstring)."""

    def __init__(self, alias: str, supervision: Supervision, events: Events) -> None:
        super().__init__(alias, "pgqueue-scheduler", supervision)
        self.events = events
        # Aware, whatever USE_TZ says: the ticks are instants in UTC.
        self.started = dt.datetime.now(dt.UTC)
        specs = conf.get().schedules
        # Checked at start-up by the system check (E010); with --skip-checks,
        # runworker turns the InvalidSchedule into its one-line CommandError.
        self.planned = [Planned.of(s) for s in specs if s.enabled]
        self._synced = False
        self._sync_blocked = False

    def step(self) -> float:
        # A tick's job is an enqueue: it commits durably, whatever ASYNC_COMMIT says.
        bookkeeping_thread(on=False)
        if not self._synced:
            try:
                self._sync()
            except SchedulesBusy as exc:
                if not self._sync_blocked:  # said once; the ticks since the start stay due
                    logger.warning(
                        "scheduler: the schedules cannot be written: %s; no tick is enqueued "
                        "until that transaction ends, tried again every second",
                        exc,
                    )
                self._sync_blocked = True
                return 1.0
        began = time.monotonic()
        now = dt.datetime.now(dt.UTC)
        for plan in self.planned:
            if plan.next_look <= now:
                self._look(plan, now)
        if not self.planned:
            return LONGEST_PAUSE
        wait = (min(p.next_look for p in self.planned) - dt.datetime.now(dt.UTC)).total_seconds()
        # At most one look a second, however the ticks of several schedules fall.
        return min(LONGEST_PAUSE, max(wait, 1.0 - (time.monotonic() - began), 0.0))

    def failing(self) -> bool:
        return any(plan.failures for plan in self.planned)

    def _look(self, plan: Planned, now: dt.datetime) -> None:
        """Enqueue the schedule's due ticks; a failure of its own does not stop the
        look at the others: it is logged, and the schedule tried again after a pause
        (1 s, doubling to LONGEST_PAUSE). One of the connection (the database
        unreachable) or of the schema goes to the thread's guard, as before."""
        try:
            self._enqueue_due(plan, now)
        except Exception as exc:
            if is_transient(exc) or schema_problem(exc, self.alias):
                raise
            plan.failures += 1
            pause = min(LONGEST_PAUSE, 2.0 ** (plan.failures - 1))
            plan.retry_at = now + dt.timedelta(seconds=pause)
            if plan.failures == 1:
                logger.exception(
                    "schedule %s: its ticks could not be enqueued (the other schedules go "
                    "on); tried again in %.0f s",
                    plan.spec.name,
                    pause,
                )
            else:
                logger.warning(
                    "schedule %s: its ticks still cannot be enqueued (%d looks in a row): "
                    "%s: %s; tried again in %.0f s",
                    plan.spec.name,
                    plan.failures,
                    type(exc).__name__,
                    first_line(exc),
                    pause,
                )
            return
        if plan.failures:
            logger.info(
                "schedule %s: its ticks are enqueued again, after %d failed looks",
                plan.spec.name,
                plan.failures,
            )
            plan.failures = 0

    def _sync(self) -> None:
        # Those disabled in settings too: their rows say they are still declared.
        result = schedules.sync(
            [declared(s) for s in conf.get().schedules], self.alias, lock_wait=schedules.BUSY_WAIT
        )
        rows = {row.name: row for row in result.rows}
        since = schedules.up_since(self.alias)
        for plan in self.planned:
            plan.up_since = min(since.get(plan.spec.name, self.started), self.started)
            row = rows[plan.spec.name]
            resume_from = row.resume_from or row.created_at
            # Not past now: should the row's time be cleared, the ticks go on at once;
            # nor past this scheduler's own cursor, when a row deleted by hand made it
            # sync again: the ticks it could not take then are taken now.
            plan.cursor = min(resume_from, result.now, plan.cursor)
            plan.due = result.now  # looked at in this first step
            # Only a tick or a restart holds ticks back (schedule_tick), not created_at.
            if row.resume_from is not None and row.resume_from - result.now > FELL_BEHIND:
                # Each instant is enqueued once: no tick at or before it is taken.
                logger.warning(
                    "schedule %s: its last tick or restart (%s) is %.0f s ahead of the "
                    "database's clock (a worker's clock running fast, or a row written by "
                    "hand): no tick is enqueued until then",
                    plan.spec.name,
                    resume_from.isoformat(timespec="seconds"),
                    (resume_from - result.now).total_seconds(),
                )
        if result.removed:
            logger.info(
                "scheduler: %d schedule(s) no longer in PGQUEUE['PERIODIC'] are marked removed",
                result.removed,
            )
        self._synced, self._sync_blocked = True, False

    def _ticks(self, plan: Planned, now: dt.datetime) -> list[dt.datetime]:
        """The ticks to enqueue now: those due while some worker was up, and as many
        missed ones (due before) as catch_up allows. A look later than planned by
        more than ``FELL_BEHIND`` (every statement failing while the database was
        unreachable, the process paused) finds the ticks since the last one missed
        too, as a scheduler starting then would."""
        spec, start, boundary = plan.spec, plan.cursor, plan.up_since
        while_ = "while no worker running it was up"
        if now - plan.due > FELL_BEHIND:
            boundary = max(boundary, now)
            while_ = (
                f"while this scheduler could not look ({(now - plan.due).total_seconds():.0f} s)"
            )
        due = spec.between(max(start, boundary), now, MAX_TICKS + 1)
        if len(due) > MAX_TICKS:
            logger.warning(
                "schedule %s: more than %d ticks due at once; the oldest are not enqueued",
                spec.name,
                MAX_TICKS,
            )
            due = due[1:]
        missed: list[dt.datetime] = []
        if start < boundary:
            # One look enqueues at most MAX_TICKS ticks: the due ones, then as many
            # missed ones as catch_up asks and room is left for.
            wanted = CATCH_UP_LIMITS[spec.catch_up]
            limit = min(wanted, MAX_TICKS - len(due))
            if limit:
                missed = spec.between(start, min(boundary, now), limit)
            skipped = spec.between(start, min(boundary, now), MAX_TICKS + 1)
            if len(skipped) > len(missed):
                logger.info(
                    "schedule %s: %s missed %s, catch_up=%r enqueues %d%s",
                    spec.name,
                    f"more than {MAX_TICKS} ticks"
                    if len(skipped) > MAX_TICKS
                    else f"{len(skipped)} ticks",
                    while_,
                    spec.catch_up,
                    len(missed),
                    f" (with {len(due)} due: at most {MAX_TICKS} at once)"
                    if limit < wanted
                    else "",
                )
        return missed + due

    def _enqueue_due(self, plan: Planned, now: dt.datetime) -> None:
        for tick in self._ticks(plan, now):
            try:
                ticked, job_id = schedules.tick(
                    plan.declared, plan.job, tick, self.alias, lock_wait=LOCK_WAIT
                )
            except schedules.TickBlocked:
                if not plan.blocked:
                    key = plan.job.unique_key
                    logger.warning(
                        "schedule %s: the tick at %s waited more than %s for a lock (another "
                        "transaction holds the schedule's row%s): it is tried again at the "
                        "next look",
                        plan.spec.name,
                        tick.isoformat(timespec="seconds"),
                        LOCK_WAIT,
                        "" if key is None else f", or a job with the unique key {key!r}",
                    )
                plan.blocked = True
                return  # cursor and due as they were: retried at the next look
            except schedules.RowMissing:
                logger.warning(
                    "schedule %s: its row in pgqueue_schedule is gone (deleted by hand?): "
                    "the schedules are written again, and the tick at %s is taken then",
                    plan.spec.name,
                    tick.isoformat(timespec="seconds"),
                )
                self._synced = False
                return  # cursor as it was: the next look, after the sync, takes the tick
            plan.blocked = False
            if ticked and job_id is not None:
                logger.info(
                    "schedule %s: enqueued job %d (%s) for the tick at %s",
                    plan.spec.name,
                    job_id,
                    plan.job.task,
                    tick.isoformat(timespec="seconds"),
                )
            elif ticked:
                logger.info(
                    "schedule %s: the tick at %s enqueued nothing: a live job holds the "
                    "unique key %r",
                    plan.spec.name,
                    tick.isoformat(timespec="seconds"),
                    plan.job.unique_key,
                )
            if ticked:
                self.events.emit("scheduled", schedule=plan.spec.name, tick=tick, job_id=job_id)
            plan.cursor = tick
        plan.cursor = max(plan.cursor, now)
        plan.due = plan.spec.next_or_none(now) or NEVER


def scheduler_thread(
    config: WorkerConfig, supervision: Supervision, events: Events
) -> Scheduler | None:
    """The scheduler thread of a worker, or None for one that does not schedule: a
    bounded worker (``--burst`` or ``--max-jobs``), which exits on its own."""
    if config.burst or config.max_jobs is not None:
        return None
    return Scheduler(config.database, supervision, events)
