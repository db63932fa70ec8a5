"""``PGQUEUE["DATABASE"]`` names another alias than ``default``: every table of the
app is read there too (the admin, ``Job.objects.filter()``), not only where
enqueue writes and workers claim. A subprocess whose ``default`` is a database of
its own and whose ``jobs`` alias is the test database."""

from __future__ import annotations

import json

import psycopg
import pytest
from django.db import connection

from tests.worker.conftest import django_command

pytestmark = pytest.mark.django_db(transaction=True)

PROBE = """
from django.contrib.auth.models import User
from django.test import Client
from django_pgqueue.models import Job, Queue, RegisteredWorker, Schedule
from django_pgqueue.queue.presence import Registration
from tests.testapp.tasks import add

job = add.enqueue(1, 2)
RegisteredWorker.objects.register(
    Registration(worker="jobs-worker", hostname="h", pid=1, queues=None, concurrency=1,
                 version="x", gone_after=3600.0),
    starting=True,
)
Job.objects.pause_queue("mail")
Schedule.objects.create(name="nightly", task="tests.testapp.tasks.add", expression="0 3 * * *",
                        timezone="UTC")
print(Job.objects.filter(pk=job.pk).exists(), Queue.objects.filter(pk="mail").exists(),
      RegisteredWorker.objects.filter(pk="jobs-worker").exists(),
      Schedule.objects.filter(pk="nightly").exists())
client = Client()
client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
admin = "/admin/django_pgqueue/"
page = client.get(f"{admin}job/{job.pk}/change/")
print(page.status_code, "jobs-worker" in client.get(f"{admin}registeredworker/").content.decode(),
      f"{admin}job/{job.pk}/change/" in client.get(f"{admin}job/").content.decode(),
      "nightly" in client.get(f"{admin}schedule/").content.decode())
"""


def test_the_admin_and_the_managers_read_the_queue_database(db_url: str) -> None:
    test_db = connection.settings_dict["NAME"]
    other = f"{test_db}_web"
    server = db_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{other}"')
        admin.execute(f'CREATE DATABASE "{other}"')
    env = {
        # "jobs" is the test database; "default" (users, sessions) is another one.
        "PGQUEUE_TEST_DATABASES": json.dumps({"jobs": {}, "default": {"NAME": other}}),
        "PGQUEUE_TEST_PGQUEUE": json.dumps({"DATABASE": "jobs"}),
    }
    try:
        migrated = django_command(db_url, "migrate", "-v", "0", env=env)
        assert migrated.returncode == 0, migrated.stderr
        done = django_command(db_url, "shell", "-v", "0", "-c", PROBE, env=env)
        assert done.returncode == 0, done.stderr
        # Before, only the first read found what enqueue and the registry wrote;
        # the admin's job page redirected, its lists were empty.
        assert done.stdout.split("\n")[:2] == ["True True True True", "200 True True True"], (
            done.stdout + done.stderr
        )
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{other}" WITH (FORCE)')
