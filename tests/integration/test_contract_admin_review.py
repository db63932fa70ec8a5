"""The admin driven as an operator would, against issue 5's contract: each action's
rows and messages, mixed selections, and what a view-only user cannot change."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.test import Client

from django_pgqueue.models import Job
from django_pgqueue.records import JobSpec
from tests.conftest import run_counts, status_counts
from tests.integration.test_admin import URL, jobs, post_action, staff_client  # noqa: F401
from tests.testapp.tasks import mark
from tests.worker.conftest import WorkerProcess, start_worker  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def statuses(found: dict[str, Job]) -> dict[str, str]:
    return {name: Job.objects.get(pk=job.pk).status for name, job in found.items()}


def test_retry_of_a_mixed_selection_changes_only_the_eligible_rows(
    admin_client: Client,
    jobs: dict[str, Job],  # noqa: F811
) -> None:
    ids = sorted(job.pk for job in jobs.values())
    shown = post_action(admin_client, "retry_jobs", ids)
    d, n, r, w, q = (jobs[k].pk for k in ("dead", "done", "running", "waiting", "ready"))
    assert shown == [
        "Retried 2 jobs: queued now, attempts reset.",
        "Skipped 3 jobs that cannot be retried (only dead and cancelled jobs, and queued "
        "jobs waiting for a later run_at, can be; one whose unique_key is live again "
        f"cannot): #{n} done, #{r} running, #{q} queued.",
    ]
    assert statuses(jobs) == {
        "dead": "queued",
        "done": "done",
        "running": "running",
        "waiting": "queued",
        "ready": "queued",
    }
    dead = Job.objects.get(pk=d)
    assert (dead.attempts, len(dead.errors)) == (0, 1)
    assert Job.objects.get(pk=r).locked_by == "worker-7"
    logged = LogEntry.objects.filter(action_flag=CHANGE).values_list("object_id", flat=True)
    assert sorted(str(pk) for pk in logged) == sorted([str(d), str(w)])


def test_retry_of_one_running_job_changes_nothing(
    admin_client: Client,
    jobs: dict[str, Job],  # noqa: F811
) -> None:
    running = jobs["running"].pk
    assert post_action(admin_client, "retry_jobs", [running]) == [
        "Skipped 1 job that cannot be retried (only dead and cancelled jobs, and queued "
        "jobs waiting for a later run_at, can be; one whose unique_key is live again "
        f"cannot): #{running} running."
    ]
    assert statuses(jobs)["running"] == "running"
    assert not LogEntry.objects.exists()


def test_cancel_of_queued_running_and_done_jobs(
    admin_client: Client,
    jobs: dict[str, Job],  # noqa: F811
) -> None:
    picked = [jobs[k].pk for k in ("ready", "running", "done")]
    shown = post_action(admin_client, "cancel_jobs", picked, reason="night")
    why = "night (by admin in the admin)"
    assert shown == [
        f"Cancelled 1 job: {why}.",
        f"Skipped 1 job that was not queued or running: #{jobs['done'].pk} done.",
        f"Asked 1 running job to stop: {why}. Each ends cancelled once its task stops; "
        "one that finishes first ends as it finished.",
    ]
    assert statuses(jobs) == {
        "dead": "dead",
        "done": "done",
        "running": "running",
        "waiting": "queued",
        "ready": "cancelled",
    }
    running = Job.objects.get(pk=jobs["running"].pk)
    assert running.cancel_reason == why
    assert Job.objects.get(pk=jobs["ready"].pk).last_error == f"Cancelled: {why}"
    assert LogEntry.objects.filter(action_flag=CHANGE).count() == 2


def test_delete_of_a_mixed_selection_deletes_only_finished_jobs(
    admin_client: Client,
    jobs: dict[str, Job],  # noqa: F811
) -> None:
    ids = sorted(job.pk for job in jobs.values())
    shown = post_action(admin_client, "delete_finished_jobs", ids)
    r, w, q = (jobs[k].pk for k in ("running", "waiting", "ready"))
    assert shown == [
        "Deleted 2 jobs.",
        "Skipped 3 jobs that were not finished (only done, dead and cancelled jobs can be): "
        f"#{r} running, #{w} queued, #{q} queued.",
    ]
    assert status_counts() == {"running": 1, "queued": 2}
    assert LogEntry.objects.filter(action_flag=DELETION).count() == 2


def test_a_view_only_user_changes_nothing_by_any_post(jobs: dict[str, Job]) -> None:  # noqa: F811
    viewer = staff_client("viewer", "view_job")
    before = statuses(jobs)
    ids = [job.pk for job in jobs.values()]
    for action in ("retry_jobs", "cancel_jobs", "delete_finished_jobs", "delete_selected"):
        # No action is offered: the POST is only the list again, with no message.
        assert post_action(viewer, action, ids) == []
    for job in jobs.values():
        for button in ("retry", "cancel"):
            assert viewer.post(f"{URL}{job.pk}/{button}/").status_code == 403
        assert viewer.post(f"{URL}{job.pk}/delete/", {"post": "yes"}).status_code == 403
        assert viewer.post(f"{URL}{job.pk}/change/", {"status": "done"}).status_code == 403
    assert statuses(jobs) == before
    assert not LogEntry.objects.exists()


ODD_LISTS = (
    "?p=999",
    "?p=-1",
    "?p=abc",
    "?o=3",
    "?q=%23",
    "?q=9999999999999999999",
    "?q=%00",
    "?status=%00",
    "?queue=%00",
    "?worker=%00",
    "?schedule=%00",
    "?id__gt=1",
    "?q=a%20b",
)
ODD_PAGES = (
    "99999999999999999999/change/",
    "abc/change/",
    "%00/change/",
    "-1/history/",
    "%00/delete/",
)


def test_odd_urls_answer_without_a_server_error(
    admin_client: Client,
    jobs: dict[str, Job],  # noqa: F811
) -> None:
    for query in ODD_LISTS:
        assert admin_client.get(URL + query).status_code == 200, query
    for page in ODD_PAGES:
        assert admin_client.get(URL + page).status_code == 302, page
    for page in ("99999999999999999999/retry/", "abc/cancel/", "%00/retry/"):
        assert admin_client.post(URL + page).status_code == 302, page
    for other in ("registeredworker", "schedule"):
        for query in ("?q=%00", "?p=99"):
            assert admin_client.get(f"/admin/django_pgqueue/{other}/{query}").status_code == 200
    assert statuses(jobs)["dead"] == "dead"


# -- against a real worker subprocess (slow: the embedded PostgreSQL 18 only) -----------


def _counted(shown: list[str], prefix: str) -> int:
    import re

    for line in shown:
        if line.startswith(prefix):
            found = re.match(r"\D*(\d+) (?:running )?job", line)
            assert found is not None, line
            return int(found[1])
    return 0


@pytest.mark.slow
def test_cancel_and_retry_race_a_running_worker_without_a_job_running_twice(
    admin_client: Client,
    start_worker: Callable[..., WorkerProcess],  # noqa: F811
) -> None:
    specs = [JobSpec.build(mark, (f"race-{i}", 0.03)) for i in range(300)]
    ids = Job.objects.enqueue_many(specs)
    worker = start_worker("--concurrency", "4", "--burst")
    worker.wait_for_output("[queues]")
    deadline = time.monotonic() + 20
    while not run_counts("race-") and time.monotonic() < deadline:  # draining: race it
        time.sleep(0.005)
    cancelled = asked = skipped = 0
    for start in range(0, len(ids), 20):
        shown = post_action(admin_client, "cancel_jobs", ids[start : start + 20], reason="race")
        cancelled += _counted(shown, "Cancelled ")
        asked += _counted(shown, "Asked ")
        skipped += _counted(shown, "Skipped ")
    assert worker.wait(60) == 0
    assert cancelled + asked + skipped == len(ids)
    assert cancelled, "the cancels did not race the worker"
    assert asked or skipped, "the cancels did not race the worker"
    runs = run_counts("race-")
    label = {pk: f"race-{i}" for i, pk in enumerate(ids)}
    final = dict(Job.objects.filter(pk__in=ids).values_list("id", "status"))
    logged = {
        int(str(pk))
        for pk in LogEntry.objects.filter(change_message__startswith="Cancelled:").values_list(
            "object_id", flat=True
        )
    }
    assert len(logged) == cancelled
    # Every job the action cancelled stayed cancelled and never ran; one asked to stop
    # either never started (cancelled) or finished (done); none ran twice.
    assert all(final[pk] == "cancelled" and not runs[label[pk]] for pk in logged)
    assert set(final.values()) <= {"done", "cancelled"}
    assert all(runs[label[pk]] == (final[pk] == "done") for pk in ids)
    stopped = [pk for pk, status in final.items() if status == "cancelled"]
    # Retry them all while a second worker drains: each runs exactly once more.
    worker = start_worker("--concurrency", "4", "--burst")
    shown = post_action(admin_client, "retry_jobs", ids)
    assert shown[0] == f"Retried {len(stopped)} jobs: queued now, attempts reset."
    assert shown[1].startswith(f"Skipped {len(ids) - len(stopped)} jobs that cannot be retried")
    assert worker.wait(60) == 0
    leftover = start_worker("--burst")  # the first may have finished before the retry
    assert leftover.wait(60) == 0
    assert status_counts() == {"done": len(ids)}
    assert run_counts("race-") == {label[pk]: 1 for pk in ids}
