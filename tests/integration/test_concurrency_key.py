"""concurrency_key: jobs sharing a key never overlap, even under many claimers."""

from __future__ import annotations

import datetime as dt
import itertools
import threading

import pytest
from django.db import connection, connections

from devtools.lab import run_claimers
from django_pgqueue.models import Job
from django_pgqueue.records import JobSpec
from tests.conftest import status_counts
from tests.testapp.tasks import mark

pytestmark = pytest.mark.django_db(transaction=True)


def runs_by_key() -> dict[str, list[tuple[dt.datetime, dt.datetime]]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT label, started, finished FROM testapp_run ORDER BY started")
        rows = cursor.fetchall()
    out: dict[str, list[tuple[dt.datetime, dt.datetime]]] = {}
    for label, started, finished in rows:
        out.setdefault(label.split("/")[0], []).append((started, finished))
    return out


def test_jobs_of_one_key_never_overlap_while_other_keys_proceed() -> None:
    specs = []
    for key in ("acme", "globex"):
        specs += [
            JobSpec.build(mark, [f"{key}/{i}"], {"sleep": 0.01}, concurrency_key=key)
            for i in range(30)
        ]
    specs += [JobSpec.build(mark, [f"free/{i}"], {"sleep": 0.01}) for i in range(60)]
    Job.objects.enqueue_many(specs)

    run_claimers(8, lease=10.0, batch=4)

    assert status_counts() == {"done": 120}
    runs = runs_by_key()
    for key in ("acme", "globex"):
        spans = runs[key]
        assert len(spans) == 30
        for (_, end), (next_start, _) in itertools.pairwise(spans):
            assert next_start >= end, f"two {key} jobs overlapped"
    # Unkeyed jobs did run side by side (the key does not serialise everything).
    free = runs["free"]
    overlaps = sum(1 for (s1, e1), (s2, _) in itertools.pairwise(free) if s2 < e1)
    assert overlaps > 0


def test_racing_claims_never_hold_two_jobs_of_one_key() -> None:
    """Many threads claim at the same instant; the database settles the race."""
    Job.objects.enqueue_many(
        JobSpec.build(mark, [f"k/{i}"], concurrency_key="k") for i in range(40)
    )
    barrier = threading.Barrier(8)
    claimed: list[int] = []
    lock = threading.Lock()

    def claimer(n: int) -> None:
        try:
            barrier.wait()
            jobs = Job.objects.claim(f"racer-{n}", limit=5)
            with lock:
                claimed.extend(j.id for j in jobs)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(claimed) == 1
    assert Job.objects.running().count() == 1
