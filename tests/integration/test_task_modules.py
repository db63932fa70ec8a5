"""What a worker would refuse, enqueue refuses: tasks outside the installed apps."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

from django_pgqueue import registry
from django_pgqueue.backend.compat import InvalidTask
from django_pgqueue.exceptions import InvalidJob, UnknownTask
from django_pgqueue.models import Job
from tests.outside.tasks import direct_double, framework_double
from tests.testapp import djtasks
from tests.worker.conftest import django_command
from tests.worker.inprocess import worker_thread

pytestmark = pytest.mark.django_db(transaction=True)

FIX = "add 'tests.outside.tasks' to PGQUEUE['TASK_MODULES']"


def test_a_tasks_framework_task_outside_the_apps_is_refused_at_enqueue_with_the_fix() -> None:
    with pytest.raises(InvalidTask, match="which is not in an installed app") as caught:
        framework_double.enqueue(2)
    assert FIX in str(caught.value)
    # tests/outside/tasks.py: an app's tasks module, maybe of an app left out.
    assert "add 'tests.outside' to INSTALLED_APPS if it is an app of yours" in str(caught.value)
    assert Job.objects.count() == 0


def test_a_direct_task_outside_the_apps_is_refused_at_enqueue_with_the_fix() -> None:
    with pytest.raises(InvalidJob, match=FIX.replace("[", r"\[").replace("]", r"\]")):
        direct_double.enqueue(2)
    assert Job.objects.count() == 0


@pytest.mark.slow
def test_listed_in_task_modules_both_are_accepted_and_run() -> None:
    with override_settings(PGQUEUE={"TASK_MODULES": ["tests.outside"], "BACKOFF_BASE": 0.05}):
        framework = framework_double.enqueue(4)
        direct = direct_double.enqueue(5)
        with worker_thread(burst=True) as worker:
            assert worker.join(30) == 0
    assert Job.objects.get(pk=int(framework.id)).result == 8
    assert Job.objects.get(pk=direct.pk).result == 10


@pytest.mark.parametrize(
    ("path", "message"),
    [
        # A function that is not a task, and a typo of a task's name or module: each
        # was accepted, and the job then buried by the worker as an UnknownTask.
        ("tests.testapp.tasks.record", "'tests.testapp.tasks.record' is not a registered task"),
        (
            "tests.testapp.tasks.ad",
            "'tests.testapp.tasks.ad' is not a registered task (did you mean "
            "'tests.testapp.tasks.add'?)",
        ),
        (
            "tests.testapp.taskz.add",
            "task 'tests.testapp.taskz.add': there is no module 'tests.testapp.taskz' (did you "
            "mean 'tests.testapp.tasks.add'?)",
        ),
        # A function of a module outside the apps that is imported here, so it can be
        # told no task: adding 'json' to TASK_MODULES (as was advised) would not help.
        (
            "json.dumps",
            "'json.dumps' is not a registered task: 'json' holds a function by that name, "
            "which is not a task. A worker runs only a function declared with "
            "@django_pgqueue.task (or django.tasks' @task with PgQueueBackend), in a module "
            "of an installed app or of PGQUEUE['TASK_MODULES']",
        ),
        # Django's own mail function (a Celery habit): adding 'django.core.mail' to
        # TASK_MODULES would not help either. Only the shell's module is told apart.
        (
            "django.core.mail.send_mail",
            "'django.core.mail.send_mail' is not a registered task: 'django.core.mail' holds "
            "a function by that name, which is not a task. A worker runs only a function "
            "declared with @django_pgqueue.task (or django.tasks' @task with PgQueueBackend), "
            "in a module of an installed app or of PGQUEUE['TASK_MODULES']",
        ),
        (
            "json.dumpz",
            "'json.dumpz' is not a registered task: 'json' holds nothing by that name. A "
            "worker runs only a function declared with @django_pgqueue.task (or "
            "django.tasks' @task with PgQueueBackend), in a module of an installed app or of "
            "PGQUEUE['TASK_MODULES']",
        ),
    ],
)
def test_a_path_a_worker_would_not_find_is_refused_at_enqueue(path: str, message: str) -> None:
    with pytest.raises(InvalidJob) as refused:
        Job.objects.enqueue(path, [1, 2])
    assert str(refused.value) == message
    assert Job.objects.count() == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("module", "name", "shown"),
    [
        # A name of its own naming no module that exists, inside an installed app.
        ("tests.testapp.named", "tests.testapp.mail.renamed", "emails 7 4"),
        # One outside every app: it was refused as "not in an installed app".
        ("tests.outside.mailer", "mailer.send", "emails 3 6"),
    ],
)
def test_a_path_is_looked_up_where_a_worker_looks_before_it_is_refused(
    db_url: str, module: str, name: str, shown: str
) -> None:
    """A task with a name of its own is found by path in a process that has not
    imported its module yet, as a worker finds it: by importing what it imports at
    start. It was refused ("there is no module"), and once found its own options
    were dropped."""
    script = (
        "from django_pgqueue.models import Job\n"
        f"job = Job.objects.enqueue({name!r}, [2])\n"
        "print(job.task, job.queue, job.max_attempts)\n"
    )
    listed = {"PGQUEUE_TEST_PGQUEUE": json.dumps({"TASK_MODULES": [module]})}
    done = django_command(db_url, "shell", "-v", "0", "-c", script, env=listed)
    queue, max_attempts, result = shown.split()
    assert done.stdout.split() == [name, queue, max_attempts], done.stderr
    ran = django_command(db_url, "runworker", "--burst", env=listed)
    assert ran.returncode == 0, ran.stderr
    assert list(Job.objects.values_list("status", "result")) == [("done", int(result))]


def test_a_path_whose_module_fails_to_import_here_is_left_to_the_workers() -> None:
    """A tasks module whose own code fails at import in this process (a setting
    only the workers have): enqueue by path raised that module's RuntimeError. It
    accepts the job, as for an ImportError; a worker that cannot import it either
    buries the job with the reason."""
    job = Job.objects.enqueue("tests.testapp.broken_tasks.send", [1])
    assert Job.objects.values_list("task", "status").get(pk=job.pk) == (
        "tests.testapp.broken_tasks.send",
        "queued",
    )


def test_a_module_that_fails_to_import_half_way_registers_no_task() -> None:
    """``@task`` registers as the module runs: a task declared above the line that
    failed the import stayed registered, and a worker ran it (resolve, loaded and
    runnables all found it) though its module never imported. Enqueue by path
    leaves it to the workers, as for any module that fails to import here."""
    path = "tests.testapp.half_tasks.early"
    job = Job.objects.enqueue(path)
    assert job.task == path
    for _ in range(2):  # a second import fails the same way
        with pytest.raises(UnknownTask, match="NameError: name 'MAIL_SETTINGS'"):
            registry.resolve(path)
        assert registry.loaded(path, importing=True) is None
        assert path not in registry.runnables()


def test_a_tasks_framework_task_enqueued_by_path_keeps_its_own_options() -> None:
    """The direct API given the path of a Tasks-framework Task: the job took the
    direct API's defaults (queue "default", priority 0), not the Task's."""
    plain = Job.objects.enqueue("tests.testapp.djtasks.on_queue_1")
    assert (plain.queue, plain.priority) == ("queue_1", 10)
    chosen = Job.objects.enqueue("tests.testapp.djtasks.on_queue_1", priority=-5)
    assert (chosen.queue, chosen.priority) == ("queue_1", -5)
    # A PgQueueTask's delivery options and retry policy, as its own enqueue() has them.
    by_path = Job.objects.enqueue("tests.testapp.djtasks.fails_with", ["boom"])
    itself = djtasks.fails_with.enqueue("boom")
    fields = ("queue", "priority", "max_attempts", "retry_policy")
    assert Job.objects.values_list(*fields).get(pk=by_path.pk) == Job.objects.values_list(
        *fields
    ).get(pk=int(itself.id))
    assert Job.objects.get(pk=by_path.pk).max_attempts == 3


def test_the_add_app_hint_does_not_name_an_app_installed_under_a_longer_path() -> None:
    """check_importable's new hint: for "shop.tasks" it says "add 'shop' to
    INSTALLED_APPS". The example project installs "example_project.shop" (label
    "shop"): a task imported as shop.tasks (example_project/ on sys.path) is the
    same app imported under a second name, and adding 'shop' makes Django fail
    at startup ("Application labels aren't unique, duplicates: shop"). The hint
    should point at the installed app (import it as example_project.shop.tasks)."""
    with pytest.raises(UnknownTask) as caught:
        registry.check_importable("shop.tasks.send_receipt")
    message = str(caught.value)
    assert "add 'shop' to INSTALLED_APPS" not in message, message
    assert "example_project.shop" in message, message
