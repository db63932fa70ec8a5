"""A task with a name of its own is found by a worker only if what the worker
imports runs its ``@task``: declared in a module of an installed app that is not
its tasks.py, it was accepted by enqueue and buried by every worker."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.core import checks
from django.test import override_settings

from django_pgqueue import custom_names, enqueue, registry, task
from django_pgqueue.exceptions import InvalidJob
from django_pgqueue.models import Job
from django_pgqueue.testing import run_jobs
from tests.worker.conftest import ROOT, django_command

pytestmark = pytest.mark.django_db(transaction=True)

DELIVER = (
    "task 'mailer.deliver' has a name of its own and is declared in 'tests.testapp.mailing', "
    "which a worker does not import: at start it imports each installed app's tasks module "
    "and PGQUEUE['TASK_MODULES'], and for a path it has not seen that path's module only in "
    "an installed app ('mailer' is not), so it would bury the job (UnknownTask): move it "
    "into tests.testapp.tasks (or import it there), or add 'tests.testapp.mailing' to "
    "PGQUEUE['TASK_MODULES']"
)
RENAMED_PATH = "tests.testapp.mail.renamed"
RENAMED = (
    "task 'tests.testapp.mail.renamed' has a name of its own and is declared in "
    "'tests.testapp.named', which a worker does not import: at start it imports each "
    "installed app's tasks module and PGQUEUE['TASK_MODULES'], and for a path it has not "
    "seen that path's module ('tests.testapp.mail'), which does not declare it, so it would "
    "bury the job (UnknownTask): move it into tests.testapp.tasks (or import it there), or "
    "add 'tests.testapp.named' to PGQUEUE['TASK_MODULES']"
)


MISPLACED = {"tests.testapp.mailing": "mailer.deliver", "tests.testapp.named": RENAMED_PATH}


@pytest.fixture
def misplaced() -> Iterator[SimpleNamespace]:
    """The two test-app modules that declare a task where no worker looks, imported
    for this test only: left registered, they would be reported (E006) by every
    other test of the session that runs ``manage.py check`` in process."""
    modules = {name: importlib.import_module(name) for name in MISPLACED}
    yield SimpleNamespace(
        deliver=modules["tests.testapp.mailing"].deliver,
        renamed=modules["tests.testapp.named"].renamed,
    )
    for name, path in MISPLACED.items():
        sys.modules.pop(name, None)
        registry._registry.pop(path, None)
        custom_names._declared_by.pop(path, None)
        custom_names._found.discard(path)


@pytest.mark.parametrize(
    "give",
    [
        lambda m: m.deliver.enqueue(2),
        lambda m: m.deliver.using(priority=5).enqueue(2),
        lambda m: enqueue("mailer.deliver", [2]),  # by path, as the web process knows it
        lambda m: Job.objects.enqueue(m.deliver, [2]),
    ],
)
def test_a_custom_name_in_a_module_no_worker_imports_is_refused_at_enqueue(
    give: object, misplaced: SimpleNamespace
) -> None:
    for _ in range(2):  # refused every time, not only the first
        with pytest.raises(InvalidJob) as refused:
            give(misplaced)  # type: ignore[operator]
        assert str(refused.value) == f"{DELIVER} (django_pgqueue.E006)"
    assert Job.objects.count() == 0


def test_a_custom_name_naming_a_missing_module_of_the_app_is_refused_too(
    misplaced: SimpleNamespace,
) -> None:
    with pytest.raises(InvalidJob) as refused:
        misplaced.renamed.enqueue(2)
    assert str(refused.value) == f"{RENAMED} (django_pgqueue.E006)"
    assert Job.objects.count() == 0


def test_check_reports_them_before_deploy(misplaced: SimpleNamespace) -> None:
    found = [m for m in checks.run_checks() if m.id == "django_pgqueue.E006"]
    assert [(m.level, m.msg) for m in found] == [
        (checks.ERROR, DELIVER),
        (checks.ERROR, RENAMED),
    ]
    with override_settings(SILENCED_SYSTEM_CHECKS=["django_pgqueue.E006"]):
        assert misplaced.deliver.enqueue(1).task == "mailer.deliver"  # silenced, as E103 is


def test_the_fix_the_message_gives_lets_a_real_worker_run_them(
    db_url: str, misplaced: SimpleNamespace
) -> None:
    """With the modules in TASK_MODULES enqueue accepts the jobs and a real worker
    runs them. Before, enqueue accepted them without it, and the worker buried each
    (UnknownTask: 'mailer.deliver' is not a registered task, ...)."""
    listed = ["tests.testapp.mailing", "tests.testapp.named"]
    with override_settings(PGQUEUE={"TASK_MODULES": listed}):
        ids = [misplaced.deliver.enqueue(2).pk, misplaced.renamed.enqueue(3).pk]
    env = {"PGQUEUE_TEST_PGQUEUE": json.dumps({"TASK_MODULES": listed})}
    ran = django_command(db_url, "runworker", "--burst", env=env)
    assert ran.returncode == 0, ran.stderr
    rows = Job.objects.filter(pk__in=ids).order_by("pk").values_list("task", "status", "result")
    assert list(rows) == [("mailer.deliver", "done", 10), ("tests.testapp.mail.renamed", "done", 6)]


def test_manage_py_check_reports_one_its_urlconf_imports(db_url: str, tmp_path: Path) -> None:
    """``check`` sees the tasks of the modules its process imports: a URLconf's views,
    say. It said nothing, and the deploy buried the jobs."""
    (tmp_path / "cn_urls.py").write_text("import tests.testapp.mailing  # noqa\nurlpatterns = []\n")
    (tmp_path / "cn_settings.py").write_text(
        "from tests.settings import *  # noqa\nROOT_URLCONF = 'cn_urls'\n"
    )
    env = {"DJANGO_SETTINGS_MODULE": "cn_settings", "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    done = django_command(db_url, "check", env=env)
    assert done.returncode == 1
    assert f"?: (django_pgqueue.E006) {DELIVER}" in done.stderr, done.stderr
    env["PGQUEUE_TEST_PGQUEUE"] = json.dumps({"TASK_MODULES": ["tests.testapp.mailing"]})
    fixed = django_command(db_url, "check", env=env)
    assert (fixed.returncode, fixed.stderr) == (0, "")


APP = {
    "__init__.py": "",
    # Re-exported by the app's tasks.py, but imported first by the web process's views.
    "helpers.py": "from django_pgqueue import task\n\n\n"
    "@task(name='cnmail.send')\ndef send(x):\n    return x + 1\n",
    # Imported only through a module that the app's tasks.py imports.
    "deep.py": "from django_pgqueue import task\n\n\n"
    "@task(name='cnmail.deep')\ndef deep(x):\n    return x + 2\n",
    "middle.py": "from cnapp import deep  # noqa\n",
    # Imported by the app's tasks.py as `import cnapp.plain`, which binds only `cnapp`.
    "plain.py": "from django_pgqueue import task\n\n\n"
    "@task(name='cnmail.plain')\ndef plain(x):\n    return x + 3\n",
    "tasks.py": "import cnapp.plain  # noqa\nfrom cnapp import middle  # noqa\n"
    "from cnapp.helpers import send  # noqa\n",
}


def _app(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "cnapp").mkdir()
    for name, text in APP.items():
        (tmp_path / "cnapp" / name).write_text(text)
    (tmp_path / "cn_app_settings.py").write_text(
        "from tests.settings import *  # noqa\nINSTALLED_APPS = [*INSTALLED_APPS, 'cnapp']\n"
    )
    return {"DJANGO_SETTINGS_MODULE": "cn_app_settings", "PYTHONPATH": f"{tmp_path}:{ROOT}"}


def test_a_custom_name_a_worker_declares_too_is_accepted_and_run(
    db_url: str, tmp_path: Path
) -> None:
    """Declared in a module the app's tasks.py imports (directly, or through another
    module), or re-exports: a worker declares it too, so enqueue accepts it, here in
    a process that imported the module first, and a real worker runs it."""
    env = _app(tmp_path)
    script = (
        "from django_pgqueue import enqueue\n"
        "from cnapp.helpers import send\n"  # as a view imports it, before any tasks.py
        "print(send.enqueue(1).task, enqueue('cnmail.deep', [1]).task)\n"
    )
    done = django_command(db_url, "shell", "-v", "0", "-c", script, env=env)
    assert done.stdout.split() == ["cnmail.send", "cnmail.deep"], done.stderr
    ran = django_command(db_url, "runworker", "--burst", env=env)
    assert ran.returncode == 0, ran.stderr
    rows = Job.objects.order_by("task").values_list("task", "status", "result")
    assert list(rows) == [("cnmail.deep", "done", 3), ("cnmail.send", "done", 2)]
    checked = django_command(db_url, "check", env=env)
    assert (checked.returncode, checked.stderr) == (0, ""), checked.stderr


def test_one_imported_first_by_a_view_through_no_name_the_tasks_module_holds(
    db_url: str, tmp_path: Path
) -> None:
    """The view imports the module first, so its declaration ran under the view's
    import; the app's tasks.py imports it as ``import cnapp.plain`` (which binds only
    ``cnapp``), or through ``cnapp.middle``: a worker declares both, and runs them.
    Both were refused at enqueue (E006, "move it into cnapp.tasks (or import it
    there)"), though imported there."""
    env = _app(tmp_path)
    script = (
        "from django_pgqueue import enqueue\n"
        "import cnapp.deep, cnapp.plain\n"  # as views import them, before any tasks.py
        "print(enqueue('cnmail.plain', [1]).task, enqueue('cnmail.deep', [1]).task)\n"
    )
    done = django_command(db_url, "shell", "-v", "0", "-c", script, env=env)
    assert done.stdout.split() == ["cnmail.plain", "cnmail.deep"], done.stderr
    ran = django_command(db_url, "runworker", "--burst", env=env)
    assert ran.returncode == 0, ran.stderr
    rows = Job.objects.order_by("task").values_list("task", "status", "result")
    assert list(rows) == [("cnmail.deep", "done", 3), ("cnmail.plain", "done", 4)]


def test_a_custom_name_declared_inside_a_test_function_says_so() -> None:
    """Declared as a test's body runs, not by a module's top-level code: no worker's
    import runs it. Enqueue said it was "defined in a script or the shell
    ('__main__')", pytest's own ``__main__``, which told the test's author nothing.
    Silenced, the test's own process runs its job (``run_jobs()``)."""
    path = "cnt_mail.in_test"

    @task(name=path)
    def in_test(x: int) -> int:
        return x + 1

    try:
        with pytest.raises(InvalidJob) as refused:
            in_test.enqueue(1)
        assert str(refused.value) == (
            "task 'cnt_mail.in_test' has a name of its own and is declared by a function "
            "as it runs (test_a_custom_name_declared_inside_a_test_function_says_so() in "
            "'tests.integration.test_custom_names'), not by a module's top-level code, so "
            "no worker's import declares it and every worker would bury the job "
            "(UnknownTask): declare it at the top level of a module a worker imports (its "
            "app's tasks.py, or one of PGQUEUE['TASK_MODULES']) and enqueue it from there; "
            "a test whose jobs run in its own process (django_pgqueue.testing.run_jobs()) "
            "may silence django_pgqueue.E006 instead (django_pgqueue.E006)"
        )
        with override_settings(SILENCED_SYSTEM_CHECKS=[custom_names.CHECK_ID]):
            job = in_test.enqueue(1)
            assert run_jobs().done == [job.pk]
        assert Job.objects.get(pk=job.pk).result == 2
    finally:  # no other test of the session should see it (E006)
        registry._registry.pop(path, None)
        custom_names._declared_by.pop(path, None)
        custom_names._found.discard(path)


SETTINGS_PACKAGE = {
    "cnset/__init__.py": "from tests.settings import *  # noqa\n"
    "import os\n\nfrom cnset import hooks  # noqa\n\n"
    "SILENCED_SYSTEM_CHECKS = os.environ.get('SILENCED', '').split()\n",
    "cnset/hooks.py": "from django_pgqueue import task\n\n\n"
    "@task(name='cnset_hooks.ping')\ndef ping(x):\n    return x + 1\n",
    "cnset/stray.py": "from django_pgqueue import task\n\n\n"
    "@task(name='cnset_hooks.stray')\ndef stray(x):\n    return x + 2\n",
}
SETTINGS_ENQUEUE = (
    "import cnset.stray  # as a view does: not the settings'\n"
    "from django_pgqueue import enqueue\n"
    "from django_pgqueue.exceptions import InvalidJob\n"
    "for path in ['cnset_hooks.ping', 'cnset_hooks.stray']:\n"
    "    try:\n"
    "        print(path, enqueue(path, [1]).status)\n"
    "    except InvalidJob as exc:\n"
    "        print(path, 'refused', str(exc).endswith('(django_pgqueue.E006)'))\n"
)


def test_a_module_the_settings_import_is_run_by_every_worker(db_url: str, tmp_path: Path) -> None:
    """A task declared by a module that the settings package imports: every worker
    imports the settings, so it runs the job. Enqueue refused it ("not in an
    installed app"), even with E006 silenced, and check reported it. Silenced, E006
    refuses nothing, the other module's task too (the docs' word); not silenced,
    that one is refused as E006."""
    for name, text in SETTINGS_PACKAGE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    env = {"DJANGO_SETTINGS_MODULE": "cnset", "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    done = django_command(db_url, "shell", "-v", "0", "-c", SETTINGS_ENQUEUE, env=env)
    assert done.stdout.splitlines() == ["cnset_hooks.ping queued", "cnset_hooks.stray refused True"]
    checked = django_command(db_url, "check", env=env)
    assert (checked.returncode, checked.stderr) == (0, ""), checked.stderr
    silenced = {**env, "SILENCED": custom_names.CHECK_ID}
    done = django_command(db_url, "shell", "-v", "0", "-c", SETTINGS_ENQUEUE, env=silenced)
    assert done.stdout.splitlines() == ["cnset_hooks.ping queued", "cnset_hooks.stray queued"]
    ran = django_command(db_url, "runworker", "--burst", "--skip-checks", env=env)
    assert ran.returncode == 0, ran.stderr
    rows = Job.objects.order_by("pk").values_list("task", "status", "result")
    assert list(rows) == [
        ("cnset_hooks.ping", "done", 2),
        ("cnset_hooks.ping", "done", 2),
        ("cnset_hooks.stray", "dead", None),
    ]


ABOVE_SETTINGS = {
    # The Celery layout's habit: the project's package imports a module of its own.
    "cnabove/__init__.py": "from cnabove import hooks  # noqa\n",
    "cnabove/hooks.py": SETTINGS_PACKAGE["cnset/hooks.py"].replace("cnset", "cnabove"),
    "cnabove/settings.py": "from tests.settings import *  # noqa\n",
}


def test_a_module_the_package_above_the_settings_imports_is_run_by_every_worker(
    db_url: str, tmp_path: Path
) -> None:
    """Settings ``cnabove.settings``, whose package imports the module that declares
    the task: every worker imports ``cnabove`` before its settings, and runs the job.
    Enqueue refused it ("not in an installed app, so workers would not import it"),
    and check reported it: only the settings module itself counted."""
    for name, text in ABOVE_SETTINGS.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    env = {"DJANGO_SETTINGS_MODULE": "cnabove.settings", "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    script = SETTINGS_ENQUEUE.replace("import cnset.stray", "pass")
    script = script.replace(", 'cnset_hooks.stray'", "").replace("cnset", "cnabove")
    done = django_command(db_url, "shell", "-v", "0", "-c", script, env=env)
    assert done.stdout.splitlines() == ["cnabove_hooks.ping queued"], done.stdout
    checked = django_command(db_url, "check", env=env)
    assert (checked.returncode, checked.stderr) == (0, ""), checked.stderr
    ran = django_command(db_url, "runworker", "--burst", "--skip-checks", env=env)
    assert ran.returncode == 0, ran.stderr
    assert list(Job.objects.values_list("task", "status", "result")) == [
        ("cnabove_hooks.ping", "done", 2)
    ]
