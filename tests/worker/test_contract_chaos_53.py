"""Issues 3 and 10's guarantees under combined faults, as a soak: several real
``runworker`` processes over a mixed workload (short and slow jobs, failures with
retries, concurrency keys, unique keys, snoozes, cancels, a paused queue) while
workers are SIGKILLed, SIGSTOPped and SIGTERMed at random moments and the embedded
server is crashed and restarted under them.

Every run appends its record to a file outside the database (the task in
``tests.testapp.chaostasks``); at the end each guarantee of docs/guarantees.md is
checked exactly from those records and the job table. The plan of faults comes
from a fixed seed, printed with every violation, so that a failure can be re-run.

Only the embedded server of this test session is crashed: with ``DATABASE_URL``
set (a shared server) the tests skip.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import os
import random
import signal
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import DatabaseError, connection

from devtools import embedded_pg
from django_pgqueue.models import Job
from django_pgqueue.queue.manager import QueueOperations
from django_pgqueue.records import JobSpec
from tests.conftest import run_counts
from tests.testapp.chaostasks import chaos
from tests.testapp.tasks import tracked
from tests.worker.conftest import WorkerProcess, wait_for
from tests.worker.inprocess import worker_thread

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Start = Callable[..., WorkerProcess]

LEASE = 5.0
HEARTBEAT = LEASE / 3
LONG_STOP = LEASE + 2.5  # past the lease and a reap: the stopped runs are taken back
WORKER_ARGS = (
    "--concurrency",
    "4",
    "--lease",
    str(LEASE),
    "--poll-interval",
    "0.5",
    "--shutdown-timeout",
    "1",
    "--stats-interval",
    "600",
)
WORKER_ENV = {"PGQUEUE_TEST_PGQUEUE": json.dumps({"REAP_INTERVAL": 0.5})}
FINAL = {"done", "dead", "cancelled"}
UNDONE = 1.0  # seconds of asynchronous commits a crash may lose, with a margin


@dataclasses.dataclass
class Run:
    job: int
    run: int
    attempt: int
    pid: int
    start: float
    seen: float  # the latest moment it was known alive: its end, or its last tick
    outcome: str | None = None  # None: its process died under it


@dataclasses.dataclass
class Faults:
    """What the test did, when: enough to tell a lease that may have lapsed."""

    long_stops: dict[int, list[float]] = dataclasses.field(default_factory=dict)
    terms: dict[int, float] = dataclasses.field(default_factory=dict)
    kills: dict[int, float] = dataclasses.field(default_factory=dict)
    crashes: list[float] = dataclasses.field(default_factory=list)
    actions: list[tuple[float, str, int]] = dataclasses.field(default_factory=list)

    def lease_may_have_lapsed(self, run: Run, at: float) -> bool:
        """Whether ``run``'s lease may have ended before ``at`` without its worker
        dying: the worker was stopped long enough (a lapse the docs allow), or it
        was told to stop and gave the run back (its process exits right after)."""
        for stopped in self.long_stops.get(run.pid, []):
            if at >= stopped + LEASE - HEARTBEAT - 0.25:
                return True
        # given back at the end of --shutdown-timeout 1
        if run.pid in self.terms and at >= self.terms[run.pid] + 0.8:
            return True
        return self.claim_may_be_undone(run, at)

    def claim_may_be_undone(self, run: Run, at: float) -> bool:
        """Whether ``run``'s claim may have been lost in a crash before ``at``: the
        worker's bookkeeping commits asynchronously (ASYNC_COMMIT), and a crash
        loses up to three WAL writer delays (0.6 s) of it."""
        # Claimed before the crash (a claimed-ahead job may wait for a thread, under
        # its renewed lease), within the last UNDONE seconds of it.
        return any(
            run.start - LEASE <= crashed <= min(at, run.start + UNDONE) for crashed in self.crashes
        )


def retrying[T](call: Callable[[], T], timeout: float = 30.0) -> T:
    """``call()`` from the test's own connection, waiting out the server's restarts."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except DatabaseError:
            connection.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def read_runs(log: Path) -> tuple[dict[tuple[int, int], Run], list[str]]:
    runs: dict[tuple[int, int], Run] = {}
    problems: list[str] = []
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        key = (rec["job"], rec["run"])
        if rec["ev"] == "start":
            if key in runs:
                problems.append(f"one claim started twice: {rec} after {runs[key]}")
                continue
            runs[key] = Run(rec["job"], rec["run"], rec["attempt"], rec["pid"], rec["t"], rec["t"])
            continue
        run = runs[key]
        if rec["pid"] != run.pid:
            problems.append(f"one claim ran in two processes: {rec} and {run}")
        run.seen = max(run.seen, rec["t"])
        if rec["ev"] == "end":
            run.outcome = rec["outcome"]
    return runs, problems


def overlaps(runs: list[Run], faults: Faults, what: str, across: bool = False) -> list[str]:
    """Pairs of runs alive at once, the earlier's lease not possibly lapsed."""
    found = []
    ordered = sorted(runs, key=lambda r: r.start)
    for i, earlier in enumerate(ordered):
        for later in ordered[i + 1 :]:
            if later.start >= earlier.seen or (across and later.job == earlier.job):
                continue
            if not faults.lease_may_have_lapsed(earlier, later.start):
                found.append(f"{what}: {later} started while {earlier} ran under its lease")
    return found


def allowed_overlaps(runs: dict[tuple[int, int], Run]) -> list[str]:
    """Runs of one job alive at once after a lapse the docs allow (a long stop, a crash)."""
    by_job: dict[int, list[Run]] = defaultdict(list)
    for run in runs.values():
        by_job[run.job].append(run)
    return [
        f"{b} while {a}"
        for job_runs in by_job.values()
        for a in job_runs
        for b in job_runs
        if a.start < b.start < a.seen
    ]


def check(
    rows: dict[int, Job], runs: dict[tuple[int, int], Run], faults: Faults, paused: set[int]
) -> list[str]:
    problems: list[str] = []
    by_job: dict[int, list[Run]] = defaultdict(list)
    for run in runs.values():
        by_job[run.job].append(run)
    for job_runs in by_job.values():
        job_runs.sort(key=lambda r: r.start)

    # Never two runs of one job while its lease holds.
    for job_id, job_runs in by_job.items():
        problems += overlaps(job_runs, faults, f"job {job_id} twice")
    # Never two running jobs of one concurrency key.
    by_key: dict[str, list[Run]] = defaultdict(list)
    for job_id, job_runs in by_job.items():
        key = rows[job_id].concurrency_key
        if key:
            by_key[key] += job_runs
    for key, key_runs in by_key.items():
        problems += overlaps(key_runs, faults, f"key {key}", across=True)

    for job_id, row in rows.items():
        job_runs = by_job.get(job_id, [])
        kind = row.args[1]
        entries = row.errors
        # Nothing lost: final with a reason, or queued (a paused queue's).
        if job_id in paused:
            if (row.status, row.attempts, len(job_runs)) != ("queued", 0, 0):
                problems.append(f"paused job {job_id} is {row.status}, ran {len(job_runs)}")
            continue
        if row.status not in FINAL:
            problems.append(f"job {job_id} ({kind}) left {row.status}: {row.errors}")
            continue
        if row.status in ("dead", "cancelled") and not row.last_error:
            problems.append(f"job {job_id} {row.status} without a reason")
        # A stale run never overwrites a newer outcome: the row's outcome is its
        # latest claim's.
        if row.status == "done":
            result = row.result or {}
            if result.get("run") != row.lease_token:
                problems.append(
                    f"job {job_id} done with run {result.get('run')}'s result, its latest "
                    f"claim is {row.lease_token}; runs: {job_runs}"
                )
            # The run of its latest claim returned; a run started after it is one
            # whose claim a crash may have undone (it ran again: at least once).
            mine = [i for i, run in enumerate(job_runs) if run.run == row.lease_token]
            own = job_runs[mine[-1]] if mine else None
            if own is None or own.outcome != "return":
                problems.append(f"job {job_id} done, its latest claim's run {own} did not return")
            for run in job_runs[mine[-1] + 1 :] if mine else []:
                if run.run != row.lease_token and not faults.claim_may_be_undone(run, run.start):
                    problems.append(f"job {job_id} done, but {run} started after {own}")
            if result.get("attempt") != row.attempts:
                problems.append(
                    f"job {job_id} done on attempt {result} but attempts {row.attempts}"
                )
        if row.status == "dead":
            if row.attempts != row.max_attempts:
                problems.append(f"job {job_id} dead after {row.attempts} of {row.max_attempts}")
            if row.last_error.startswith("RuntimeError") and f"run {row.lease_token} " not in (
                row.last_error
            ):
                problems.append(
                    f"job {job_id} dead with a stale run's error {row.last_error!r}, its "
                    f"latest claim is {row.lease_token}"
                )
        if kind == "always" and row.status != "dead":
            problems.append(f"job {job_id} (always fails) ended {row.status}")
        if kind == "never" and (row.status, len(job_runs)) != ("cancelled", 0):
            problems.append(f"job {job_id} (cancelled while queued) {row.status}, ran")
        if kind == "stoppable" and row.status != "cancelled":
            problems.append(f"job {job_id} (asked to stop) ended {row.status}")
        # Attempts agree with the runs: a run's attempt is the count so far; one
        # repeats only after a snooze or a give-back; a gap (or attempts beyond the
        # last run) only for claims that never started, reaped with LeaseExpired.
        reaped = {e["attempt"] for e in entries if e["exception"] == "LeaseExpired"}
        previous: Run | None = None
        for run in job_runs:
            last = previous.attempt if previous else 0
            if run.attempt < last or (
                run.attempt == last
                and previous is not None
                and previous.outcome != "snooze"
                and previous.pid not in faults.terms
                and not faults.claim_may_be_undone(previous, run.start)
            ):
                problems.append(f"job {job_id}: {run} after {previous}")
            for gap in range(last + 1, run.attempt):
                if gap not in reaped:
                    problems.append(f"job {job_id}: attempt {gap} never ran nor was reaped")
            previous = run
        last = previous.attempt if previous else 0
        if row.attempts < last:
            problems.append(f"job {job_id}: attempts {row.attempts} below its runs' {last}")
        for gap in range(last + 1, row.attempts + 1):
            if gap not in reaped:
                problems.append(f"job {job_id}: attempts {row.attempts}, runs to {last}: {row}")
    # Unique keys: never two live jobs of one key.
    by_unique: dict[str, list[Job]] = defaultdict(list)
    for row in rows.values():
        if row.unique_key:
            by_unique[row.unique_key].append(row)
    for key, holders in by_unique.items():
        holders.sort(key=lambda r: r.created_at)
        for a, b in itertools.pairwise(holders):
            if a.done_at is None or b.created_at < a.done_at:
                problems.append(f"unique key {key}: job {b.id} enqueued while {a.id} was live")
    return problems


def durable_commits(on: bool) -> None:
    def alter() -> None:
        with connection.cursor() as cursor:
            name = connection.ops.quote_name(connection.settings_dict["NAME"])
            cursor.execute(
                f"ALTER DATABASE {name} SET synchronous_commit = {'on' if on else 'DEFAULT'}"
            )

    retrying(alter)
    connection.close()  # the next connection starts with it


def workload(rng: random.Random, log: str) -> list[JobSpec]:
    """One batch: short, slow, failing (retried, or until buried), keyed and
    snoozing jobs. A batch goes in at the start and at every step of the plan."""
    specs = [JobSpec.build(chaos, [log, "ok"], {"seconds": rng.uniform(0, 0.1)}) for _ in range(12)]
    specs += [
        JobSpec.build(chaos, [log, "ok"], {"seconds": rng.uniform(1, 3)}, queue="slow")
        for _ in range(3)
    ]
    specs += [
        JobSpec.build(chaos, [log, "fail"], {"seconds": 0.2, "n": rng.randint(1, 2)})
        for _ in range(3)
    ]
    specs.append(JobSpec.build(chaos, [log, "always"], {"seconds": 0.1}, max_attempts=2))
    specs += [
        JobSpec.build(
            chaos,
            [log, "ok"],
            {"seconds": rng.uniform(0.2, 1.0)},
            concurrency_key=f"key-{rng.randrange(3)}",
        )
        for _ in range(5)
    ]
    specs.append(JobSpec.build(chaos, [log, "snooze"], {"n": 2}))
    rng.shuffle(specs)
    return specs


def plan(rng: random.Random) -> list[str]:
    """The faults, in order: one long stop, one crash, one fast restart, a pause,
    cancels, duplicate enqueues, and kills, terms and short stops around them."""
    fixed = ["stop_long", "crash", "restart", "pause", "cancel"]
    steps = fixed + [rng.choice(["kill", "term", "stop_short", "kill"]) for _ in range(8)]
    rng.shuffle(steps)
    return steps


# PGQUEUE_SOAK_SEEDS=7,8,9 re-runs (or explores) other seeds. An even seed's workers
# prefetch as they do by default (auto), an odd one's a fixed 2 jobs.
SEEDS = [int(s) for s in os.environ.get("PGQUEUE_SOAK_SEEDS", "53,1054").split(",")]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_guarantees_hold_through_combined_faults(
    start_worker: Start, tmp_path: Path, seed: int, request: pytest.FixtureRequest
) -> None:
    server = embedded_pg.current()
    if server is None:
        pytest.skip("crashes the database server: only the session's embedded one")
    rng = random.Random(seed)
    # The embedded server commits asynchronously everywhere (it holds test data): a
    # crash would undo enqueues too. Durable commits, as a production server's, for
    # everything but what ASYNC_COMMIT relaxes.
    durable_commits(True)
    request.addfinalizer(lambda: durable_commits(False))
    log = str(tmp_path / "runs.jsonl")
    Path(log).touch()
    Job.objects.pause_queue("frozen")
    frozen = set(
        Job.objects.enqueue_many(
            JobSpec.build(chaos, [log, "ok"], queue="frozen") for _ in range(3)
        )
    )
    stoppable = Job.objects.enqueue_many(
        # Longer than the plan: the cancel step always finds them running (or queued).
        JobSpec.build(chaos, [log, "stoppable"], {"seconds": 45}, priority=50)
        for _ in range(2)
    )
    enqueued = {*frozen, *stoppable, *Job.objects.enqueue_many(workload(rng, log))}
    never = chaos.using(delay=3600).enqueue(log, "never")
    Job.objects.cancel([never.pk], reason="soak: cancelled while queued")
    enqueued.add(never.pk)
    faults = Faults()
    workers: list[WorkerProcess] = []

    prefetch = "auto" if seed % 2 == 0 else "2"

    def spawn() -> None:
        workers.append(start_worker(*WORKER_ARGS, "--prefetch", prefetch, env=WORKER_ENV))

    def alive() -> list[WorkerProcess]:
        return [w for w in workers if w.proc.poll() is None and w.proc.pid not in stopped]

    stopped: dict[int, float] = {}  # pid: when to SIGCONT it
    for _ in range(3):
        spawn()

    def signal_one(step: str, now: float) -> None:
        candidates = alive()
        if not candidates:
            return
        victim = rng.choice(candidates)
        pid = victim.proc.pid
        faults.actions.append((now, step, pid))
        if step == "kill":
            faults.kills[pid] = now
            victim.signal(signal.SIGKILL)
            spawn()
        elif step == "term":
            # Once its start banner is out, so that its SIGTERM handler is in place:
            # a process still loading Django dies of the signal (exit -15), as any.
            victim.wait_for_output("[queues]", timeout=30)
            faults.terms[pid] = time.time()
            victim.signal(signal.SIGTERM)
            spawn()
        else:
            victim.signal(signal.SIGSTOP)
            if step == "stop_long":
                faults.long_stops.setdefault(pid, []).append(now)
            stopped[pid] = now + (LONG_STOP if step == "stop_long" else rng.uniform(0.2, 1.0))

    def enqueue_unique(n: int) -> Job:
        return chaos.using(unique_key=f"unique-{n}").enqueue(log, "ok", seconds=0.5)

    def act(step: str) -> None:
        now = time.time()
        if step in ("kill", "term", "stop_short", "stop_long"):
            signal_one(step, now)
        else:
            faults.actions.append((now, step, 0))
        if step == "crash":
            faults.crashes.append(now)
            server.crash()
            time.sleep(rng.uniform(0.3, 1.5))
            server.start()
        elif step == "restart":
            server.restart(down_for=rng.uniform(0.3, 1.0))
        elif step == "pause":
            retrying(lambda: Job.objects.pause_queue("slow"))
            time.sleep(1.0)
            retrying(lambda: Job.objects.resume_queue("slow"))
        elif step == "cancel":
            retrying(lambda: Job.objects.cancel(stoppable, reason="soak: not needed"))
        for n in range(3):  # refused while the key's job is live, taken once it ended
            job = retrying(functools.partial(enqueue_unique, n))
            if not job.duplicate:
                enqueued.add(job.pk)
        enqueued.update(retrying(lambda: Job.objects.enqueue_many(workload(rng, log))))

    def resume_due() -> None:
        for worker in workers:
            pid = worker.proc.pid
            if pid in stopped and time.time() >= stopped[pid]:
                worker.signal(signal.SIGCONT)
                del stopped[pid]

    for step in plan(rng):
        pause_until = time.time() + rng.uniform(0.8, 2.0)
        while time.time() < pause_until:
            resume_due()
            time.sleep(0.05)
        act(step)
    while stopped:
        resume_due()
        time.sleep(0.05)
    connection.close()
    while len(alive()) < 2:
        spawn()
    paused = set(frozen)

    def settled() -> bool:
        return not retrying(
            lambda: Job.objects.exclude(pk__in=paused).exclude(status__in=FINAL).exists()
        )

    wait_for(settled, 40, f"every job to end (seed {seed})")
    for worker in alive():
        worker.wait_for_output("[queues]", timeout=30)  # started, as above
        faults.terms[worker.proc.pid] = time.time()
        worker.signal(signal.SIGTERM)
    exits = {worker.proc.pid: worker.wait(20) for worker in workers}
    rows = {row.id: row for row in Job.objects.all()}
    runs, problems = read_runs(Path(log))
    problems += check(rows, runs, faults, paused)
    problems += [f"job {pk} was enqueued and is gone" for pk in sorted(enqueued - rows.keys())]
    problems += [  # SIGTERM: a drain, then exit 0, whatever the faults meanwhile
        f"worker {pid} exited {exits[pid]} after SIGTERM"
        for pid in faults.terms
        if exits[pid] and pid not in faults.kills
    ]
    entries = Counter(e["exception"] for row in rows.values() for e in row.errors)
    print(  # what the faults did, for a reader of -s output
        f"seed {seed}: {len(runs)} runs, {sum(r.outcome is None for r in runs.values())} cut "
        f"short; statuses {Counter(r.status for r in rows.values())}; entries {entries}; "
        f"overlaps allowed {allowed_overlaps(runs)}"
    )
    assert not problems, f"seed {seed}: faults {faults}\n" + "\n".join(problems)


def test_a_worker_paused_as_its_claim_returns_does_not_start_the_reaped_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by the soak (seed 6): a worker stopped between its claim's commit and
    the claim's rows reaching Python. The ledger timed the lease from the moment the
    rows arrived, after the pause, so it took a lease the reaper had ended (and
    another worker taken up) for a fresh one, and started the job: a second run of a
    job already running elsewhere, or even done. The pause is the claim's return
    held back here, in a real worker, until the lease lapsed and another worker took
    the job."""
    job = tracked.using(max_attempts=5).enqueue("paused-claim")
    claimed, taken = threading.Event(), threading.Event()
    original = QueueOperations.claim
    paused: list[int] = []

    def paused_run() -> int:
        return paused[0]

    def paused_on_return(self: Any, worker: str, **kwargs: Any) -> Any:
        jobs = original(self, worker, **kwargs)
        if jobs and worker == "inproc" and not claimed.is_set():
            paused.append(jobs[0].run)
            claimed.set()
            assert taken.wait(20), "the test never took the job over"
        return jobs

    monkeypatch.setattr(QueueOperations, "claim", paused_on_return)
    with worker_thread(concurrency=1, prefetch=0, lease=0.5, heartbeat_interval=0.1) as running:
        assert claimed.wait(20)

        def reaped() -> bool:
            Job.objects.reap()  # a no-op until the lease has lapsed
            return Job.objects.ready().filter(pk=job.pk).exists()

        wait_for(reaped, 10, "the paused worker's lease to lapse and the job to be ready")
        (rescued,) = original(Job.objects, "rescuer", lease=300)
        taken.set()
        # The paused claim's run is given back, and the fence refuses it (before: it
        # was started, and its outcome refused).
        wait_for(
            lambda: (
                running.recorder.count(
                    "recorded", lambda data: data["statuses"] == {(job.pk, paused_run()): None}
                )
                == 1
                or run_counts("paused-claim") != {}
            ),
            10,
            "the paused claim's run to be given back or started",
        )
        assert running.stop() == 0
    assert run_counts("paused-claim") == {}  # before: 1, a run under a lease lost long ago
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.locked_by, row.lease_token) == ("running", "rescuer", rescued.run)
