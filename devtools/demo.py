"""``make demo``: the example shop's queue, end to end, on the embedded PostgreSQL.

Orders are posted through the shop's views; a view that fails rolls its job
back with it; workers run the jobs, one of them is killed mid-job and the
reaper gives its job back; the report says what happened to every job. Last,
two workers run side by side for a few seconds while the shop's periodic
schedule ticks: each tick becomes exactly one job.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from devtools.embedded_pg import ensure_database_url

ROOT = Path(__file__).resolve().parents[1]
ORDERS = 200
# The demo's database outlives `make demo` so that `make admin` can show its jobs.
# Not the folder older versions used: that one's server let every local user in.
DEMO_DATA = Path(tempfile.gettempdir()) / f"django-pgqueue-demo-db-{os.getuid()}" / "data"


def manage(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def run(*args: str) -> str:
    proc = manage(*args)
    out, _ = proc.communicate(timeout=300)
    if proc.returncode:
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{out}")
    return out


def wait_until(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: timed out waiting for {what}")
        time.sleep(0.05)


def main() -> None:
    ensure_database_url(data_dir=DEMO_DATA)  # before the settings read DATABASE_URL
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connections
    from django.test import Client

    from django_pgqueue.backend import options
    from django_pgqueue.models import Job, Schedule
    from example_project.shop.models import Order
    from example_project.shop.tasks import build_report, charge_card, send_newsletter

    db = settings.DATABASES["default"]
    print(f"== django-pgqueue demo: PostgreSQL at {db['HOST']}:{db['PORT']}/{db['NAME']}")
    call_command("migrate", verbosity=0)
    users = get_user_model().objects
    # LOCAL DEMO ONLY: admin / admin, for `make admin` on 127.0.0.1.
    if not users.filter(username="admin").exists():
        users.create_superuser("admin", "admin@example.com", "admin")
    Job.objects.all().delete()
    Order.objects.all().delete()
    Schedule.objects.all().delete()

    client = Client()
    started = time.perf_counter()
    for n in range(ORDERS):
        response = client.post(
            "/orders/", {"email": f"customer{n}@example.com", "total_cents": 1000 + n}
        )
        assert response.status_code == 201, response.content
    posted = time.perf_counter() - started
    print(
        f"posted {ORDERS} orders through /orders/ in {posted:.2f}s: "
        f"{Order.objects.count()} orders, {Job.objects.count()} confirmation jobs queued"
    )
    response = client.post("/orders/fail/", {"email": "unlucky@example.com"})
    print(
        f"posted an order to /orders/fail/ (HTTP {response.status_code}: "
        f"{response.json()['error']}): still {Order.objects.count()} orders and "
        f"{Job.objects.count()} jobs; the rollback took its job with it"
    )

    send_newsletter.enqueue(issue=42)
    charge_card.enqueue(Order.objects.order_by("pk").first().pk)  # type: ignore[union-attr]
    report = options(build_report, max_attempts=3).enqueue(seconds=4.0)
    connections.close_all()

    doomed = manage(
        "runworker", "--queues", "reports", "--lease", "2", "--worker-id", "doomed-worker"
    )
    wait_until(
        lambda: Job.objects.filter(pk=report.id, status="running").exists(),
        30,
        "the doomed worker to start the report",
    )
    time.sleep(1.0)
    doomed.send_signal(signal.SIGKILL)
    doomed.communicate()
    print(
        "killed worker 'doomed-worker' (SIGKILL) one second into the 4 s report job; "
        f"job #{report.id} is still {Job.objects.get(pk=report.id).status}, "
        "its lease runs out in 2 s"
    )
    time.sleep(2.2)
    print(f"manage.py reapjobs: {run('reapjobs').strip()}")

    started = time.perf_counter()
    passes = 0
    while Job.objects.queued().exists() and passes < 10:
        passes += 1
        run(
            "runworker",
            "--burst",
            "--lease",
            "2",
            "--concurrency",
            "8",
            "--worker-id",
            f"burst-{passes}",
        )
        if Job.objects.queued().exists():
            time.sleep(0.5)  # the retries wait for their backoff
    elapsed = time.perf_counter() - started
    report_results(Job, elapsed, passes)
    show_schedule(Job)


def show_schedule(job_model: type) -> None:
    """Two workers for a few seconds: the every-second "order-tally" schedule's ticks,
    one job each, whichever worker enqueued it."""
    jobs = job_model.objects.filter(schedule="order-tally")  # type: ignore[attr-defined]
    before = jobs.count()
    workers = [manage("runworker", "--worker-id", f"scheduler-{n}") for n in (1, 2)]
    started = time.monotonic()
    wait_until(lambda: jobs.filter(status="done").count() >= before + 4, 60, "four ticks")
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        worker.communicate(timeout=60)
    elapsed = time.monotonic() - started
    ticks = list(jobs.order_by("run_at").values_list("run_at", flat=True))
    distinct = len(set(ticks))
    print()
    print(
        f"periodic: two workers ran {elapsed:.1f}s beside each other with the 'order-tally' "
        f"schedule (every 1 s): {len(ticks)} jobs for {distinct} ticks, one job per tick "
        f"({'none doubled' if distinct == len(ticks) else 'DOUBLED'}), "
        f"{jobs.filter(status='done').count()} done"
    )
    latest = jobs.order_by("-run_at").first()
    if latest is not None:
        print(
            f"  the latest, job #{latest.id} for the tick at {latest.run_at:%H:%M:%S}: "
            f"{latest.result!r}"
        )
    print("manage.py schedules:")
    print("  " + run("schedules").rstrip().replace("\n", "\n  "))


def report_results(job_model: type, elapsed: float, passes: int) -> None:
    from django.db.models import Max, Min

    jobs = job_model.objects  # type: ignore[attr-defined]
    counts = Counter(jobs.values_list("status", flat=True))
    print(f"ran `manage.py runworker --burst` {passes} time(s) in {elapsed:.1f}s")
    print(f"counts by status: {dict(sorted(counts.items()))}")
    print("runs per job:")
    for task in sorted(set(jobs.values_list("task", flat=True))):
        rows = jobs.filter(task=task)
        runs = Counter(rows.values_list("attempts", flat=True))
        name = task.rsplit(".", 1)[-1]
        shown = ", ".join(f"{n} job(s) ran {k} time(s)" for k, n in sorted(runs.items()))
        print(f"  {name:<18} {shown}")
    confirmations = jobs.filter(task__endswith=".send_confirmation")
    span = confirmations.aggregate(start=Min("attempted_at"), end=Max("done_at"))
    seconds = (span["end"] - span["start"]).total_seconds()
    print(
        f"throughput: {confirmations.count()} confirmation jobs done in {seconds:.2f}s "
        f"({confirmations.count() / seconds:,.0f} jobs/s, one worker, concurrency 8)"
    )
    for dead in jobs.filter(status="dead"):
        print(
            f"dead job #{dead.id} ({dead.task.rsplit('.', 1)[-1]}) after {dead.attempts} "
            f"attempts: {dead.last_error}"
        )
    report = jobs.get(task__endswith=".build_report")
    print(
        f"report job #{report.id}: {report.status} on attempt {report.attempts}, "
        f"workers {report.worker_ids}; the first run died with its worker, the reaper "
        "returned it, and heartbeats kept its 2 s lease alive for the 4 s run"
    )
    print()
    print(
        "See it in the admin: run `make admin`, open http://127.0.0.1:8000/admin/ and log "
        "in as admin / admin (local use only)."
    )
    print(
        "Jobs -> filter Status: Dead -> select the charge_card job -> action "
        "'Retry selected jobs' re-queues it."
    )


if __name__ == "__main__":
    main()
