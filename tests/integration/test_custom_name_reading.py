"""How E006 reads the tasks modules' sources: once per file as it is (a refused
enqueue read every module again, about 100 ms each time), and only the branches
that their import runs (``if False:`` was followed as if it ran)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from django_pgqueue.models import Job
from tests.integration.enqueue_script import ENQUEUE
from tests.worker.conftest import ROOT, django_command

pytestmark = pytest.mark.django_db(transaction=True)


def _task(name: str) -> str:
    return f"from django_pgqueue import task\n\n\n@task(name={name!r})\ndef f(x):\n    return x\n"


DEAD = ["cnrd_mail.if_false", "cnrd_mail.if_zero", "cnrd_mail.ifexp", "cnrd_mail.and_false"]
DEAD += ["cnrd_mail.if_true_else", "cnrd_mail.while_false", "cnrd_mail.and_typing"]
DEAD += ["cnrd_mail.or_true_else", "cnrd_mail.main_only"]
LIVE = ["cnrd_mail.if_true", "cnrd_mail.else_zero", "cnrd_mail.ifexp_else", "cnrd_mail.or_false"]
LIVE += ["cnrd_mail.unknown"]
FILES = {
    "cnrd/__init__.py": "",
    "cnrd/tasks.py": (
        "import os\nfrom typing import TYPE_CHECKING\n\n\n"
        "def ifexp():\n    import cnrd.ifexp  # noqa: F401\n\n\n"
        "def ifexp_else():\n    import cnrd.ifexp_else  # noqa: F401\n\n\n"
        "def and_false():\n    import cnrd.and_false  # noqa: F401\n\n\n"
        "def or_false():\n    import cnrd.or_false  # noqa: F401\n\n\n"
        "import cnrd.chain0  # noqa: E402, F401\n"
        "if False:\n    import cnrd.if_false  # noqa: F401\n"
        "if 0:\n    import cnrd.if_zero  # noqa: F401\nelse:\n    import cnrd.else_zero  # noqa\n"
        "if not 0:\n    import cnrd.if_true  # noqa: F401\n"
        "else:\n    import cnrd.if_true_else  # noqa: F401\n"
        "while False:\n    import cnrd.while_false  # noqa: F401\n"
        "ifexp() if False else ifexp_else()\n"
        "False and and_false()\n"
        "False or or_false()\n"
        "if os.environ.get('X'):\n    import cnrd.unknown  # noqa: F401\n"
        # Never true (false) whatever the run says of X: its first operand is unknown.
        "if os.environ.get('X') and TYPE_CHECKING:\n    import cnrd.and_typing  # noqa\n"
        "if os.environ.get('X') or 1:\n    pass\nelse:\n    import cnrd.or_true_else  # noqa\n"
        "if __name__ == '__main__':  # run as a script: never as a worker imports it\n"
        "    import cnrd.main_only  # noqa: F401\n"
    ),
    **{f"cnrd/chain{i}.py": f"import cnrd.chain{i + 1}  # noqa\n" for i in range(40)},
    "cnrd/chain40.py": "",
    "cnrd/helpers.py": _task("cnrd_mail.send"),
    **{f"cnrd/{path.partition('.')[2]}.py": _task(path) for path in DEAD + LIVE},
}


def _project(tmp_path: Path, *, silenced: bool = False) -> dict[str, str]:
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "cnrd_settings.py").write_text(
        "from tests.settings import *  # noqa\nINSTALLED_APPS = [*INSTALLED_APPS, 'cnrd']\n"
        f"SILENCED_SYSTEM_CHECKS = {['django_pgqueue.E006'] if silenced else []!r}\n"
    )
    return {"DJANGO_SETTINGS_MODULE": "cnrd_settings", "PYTHONPATH": f"{tmp_path}:{ROOT}"}


def _enqueue(db_url: str, env: dict[str, str], paths: list[str]) -> dict[str, str]:
    """What the web process's enqueue says of each path, its modules imported first."""
    views = "".join(f"import cnrd.{path.partition('.')[2]}\n" for path in paths)
    done = django_command(
        db_url, "shell", "-v", "0", "-c", f"{views}PATHS = {paths!r}\n{ENQUEUE}", env=env
    )
    assert done.returncode == 0, done.stderr
    return {line.split()[0]: line.split()[1] for line in done.stdout.splitlines()}


def test_what_a_dead_branch_imports_is_refused_as_every_worker_buries_it(
    db_url: str, tmp_path: Path
) -> None:
    """``if False:``, ``if 0:``, the ``else`` of ``if not 0:``, ``while False:``,
    ``f() if False else ...`` and ``False and f()`` at module level of tasks.py never
    run: a real worker buries their tasks. Enqueue accepted them (the branch was read
    as if it ran); the branches that do run, and one it cannot tell, still count.
    Nor do ``if x and TYPE_CHECKING:`` or the ``else`` of ``if x or 1:``, whatever ``x``
    is: enqueue accepted those two (an unknown first operand made the test unknown);
    nor ``if __name__ == '__main__':``, which enqueue read as if it could run."""
    env = _project(tmp_path)
    assert _enqueue(db_url, env, DEAD + LIVE) == {
        **dict.fromkeys(DEAD, "refused"),
        **dict.fromkeys(LIVE, "queued"),
    }
    Job.objects.all().delete()
    assert _enqueue(db_url, _project(tmp_path, silenced=True), DEAD + LIVE) == dict.fromkeys(
        DEAD + LIVE, "queued"
    )
    ran = django_command(db_url, "runworker", "--burst", "--skip-checks", env=env)
    assert ran.returncode == 0, ran.stderr
    rows = dict(Job.objects.values_list("task", "status"))
    assert rows == {**dict.fromkeys(DEAD, "dead"), **dict.fromkeys(LIVE[:-1], "done")} | {
        "cnrd_mail.unknown": "dead"  # X is not set: the worker did not import it
    }, json.dumps(list(Job.objects.values_list("task", "last_error")))


REPEAT = (
    "import ast, os\n"
    "import cnrd.helpers  # as a view does\n"
    "from django_pgqueue import enqueue\n"
    "from django_pgqueue.exceptions import InvalidJob\n"
    "parsed = []\n"
    "real = ast.parse\n"
    "ast.parse = lambda *a, **k: parsed.append(1) or real(*a, **k)\n"
    "def verdict():\n"
    "    parsed.clear()\n"
    "    try:\n"
    "        return enqueue('cnrd_mail.send', [1]).status\n"
    "    except InvalidJob:\n"
    "        return 'refused'\n"
    "first = verdict()\n"
    "print(first, len(parsed) > 40)\n"
    "print(verdict(), len(parsed))\n"
    "with open(TASKS, 'a') as tasks:  # edited: imports the helpers now\n"
    "    tasks.write('import cnrd.helpers  # noqa\\n')\n"
    "print(verdict(), len(parsed))\n"
)


def test_a_refused_enqueue_reads_only_the_sources_that_changed(db_url: str, tmp_path: Path) -> None:
    """The second refused enqueue of a task reads no source again (each read every
    module the tasks modules import, 100 ms here for each refusal); an edited
    tasks.py is read again, with the module it imports now, and its task accepted."""
    env = _project(tmp_path)
    script = f"TASKS = {str(tmp_path / 'cnrd' / 'tasks.py')!r}\n{REPEAT}"
    done = django_command(db_url, "shell", "-v", "0", "-c", script, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["refused True", "refused 0", "queued 2"]


REPLACED = (
    "import os\n"
    "import cnrd.helpers  # as a view does\n"
    "from django_pgqueue import enqueue\n"
    "from django_pgqueue.exceptions import InvalidJob\n"
    "def verdict():\n"
    "    try:\n"
    "        return enqueue('cnrd_mail.send', [1]).status\n"
    "    except InvalidJob:\n"
    "        return 'refused'\n"
    "print(verdict())\n"
    "old = os.stat(TASKS)\n"
    "text = open(TASKS).read()\n"
    "new = text.replace('import cnrd.chain0 ', 'import cnrd.helpers')\n"
    "print(len(new) == len(text) and new != text)\n"
    "with open(TASKS + '.new', 'w') as tasks:\n"
    "    tasks.write(new)\n"
    "os.utime(TASKS + '.new', ns=(old.st_atime_ns, old.st_mtime_ns))  # as tar, cp -p do\n"
    "os.replace(TASKS + '.new', TASKS)\n"
    "print(verdict())\n"
)


def test_a_file_replaced_by_one_of_its_size_and_mtime_is_read_again(
    db_url: str, tmp_path: Path
) -> None:
    """tasks.py replaced by a version of the same size that kept the old one's mtime
    (extracted from an archive, copied with ``cp -p``), and that imports the helpers
    now: its task is accepted, as a worker started now runs it. Enqueue kept
    refusing it, from what the old file said."""
    env = _project(tmp_path)
    script = f"TASKS = {str(tmp_path / 'cnrd' / 'tasks.py')!r}\n{REPLACED}"
    done = django_command(db_url, "shell", "-v", "0", "-c", script, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["refused", "True", "queued"]
