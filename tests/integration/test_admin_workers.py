"""The admin's workers: a read-only list, links to their running jobs, and a job on a
gone worker shown as such on its page while its lease still holds."""

from __future__ import annotations

import datetime as dt
import io
import json
import re

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from django_pgqueue.admin import display
from django_pgqueue.models import Job, RegisteredWorker
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)
WORKERS = "/admin/django_pgqueue/registeredworker/"
JOBS = "/admin/django_pgqueue/job/"


def register(worker_id: str, *, alive: bool, queues: list[str] | None = None) -> None:
    now = timezone.now()
    RegisteredWorker.objects.create(
        id=worker_id,
        hostname="box",
        pid=42,
        queues=queues,
        concurrency=4,
        version="1.0",
        last_seen=now - dt.timedelta(seconds=5 if alive else 50),
        alive_until=now + dt.timedelta(seconds=30 if alive else -20),
        jobs_running=1,
    )


def test_the_workers_list_is_read_only_and_links_to_their_running_jobs(
    admin_client: Client,
) -> None:
    register("w-alive", alive=True, queues=["mail", "pdf"])
    register("w-gone", alive=False)
    html = admin_client.get(WORKERS).content.decode()
    assert "w-alive" in html
    assert '<span class="pgqueue-worker-alive">alive</span>' in html
    assert '<strong class="pgqueue-worker-gone">gone</strong>' in html
    assert "mail, pdf" in html
    assert "every queue" in html
    assert f'href="{JOBS}?status__exact=running&amp;worker=w-alive"' in html
    assert "Add worker" not in html
    # Times as the job pages show them: with seconds and the zone, on the list and
    # on the worker's page (Django's "Dec. 4, 2026, 5:32 p.m." had neither).
    seen = display.moment(RegisteredWorker.objects.get(pk="w-alive").last_seen)
    assert seen in html
    assert "p.m." not in html
    assert "a.m." not in html
    page = admin_client.get(f"{WORKERS}w-gone/change/").content.decode()
    assert display.moment(RegisteredWorker.objects.get(pk="w-gone").alive_until) in page
    assert "p.m." not in page
    assert "a.m." not in page
    assert 'name="_save"' not in page
    assert admin_client.post(f"{WORKERS}w-gone/delete/", {"post": "yes"}).status_code == 403
    assert RegisteredWorker.objects.count() == 2


def test_the_worker_filter_lists_the_jobs_it_holds(admin_client: Client) -> None:
    register("w-alive", alive=True)
    mine, other = add.enqueue(1, 1), add.enqueue(2, 2)
    Job.objects.claim("w-alive", limit=1)
    Job.objects.claim("w-other", limit=1)
    html = admin_client.get(f"{JOBS}?status__exact=running&worker=w-alive").content.decode()
    assert f'href="{JOBS}{mine.pk}/change/' in html
    assert f'href="{JOBS}{other.pk}/change/' not in html


def test_a_running_job_on_a_gone_worker_says_so_before_its_lease_expires(
    admin_client: Client,
) -> None:
    register("w-gone", alive=False)
    register("w-alive", alive=True)
    stranded, fine = add.enqueue(1, 1), add.enqueue(2, 2)
    Job.objects.claim("w-gone", limit=1, lease=60)
    Job.objects.claim("w-alive", limit=1, lease=60)
    page = admin_client.get(f"{JOBS}{stranded.pk}/change/").content.decode()
    assert f'held by <a href="{WORKERS}w-gone/change/">w-gone</a> for ' in page
    assert (
        "more, but that worker is gone (last seen 50 s ago): the reaper will put the "
        "job back once the lease expires" in page
    )
    page = admin_client.get(f"{JOBS}{fine.pk}/change/").content.decode()
    assert f'held by <a href="{WORKERS}w-alive/change/">w-alive</a> for ' in page
    assert "that worker is gone" not in page


def test_the_job_page_links_to_a_worker_whose_id_looks_like_an_admin_escape(
    admin_client: Client,
) -> None:
    """The admin reads "_2F" in a URL's id as "/": the link went to "worker/a",
    which does not exist."""
    register("worker_2Fa", alive=True)
    job = add.enqueue(1, 1)
    Job.objects.claim("worker_2Fa", limit=1, lease=60)
    page = admin_client.get(f"{JOBS}{job.pk}/change/").content.decode()
    assert f'held by <a href="{WORKERS}worker_5F2Fa/change/">worker_2Fa</a> for ' in page
    worker_page = admin_client.get(f"{WORKERS}worker_5F2Fa/change/")
    assert worker_page.status_code == 200
    assert "worker_2Fa" in worker_page.content.decode()


def test_a_projects_own_admin_site_links_to_its_own_pages(admin_client: Client) -> None:
    """tests/urls.py mounts a second site, "ops", at /ops/ (docs/admin.md)."""
    register("w-alive", alive=True)
    job = add.enqueue(1, 1)
    Job.objects.claim("w-alive", limit=1, lease=60)
    html = admin_client.get("/ops/django_pgqueue/registeredworker/").content.decode()
    assert 'href="/ops/django_pgqueue/job/?status__exact=running&amp;worker=w-alive"' in html
    page = admin_client.get(f"/ops/django_pgqueue/job/{job.pk}/change/").content.decode()
    assert 'held by <a href="/ops/django_pgqueue/registeredworker/w-alive/change/">' in page


def test_a_gone_workers_running_count_is_what_the_table_still_holds(admin_client: Client) -> None:
    """Its last heartbeat said 1; once the reaper has given its job back it runs
    none, on the list and on its page, as ``queuestats --json`` says."""
    register("w-gone", alive=False)
    RegisteredWorker.objects.filter(pk="w-gone").update(jobs_running=3)
    register("w-alive", alive=True)
    add.enqueue(1, 1)
    (claimed,) = Job.objects.claim("w-gone", limit=1)

    def shown(worker_id: str) -> list[str]:
        link = f'href="{JOBS}?status__exact=running&amp;worker={worker_id}">'
        html = admin_client.get(WORKERS).content.decode()
        page = admin_client.get(f"{WORKERS}{worker_id}/change/").content.decode()
        return [text.split(link, 1)[1].split("<", 1)[0] for text in (html, page)]

    assert shown("w-gone") == ["1", "1"]
    assert shown("w-alive") == ["1", "1"]  # a live worker's count is its own
    Job.objects.release("w-gone", [claimed.key])  # as the reaper would, in the end
    assert shown("w-gone") == ["0", "0"]
    page = admin_client.get(f"{WORKERS}w-gone/change/").content.decode()
    assert ">3<" not in page  # the stale heartbeat's count is not shown beside it


def test_a_registry_row_written_by_hand_fails_no_page_and_no_queuestats(
    admin_client: Client,
) -> None:
    # Times Python cannot hold and queues that are not a list of names: each made
    # the workers list, the worker's page and every form of queuestats fail.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pgqueue_worker (id, hostname, pid, queues, concurrency, version, "
            "started_at, last_seen, alive_until) VALUES "
            "('w-inf', 'h', 1, '[1, null, \"mail\"]', 1, 'v', '-infinity', now(), 'infinity'), "
            "('w-str', 'h', 1, '\"defaults\"', 1, 'v', now(), 'infinity', "
            "now() + interval '1 hour'), "
            "('w-num', 'h', 1, '5', 1, 'v', now(), now(), now() + interval '1 hour')"
        )
    add.using(queue="default").enqueue(1, 2)
    html = admin_client.get(WORKERS).content.decode()
    assert "1, null, mail" in html
    assert "&quot;defaults&quot;" in html
    for worker in ("w-inf", "w-str", "w-num"):
        assert admin_client.get(f"{WORKERS}{worker}/change/").status_code == 200
        assert admin_client.get(f"{WORKERS}{worker}/history/").status_code == 200
    out = io.StringIO()
    call_command("queuestats", stdout=out)
    assert re.search(r"w-inf +gone  1,null,mail ", out.getvalue())  # infinity: no heartbeat
    out = io.StringIO()
    call_command("queuestats", "--json", stdout=out)
    listed = {w["id"]: w for w in json.loads(out.getvalue())["workers"]}
    assert listed["w-inf"]["queues"] == ["1", "null", "mail"]
    assert listed["w-inf"]["started_at"].startswith("0001-01-02")
    assert listed["w-num"]["queues"] == ["5"]
    # "defaults" (a string) is no list of queues: it serves no queue, not "default"
    # as a substring of it.
    with pytest.raises(CommandError, match=r"queue default: jobs are ready .* no live worker"):
        call_command("queuestats", "--check", stdout=io.StringIO())


def test_a_worker_or_schedule_id_holding_nul_is_one_that_does_not_exist(
    admin_client: Client,
) -> None:
    # PostgreSQL refuses NUL in text: each page was a 500, not "does not exist".
    register("w-alive", alive=True)
    for model in ("registeredworker", "schedule"):
        for page in ("change/", "history/"):
            url = f"/admin/django_pgqueue/{model}/w%00/{page}"
            response = admin_client.get(url, follow=True)
            assert response.redirect_chain == [("/admin/", 302)], url
            (message,) = [str(m) for m in response.context["messages"]]
            assert "with ID \u201cw\x00\u201d doesn\u2019t exist." in message, url
        # Nothing is deleted here: refused, as for any id.
        assert admin_client.get(f"/admin/django_pgqueue/{model}/w%00/delete/").status_code == 403


def test_a_nul_in_a_worker_or_schedule_lists_filter_matches_no_row(admin_client: Client) -> None:
    # Django lets a list filter on any of the model's own fields by the URL
    # (?id__exact=...); PostgreSQL refuses NUL in text: each list was a 500.
    register("w-alive", alive=True)
    for url in (
        "/admin/django_pgqueue/registeredworker/?id__exact=w%00",
        "/admin/django_pgqueue/registeredworker/?hostname=%00",
        "/admin/django_pgqueue/schedule/?name=%00",
        "/admin/django_pgqueue/schedule/?name__exact=a%00b",
    ):
        response = admin_client.get(url)
        assert response.status_code == 200, url
        assert list(response.context["cl"].result_list) == [], url
    listed = admin_client.get("/admin/django_pgqueue/registeredworker/?id__exact=w-alive")
    assert [w.pk for w in listed.context["cl"].result_list] == ["w-alive"]
