"""E006 reads a tasks module's source to see what its import runs: sources that are
not plain UTF-8 files, call forms of ``import_module()`` / ``__import__()``, and
threads. Enqueue must accept what a real worker (``runworker --burst``, without
the system checks that would import the URLconf's views) runs, and raise nothing
but ``InvalidJob``."""

from __future__ import annotations

import json
import py_compile
import zipfile
from pathlib import Path

import pytest

from django_pgqueue.models import Job
from tests.integration.enqueue_script import ENQUEUE
from tests.worker.conftest import ROOT, django_command

pytestmark = pytest.mark.django_db(transaction=True)


def _task(name: str) -> str:
    return f"from django_pgqueue import task\n\n\n@task(name={name!r})\ndef f(x):\n    return x\n"


#: For each case, an app whose tasks.py a worker imports, and the module of it that
#: declares the tasks (``h``) and that a view imports first.
CASES: dict[str, dict[str, str | bytes]] = {
    # A coding declaration: not UTF-8.
    "latin": {
        "tasks.py": "# -*- coding: latin-1 -*-\n# caf\xe9\nimport cnsrc.h\n".encode("latin-1")
    },
    # Shipped as a .pyc without its source (compiled below).
    "pyc": {"tasks.py": "import cnsrc.h\n"},
    # Imported from a zip file (zipimport) on sys.path.
    "zip": {"tasks.py": "import cnsrc.h\n"},
    # import_module(name=...), an alias of it, __import__ with a fromlist.
    "calls": {
        "tasks.py": "import importlib\nfrom importlib import import_module as load\n\n"
        "importlib.import_module(name='cnsrc.h')\nload('cnsrc.h2')\n"
        "__import__('cnsrc', fromlist=['h3'])\n",
        "h2.py": _task("cnsrc_mail.h2"),
        "h3.py": _task("cnsrc_mail.h3"),
    },
    # Through a module of the project outside the installed apps (written below).
    "lib": {"tasks.py": "import cnsrclib.loader\n"},
    # An if whose test ast.unparse() recursed through.
    "deep": {"tasks.py": "import cnsrc.h\nif " + " + ".join(["1"] * 1200) + ":\n    pass\n"},
}


def _project(tmp_path: Path, case: str, *, silenced: bool = False) -> dict[str, str]:
    files = {"__init__.py": "", "h.py": _task("cnsrc_mail.h"), **CASES[case]}
    place = tmp_path / ("zipped" if case == "zip" else "") / "cnsrc"
    place.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        if isinstance(text, bytes):
            (place / name).write_bytes(text)
        else:
            (place / name).write_text(text)
    (tmp_path / "cnsrclib").mkdir(exist_ok=True)
    (tmp_path / "cnsrclib" / "__init__.py").write_text("")
    (tmp_path / "cnsrclib" / "loader.py").write_text("import cnsrc.h\n")
    if case == "pyc":
        source = place / "tasks.py"
        py_compile.compile(str(source), cfile=str(source.with_suffix(".pyc")), doraise=True)
        source.unlink()
    if case == "zip":
        with zipfile.ZipFile(tmp_path / "apps.zip", "w") as zipped:
            for name in files:
                zipped.write(place / name, f"cnsrc/{name}")
    (tmp_path / "cnsrc_settings.py").write_text(
        "import sys\n\nfrom tests.settings import *  # noqa\n"
        f"sys.path.insert(0, {str(tmp_path / 'apps.zip')!r})\n"
        "INSTALLED_APPS = [*INSTALLED_APPS, 'cnsrc']\n"
        f"SILENCED_SYSTEM_CHECKS = {['django_pgqueue.E006'] if silenced else []!r}\n"
    )
    return {"DJANGO_SETTINGS_MODULE": "cnsrc_settings", "PYTHONPATH": f"{tmp_path}:{ROOT}"}


def _enqueue(db_url: str, env: dict[str, str], paths: list[str]) -> dict[str, str]:
    """What the web process's enqueue says of each path, its declaring modules
    imported first (as views do)."""
    views = "".join(f"import cnsrc.{path.rpartition('.')[2]}\n" for path in paths)
    script = f"{views}PATHS = {paths!r}\n{ENQUEUE}"
    done = django_command(db_url, "shell", "-v", "0", "-c", script, env=env)
    assert done.returncode == 0, done.stderr
    return {line.split()[0]: " ".join(line.split()[1:3]) for line in done.stdout.splitlines()}


@pytest.mark.parametrize("case", list(CASES))
def test_tasks_a_worker_declares_are_accepted_whatever_their_source(
    db_url: str, tmp_path: Path, case: str
) -> None:
    """A tasks module with a latin-1 coding declaration, one shipped as a .pyc only,
    one imported from a zip file, and one that imports with ``import_module(name=...)``,
    an alias of ``import_module``, or ``__import__(..., fromlist=[...])``, or one that
    imports it through a module of the project outside the apps: a real worker runs
    each task. Enqueue refused them (the source read as UTF-8 from its
    file, or the call not seen); and raised RecursionError for a tasks module with a
    long ``if`` test, which ``ast.unparse()`` recursed through."""
    paths = [f"cnsrc_mail.{name.removesuffix('.py')}" for name in CASES[case] if name != "tasks.py"]
    paths = ["cnsrc_mail.h", *paths]
    assert _enqueue(db_url, _project(tmp_path, case, silenced=True), paths) == dict.fromkeys(
        paths, "queued"
    )
    env = _project(tmp_path, case)
    ran = django_command(db_url, "runworker", "--burst", "--skip-checks", env=env)
    assert ran.returncode == 0, ran.stderr
    rows = dict(Job.objects.values_list("task", "status"))
    assert rows == dict.fromkeys(paths, "done"), json.dumps(
        list(Job.objects.values_list("task", "last_error"))
    )
    assert _enqueue(db_url, env, paths) == dict.fromkeys(paths, "queued")


RACE = (
    "import importlib, sys, threading\n"
    "import cnrace.h  # as a view does, before the tasks modules\n"
    "from django_pgqueue import enqueue\n"
    "from django_pgqueue.exceptions import InvalidJob\n"
    "sys.setswitchinterval(1e-5)  # threads take turns often: the race shows at once\n"
    "done, errors = threading.Event(), []\n"
    "def enqueuer():\n"
    "    try:\n"
    "        for _ in range(20):\n"
    "            try:\n"
    "                enqueue(PATH, [1])\n"
    "                errors.append('accepted')\n"
    "            except InvalidJob:\n"
    "                pass\n"
    "    except Exception as exc:\n"
    "        errors.append(repr(exc))\n"
    "    done.set()\n"
    "def importer():  # a view's first request imports a submodule of the package\n"
    "    while not done.is_set():\n"
    "        for i in range(300):\n"
    "            importlib.import_module(f'{PACKAGE}.sub{i}')\n"
    "        for i in range(300):\n"
    "            del sys.modules[f'{PACKAGE}.sub{i}']\n"
    "            delattr(sys.modules[PACKAGE], f'sub{i}')\n"
    "threads = [threading.Thread(target=enqueuer), threading.Thread(target=importer)]\n"
    "[thread.start() for thread in threads]\n"
    "[thread.join() for thread in threads]\n"
    "print(errors)\n"
)


@pytest.mark.parametrize("package", ["cnrace.tasks", "cnrace.mailer"])
def test_a_thread_importing_a_submodule_meanwhile(
    db_url: str, tmp_path: Path, package: str
) -> None:
    """A task a view declares (no worker runs it), its first enqueues while another
    thread imports submodules of the tasks package (or of the package the task's name
    names, ``cnrace.mailer.send``): each is refused. Enqueue raised RuntimeError
    (dictionary changed size during iteration) for the named package, and accepted
    the task for good when the tasks package's dict changed under it."""
    name = f"{package.replace('tasks', 'cnrace_mail')}.send"
    places = {"cnrace/__init__.py": "", "cnrace/h.py": _task(name)}
    places["cnrace/tasks/__init__.py" if package.endswith("tasks") else "cnrace/tasks.py"] = ""
    places[f"{package.replace('.', '/')}/__init__.py"] = (
        "for i in range(20000):\n    globals()[f'v{i}'] = i\n"
    )
    places.update({f"{package.replace('.', '/')}/sub{i}.py": "" for i in range(300)})
    for place, text in places.items():
        (tmp_path / place).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / place).write_text(text)
    (tmp_path / "cnrace_settings.py").write_text(
        "from tests.settings import *  # noqa\nINSTALLED_APPS = [*INSTALLED_APPS, 'cnrace']\n"
    )
    env = {"DJANGO_SETTINGS_MODULE": "cnrace_settings", "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    script = f"PATH, PACKAGE = {name!r}, {package!r}\nimport {package}\n{RACE}"
    done = django_command(db_url, "shell", "-v", "0", "-c", script, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
