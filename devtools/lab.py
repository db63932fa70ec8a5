"""The design article's lab, run through django-pgqueue's API (``make demo``).

Eight claimers with their own connections drain 1000 jobs of 2 ms; one job fails
twice and then succeeds, one always fails and ends dead, and one worker claims a
job and dies holding its lease, which the reaper gives back.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable

from django.db import close_old_connections, connections

from devtools.demo import DEMO_DATA
from devtools.embedded_pg import ensure_database_url


def drain(
    worker: str,
    *,
    lease: float = 5.0,
    batch: int = 1,
    idle_exit: bool = True,
    on_claim: Callable[[int], None] | None = None,
) -> int:
    """Claim, run and record jobs until none is queued or running; returns how many ran."""
    from django_pgqueue.models import Job
    from django_pgqueue.records import Success
    from django_pgqueue.worker.executor import execute

    ran = 0
    try:
        while True:
            claimed = Job.objects.claim(worker, limit=batch, lease=lease)
            if not claimed:
                if idle_exit and not Job.objects.filter(status__in=["queued", "running"]).exists():
                    return ran
                time.sleep(0.005)  # retries wait for their run_at
                continue
            for job in claimed:
                if on_claim:
                    on_claim(job.id)
                outcome = execute(job)
                if isinstance(outcome, Success):
                    Job.objects.complete(worker, [outcome])
                else:
                    Job.objects.fail(worker, [outcome])
                ran += 1
    finally:
        connections.close_all()


def run_claimers(count: int, **options: object) -> float:
    """Run ``count`` claimer threads to completion; returns the elapsed seconds."""
    threads = [
        threading.Thread(target=drain, args=(f"lab-{i}",), kwargs=options) for i in range(count)
    ]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start


def main() -> None:
    ensure_database_url(data_dir=DEMO_DATA)  # before the settings read DATABASE_URL
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    close_old_connections()

    from django_pgqueue.models import Job
    from django_pgqueue.records import JobSpec
    from example_project.lab.tasks import flaky, poison, work

    Job.objects.all().delete()
    specs = [JobSpec.build(work, [n]) for n in range(1, 1001) if n not in (7, 13)]
    specs += [JobSpec.build(flaky, [7]), JobSpec.build(poison, [13])]
    Job.objects.enqueue_many(specs)
    elapsed = run_claimers(8, lease=5.0)

    counts = Counter(Job.objects.values_list("status", flat=True))
    attempts = Counter(Job.objects.values_list("attempts", flat=True))
    dead = Job.objects.get(task=poison.path)
    print(
        f"lab: 8 claimers drained {len(specs)} jobs in {elapsed:.2f}s "
        f"({len(specs) / elapsed:,.0f} jobs/s)"
    )
    print(f"  counts by status: {dict(sorted(counts.items()))}")
    print(
        f"  runs per job: {dict(sorted(attempts.items()))} "
        f"(job 7 ran {Job.objects.get(task=flaky.path).attempts} times, as designed)"
    )
    print(f"  dead job #{dead.id} after {dead.attempts} attempts: {dead.last_error}")

    Job.objects.all().delete()
    Job.objects.enqueue_many(JobSpec.build(work, [n]) for n in range(3))
    (held,) = Job.objects.claim("doomed-worker", lease=0.1)
    print(
        f"crash: worker claimed job #{held.id} and died; counts "
        f"{dict(sorted(Counter(Job.objects.values_list('status', flat=True)).items()))}"
    )
    print(f"  reap right away returned {Job.objects.reap().returned} jobs")
    time.sleep(0.15)
    print(f"  reap after the lease ran out returned {Job.objects.reap().returned} job")
    (again,) = Job.objects.claim("rescuer", lease=5)
    print(f"  the next claim got job #{again.id} on attempt {again.attempt}")
    connections.close_all()


if __name__ == "__main__":
    main()
