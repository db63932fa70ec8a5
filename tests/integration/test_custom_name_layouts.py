"""E006 against layouts real projects use: whether enqueue accepts a task with a name
of its own must agree with whether a real worker (``runworker --burst``, without
the system checks that would import the URLconf's views) runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from django_pgqueue.models import Job
from tests.integration.enqueue_script import ENQUEUE
from tests.worker.conftest import ROOT, django_command

pytestmark = pytest.mark.django_db(transaction=True)


def _task(name: str, result: str) -> str:
    return (
        f"from django_pgqueue import task\n\n\n@task(name={name!r})\n"
        f"def f(x):\n    return {result}\n"
    )


LAYOUT = {
    "cnlib/__init__.py": "",  # a library: no app, not in TASK_MODULES
    "cnlib/util.py": "def add(x):\n    return x + 4\n",
    # Declares one, outside the apps: the tasks module imports it (a view did first).
    "cnlib/tasked.py": _task("cnlay_mail.outside", "x + 14"),
    "cnlay/__init__.py": "",
    "cnlay/tasks/__init__.py": (
        "import importlib\nfrom typing import TYPE_CHECKING\n\n"
        "from django_pgqueue import task\n"
        "from cnlib.util import add\n"
        "import cnlib.tasked  # noqa: F401\n\n"
        "from cnlay import factory  # noqa: F401\n\n"
        "importlib.import_module('cnlay.dyn')\n"
        "importlib.import_module('.rel', package='cnlay')\n"
        "for name in ['loop']:\n"
        "    importlib.import_module(f'cnlay.plugins.{name}')\n"
        "add_task = task(name='cnlay_mail.add')(add)\n"
        "from cnlay import *  # noqa: F403 (binds what cnlay holds: no submodule here)\n"
        "if TYPE_CHECKING:\n    pass\nelse:\n    import cnlay.typed  # noqa: F401\n"
        "class Plugins:\n    import cnlay.classy  # noqa: F401\n"
        "def load():\n    import cnlay.loaded  # noqa: F401\n"
        "def unused():\n    import cnlay.unused  # noqa: F401\n"
        "load()\n"
        "from django.utils.module_loading import autodiscover_modules\n"
        "autodiscover_modules('cnjobs')\n"
    ),
    # Imported by a function the module calls, and by Django's autodiscover_modules().
    "cnlay/loaded.py": _task("cnlay_mail.loaded", "x + 11"),
    "cnlay/cnjobs.py": _task("cnlay_mail.cnjobs", "x + 12"),
    # Imported by a function nothing calls.
    "cnlay/unused.py": _task("cnlay_mail.unused", "x + 13"),
    # Imported at module level of tasks/__init__.py, in an else: and a class body.
    "cnlay/typed.py": _task("cnlay_mail.typed", "x + 8"),
    "cnlay/classy.py": _task("cnlay_mail.classy", "x + 9"),
    # Imported by a view only: `from cnlay import *` in a worker binds no module of it.
    "cnlay/starred.py": _task("cnlay_mail.starred", "x + 10"),
    # Imported by importlib.import_module() in tasks/__init__.py.
    "cnlay/dyn.py": _task("cnlay_mail.dyn", "x + 1"),
    "cnlay/rel.py": _task("cnlay_mail.rel", "x + 2"),
    # Imported by a name computed at run time, within cnlay.plugins.
    "cnlay/plugins/__init__.py": "",
    "cnlay/plugins/loop.py": _task("cnlay_mail.loop", "x + 7"),
    # Its name names cnlay.other, which a worker imports for it, and which imports it.
    "cnlay/helpers.py": _task("cnlay.other.f", "x + 3"),
    "cnlay/other.py": "from cnlay.helpers import f  # noqa: F401\n",
    # A submodule of the tasks package that nothing a worker imports imports.
    "cnlay/tasks/stray.py": _task("cnlay_mail.stray", "x + 5"),
    # A factory a worker imports, called only by a view.
    "cnlay/factory.py": (
        "from django_pgqueue import task\n\n\n"
        "def make(name):\n"
        "    def late(x):\n        return x + 6\n\n"
        "    return task(name=name)(late)\n"
    ),
    "cnlay/views.py": "from cnlay.factory import make\n\nlate = make('cnlay_mail.late')\n",
}
# As the web process's views import them, before any tasks module.
VIEWS = (
    "import cnlib.tasked, cnlay.dyn, cnlay.rel, cnlay.plugins.loop, cnlay.helpers, cnlay.typed, "
    "cnlay.classy, cnlay.starred, cnlay.loaded, cnlay.cnjobs, cnlay.unused, cnlay.tasks.stray, "
    "cnlay.views  # noqa\n"
)
RUN = [
    *("cnlay_mail.dyn", "cnlay_mail.rel", "cnlay_mail.loop", "cnlay.other.f", "cnlay_mail.add"),
    *("cnlay_mail.typed", "cnlay_mail.classy", "cnlay_mail.loaded", "cnlay_mail.cnjobs"),
    "cnlay_mail.outside",
]
BURIED = ["cnlay_mail.stray", "cnlay_mail.late", "cnlay_mail.starred", "cnlay_mail.unused"]


def _project(tmp_path: Path, *, silenced: bool = False) -> dict[str, str]:
    for name, text in LAYOUT.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "cnlay_urls.py").write_text(VIEWS + "urlpatterns = []\n")
    (tmp_path / "cnlay_settings.py").write_text(
        "from tests.settings import *  # noqa\n"
        "INSTALLED_APPS = [*INSTALLED_APPS, 'cnlay']\nROOT_URLCONF = 'cnlay_urls'\n"
        f"SILENCED_SYSTEM_CHECKS = {['django_pgqueue.E006'] if silenced else []!r}\n"
    )
    return {"DJANGO_SETTINGS_MODULE": "cnlay_settings", "PYTHONPATH": f"{tmp_path}:{ROOT}"}


def _enqueue(db_url: str, env: dict[str, str], paths: list[str]) -> dict[str, str]:
    """What the web process's enqueue says of each path, its views imported first."""
    script = f"{VIEWS}PATHS = {paths!r}\n{ENQUEUE}"
    done = django_command(db_url, "shell", "-v", "0", "-c", script, env=env)
    assert done.returncode == 0, done.stderr
    return {line.split()[0]: line.split()[1] for line in done.stdout.splitlines()}


def _agree(db_url: str, tmp_path: Path, paths: list[str], *, runs: bool) -> None:
    """Enqueue accepts ``paths`` and check is silent, if and only if a real worker runs
    their jobs (enqueued with E006 silenced: ``done``, not buried)."""
    env = _project(tmp_path)
    verdict = "queued" if runs else "refused"
    assert _enqueue(db_url, env, paths) == dict.fromkeys(paths, verdict)
    checked = django_command(db_url, "check", env=env)
    reported = [line for line in checked.stderr.splitlines() if "E006" in line]
    assert [p for p in paths if any(repr(p) in line for line in reported)] == (
        [] if runs else paths
    )
    Job.objects.all().delete()
    forced = _enqueue(db_url, _project(tmp_path, silenced=True), paths)
    assert forced == dict.fromkeys(paths, "queued")
    # Without the system checks, which would import the URLconf's views for it.
    ran = django_command(db_url, "runworker", "--burst", "--skip-checks", env=env)
    assert ran.returncode == 0, ran.stderr
    rows = dict(Job.objects.values_list("task", "status"))
    assert rows == dict.fromkeys(paths, "done" if runs else "dead"), json.dumps(
        list(Job.objects.values_list("task", "last_error"))
    )


def test_tasks_a_worker_declares_are_accepted(db_url: str, tmp_path: Path) -> None:
    """Declared in a module the tasks module imports with importlib.import_module
    (a literal name, relative with package=, or one computed within a package), in
    one the module their name names imports, or wrapping a library's function in
    the tasks module, or imported in the else of `if TYPE_CHECKING:`, in a class
    body, by a function the module calls, or by ``autodiscover_modules()``: a real
    worker runs each. Enqueue refused all nine (E006, or "defined in
    'cnlib.util', which is not in an installed app" for the library's function), and
    check reported the one whose name's module imports it. And one declared in a
    module of the project outside the apps that the tasks module imports (a view
    first): enqueue refused it as "not in an installed app", workers "would not
    import it"."""
    _agree(db_url, tmp_path, RUN, runs=True)


def test_tasks_no_worker_declares_are_refused(db_url: str, tmp_path: Path) -> None:
    """A submodule of the tasks package that only a view imports (the import binds it
    on the package, which looked like a re-export), and a task a view declares with
    a factory of a module the tasks module imports (the function's module, not the
    view, was taken as where it was declared), and a module only a view imports while
    the tasks module says ``from cnlay import *`` (which bound it here, imported
    first, and in no worker); and one imported by a function nothing calls: every
    worker buries them. Enqueue accepted the first three, and check said nothing."""
    _agree(db_url, tmp_path, BURIED, runs=False)
