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


def test_racing_claimers_are_not_sent_away_empty_while_jobs_are_claimable() -> None:
    """16 claimers at the same instant over 8 keys (and unkeyed jobs below them): each
    loser of a key's race retries with a snapshot that sees the key taken. After
    five tries a claim gave up and returned nothing, with jobs ready, which a
    --burst worker takes for an empty queue."""
    specs = [
        JobSpec.build(mark, [f"k{key}/{n}"], concurrency_key=f"k{key}", priority=50 - key)
        for key in range(8)
        for n in range(16)
    ]
    specs += [JobSpec.build(mark, [f"free/{n}"], priority=-50) for n in range(16)]
    Job.objects.enqueue_many(specs)
    barrier = threading.Barrier(16)
    sizes: list[int] = []
    lock = threading.Lock()

    def claimer(n: int) -> None:
        try:
            barrier.wait()
            jobs = Job.objects.claim(f"racer-{n}", limit=1)
            with lock:
                sizes.append(len(jobs))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sizes == [1] * 16
    running = Job.objects.running()
    assert running.count() == 16
    keys = [key for key in running.values_list("concurrency_key", flat=True) if key]
    assert sorted(keys) == [f"k{key}" for key in range(8)]  # each key once
