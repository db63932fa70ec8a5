"""``PGQUEUE["DATABASE"]`` names another alias than ``default``: every table of the
app is read and written there too (the admin, ``Job.objects.filter()``, an instance
saved), not only where enqueue writes and workers claim. Subprocesses whose
``default`` is a database of its own and whose ``jobs`` alias is the test database."""

from __future__ import annotations

import json
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from tests.worker.conftest import django_command

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def jobs_elsewhere(db_url: str) -> Iterator[dict[str, str]]:
    """The environment of such a subprocess, its ``default`` database migrated."""
    other = f"{connection.settings_dict['NAME']}_web"
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
        yield env
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{other}" WITH (FORCE)')


def probe(db_url: str, env: dict[str, str], script: str) -> list[str]:
    """The lines ``script`` prints, run by ``manage.py shell`` in the subprocess."""
    done = django_command(db_url, "shell", "-v", "0", "-c", script, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()


READS = """
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


def test_the_admin_and_the_managers_read_the_queue_database(
    db_url: str, jobs_elsewhere: dict[str, str]
) -> None:
    # Before, only the first read found what enqueue and the registry wrote; the
    # admin's job page redirected, its lists were empty.
    assert probe(db_url, jobs_elsewhere, READS) == ["True True True True", "200 True True True"]


WRITES = """
from django.contrib.auth.models import User
from django.db.models.functions import Now
from django.test import Client
from django_pgqueue.models import Job, Queue, RegisteredWorker
from django_pgqueue.queue.presence import Registration
from tests.testapp.tasks import add

# An admin action: its transaction was default's, its select_for_update the jobs
# database's, outside any transaction there (a 500).
job = add.enqueue(1, 2)
Job.objects.filter(pk=job.pk).update(status="done", done_at=Now())
client = Client(raise_request_exception=False)
client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
page = client.post("/admin/django_pgqueue/job/",
                   {"action": "delete_finished_jobs", "_selected_action": [job.pk]})
print(page.status_code, Job.objects.filter(pk=job.pk).exists())
# A manager's own methods act where db_manager() says, as its querysets read.
manager = RegisteredWorker.objects.db_manager("default")
manager.register(
    Registration(worker="w-default", hostname="h", pid=1, queues=None, concurrency=1,
                 version="x", gone_after=3600.0),
    starting=True,
)
print(manager.filter(pk="w-default").exists(), manager.db)
# An instance saved (and deleted) goes where the manager reads.
Queue(name="saved").save()
print(Queue.objects.filter(pk="saved").exists(), Queue.objects.get(pk="saved").delete()[0])
"""


def test_the_admin_actions_managers_and_instances_write_the_queue_database(
    db_url: str, jobs_elsewhere: dict[str, str]
) -> None:
    assert probe(db_url, jobs_elsewhere, WRITES) == ["302 False", "True default", "True 1"]


REFRESH = """
from django.test import override_settings
from django_pgqueue.models import Job, Queue
from tests.testapp.tasks import add


class Everything:  # a project's router (say, a primary/replica one): all on "default"
    def db_for_read(self, model, **hints):
        return "default"

    def db_for_write(self, model, **hints):
        return "default"


job = add.enqueue(1, 2)
with override_settings(DATABASE_ROUTERS=[Everything()]):
    row = Job.objects.get(pk=job.pk)
    Job.objects.filter(pk=job.pk).update(priority=7)
    try:
        row.refresh_from_db()  # where it was read from, as save() and delete() go
        print(row._state.db, row.priority)
    except Exception as exc:
        print(type(exc).__name__)
    saved = Queue(name="q")
    saved.save()  # to "jobs" (OnJobDatabaseModel)
    try:
        saved.refresh_from_db()
        print(saved._state.db)
    except Exception as exc:
        print(type(exc).__name__)
"""


def test_refresh_from_db_reads_where_save_and_delete_write(
    db_url: str,
    jobs_elsewhere: dict[str, str],
) -> None:
    """OnJobDatabaseModel sends save() and delete() to the instance's database (else
    PGQUEUE["DATABASE"]) whatever the routers say; refresh_from_db() still goes
    through _base_manager and the routers: an instance just saved cannot be reloaded."""
    assert probe(db_url, jobs_elsewhere, REFRESH) == ["jobs 7", "jobs"]


def test_a_job_database_not_migrated_is_named_in_the_migrate_to_run(db_url: str) -> None:
    """`manage.py migrate` migrates `default` only: with the job table on another alias,
    each "missing table" message names the command that creates it there."""
    empty = f"{connection.settings_dict['NAME']}_unmigrated"
    server = db_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{empty}"')
        admin.execute(f'CREATE DATABASE "{empty}"')
    env = {
        "PGQUEUE_TEST_DATABASES": json.dumps({"jobs": {"NAME": empty}}),
        "PGQUEUE_TEST_PGQUEUE": json.dumps({"DATABASE": "jobs"}),
    }
    fix = "run `manage.py migrate --database jobs`"
    try:
        stats = django_command(db_url, "queuestats", env=env)
        assert stats.returncode == 1
        assert stats.stderr.strip().endswith(f"does not exist): {fix}"), stats.stderr
        enqueue = django_command(
            db_url, "shell", "-c", "from tests.testapp.tasks import add; add.enqueue(1, 2)", env=env
        )
        assert enqueue.returncode == 1
        assert enqueue.stderr.strip().endswith(fix), enqueue.stderr
        worker = django_command(db_url, "runworker", "--burst", env=env)
        assert worker.returncode == 1
        assert "applied to database 'jobs' (0001_initial, " in worker.stderr
        assert worker.stderr.strip().endswith(fix), worker.stderr
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{empty}" WITH (FORCE)')
