"""What a worker would refuse, enqueue refuses: tasks outside the installed apps."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

from django_pgqueue.backend.compat import InvalidTask
from django_pgqueue.exceptions import InvalidJob
from django_pgqueue.models import Job
from tests.outside.tasks import direct_double, framework_double
from tests.worker.conftest import django_command
from tests.worker.inprocess import worker_thread

pytestmark = pytest.mark.django_db(transaction=True)

FIX = "add 'tests.outside.tasks' to PGQUEUE['TASK_MODULES']"


def test_a_tasks_framework_task_outside_the_apps_is_refused_at_enqueue_with_the_fix() -> None:
    with pytest.raises(InvalidTask, match="which is not in an installed app") as caught:
        framework_double.enqueue(2)
    assert FIX in str(caught.value)
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


NAMED_FIX = "add 'tests.testapp.named' to PGQUEUE['TASK_MODULES']"


@pytest.mark.slow
def test_a_task_named_apart_from_its_module_is_refused_unless_the_worker_imports_it(
    db_url: str,
) -> None:
    """Its path names no module a worker imports, so the worker finds it only if it
    happened to import the module: enqueue took it, and the worker buried it as an
    unknown task (or ran it, depending on what other jobs it had run before)."""
    from tests.testapp.named import renamed

    with pytest.raises(InvalidJob, match="under a name of its own") as caught:
        renamed.enqueue(1)
    assert NAMED_FIX in str(caught.value)
    assert Job.objects.count() == 0
    listed = {"TASK_MODULES": ["tests.testapp.named"]}
    with override_settings(PGQUEUE=listed):
        job = renamed.enqueue(21)
    # A worker process of its own (which imports nothing this test did) runs it.
    result = django_command(
        db_url, "runworker", "--burst", env={"PGQUEUE_TEST_PGQUEUE": json.dumps(listed)}
    )
    assert result.returncode == 0, result.stderr
    row = Job.objects.get(pk=job.pk)
    assert (row.status, row.result) == ("done", 42)


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
    ],
)
def test_a_path_a_worker_would_not_find_is_refused_at_enqueue(path: str, message: str) -> None:
    with pytest.raises(InvalidJob) as refused:
        Job.objects.enqueue(path, [1, 2])
    assert str(refused.value) == message
    assert Job.objects.count() == 0


@pytest.mark.slow
def test_a_path_is_looked_up_where_a_worker_looks_before_it_is_refused(db_url: str) -> None:
    """A task with a name of its own is found by path in a process that has not
    imported its module yet, as a worker finds it: by importing what it imports at
    start."""
    script = (
        "from django_pgqueue.models import Job\n"
        "print(Job.objects.enqueue('tests.testapp.renamed', [2]).task)\n"
    )
    listed = json.dumps({"TASK_MODULES": ["tests.testapp.named"]})
    done = django_command(
        db_url, "shell", "-v", "0", "-c", script, env={"PGQUEUE_TEST_PGQUEUE": listed}
    )
    assert done.stdout.split() == ["tests.testapp.renamed"], done.stderr
