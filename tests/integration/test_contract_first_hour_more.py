"""Issue 13's first hour, more of a new user's mistakes: each answered where it is made.

What tests/worker/test_contract_first_hour.py and tests/integration/test_first_hour.py
left unpinned: a task defined in a class, or inside a function, on both APIs.
"""

from __future__ import annotations

from typing import Any

import pytest

from django_pgqueue.backend.compat import InvalidTask
from django_pgqueue.models import Job

pytestmark = pytest.mark.django_db


def declare(source: str) -> dict[str, Any]:
    """Run ``source`` as the top of an app's tasks.py (a module a worker imports)."""
    namespace: dict[str, Any] = {"__name__": "tests.testapp.tasks"}
    exec(source, namespace)
    return namespace


DIRECT = "from django_pgqueue import task\n"
FRAMEWORK = "from django_pgqueue.backend.compat import task\n"
IN_A_CLASS = "class Mailer:\n    @task\n    def send(n):\n        return n\n"
IN_A_FUNCTION = (
    "def make():\n    @task\n    def send(n):\n        return n\n    return send\nsend = make()\n"
)


# -- a task defined in a class, or inside a function ---------------------------------------


def test_a_direct_task_defined_in_a_class_is_refused_where_it_is_declared() -> None:
    """Accepted at declaration and enqueue, then buried by a worker that had not
    imported the module: 'module 'shop.tasks.Mailer' cannot be imported'."""
    with pytest.raises(TypeError) as raised:
        declare(DIRECT + IN_A_CLASS)
    assert str(raised.value) == (
        "@task cannot register 'tests.testapp.tasks.Mailer.send': it is defined in the "
        "class 'Mailer', and a worker finds a task by its module and a name at the top "
        "level of that module. Define it with def at the top level of its module."
    )
    assert Job.objects.count() == 0


def test_a_direct_task_defined_inside_a_function_is_refused_where_it_is_declared() -> None:
    """Its path, 'module.make.<locals>.send', names nothing a worker can import: every
    job of it was buried."""
    with pytest.raises(TypeError) as raised:
        declare(DIRECT + IN_A_FUNCTION)
    assert str(raised.value) == (
        "@task cannot register 'tests.testapp.tasks.make.<locals>.send': it is defined "
        "inside the function 'make', and a worker finds a task by its module and a name at "
        "the top level of that module. Define it with def at the top level of its module."
    )


def test_a_direct_task_in_a_class_with_a_name_of_its_own_is_declared() -> None:
    named = declare(
        DIRECT + "class Mailer:\n    @task(name='tests.testapp.tasks.fhm_send')\n"
        "    def send(n):\n        return n\n"
    )["Mailer"].send
    assert named.path == "tests.testapp.tasks.fhm_send"


def test_a_tasks_framework_task_defined_in_a_class_is_refused_where_it_is_declared() -> None:
    """Django's own check refuses a function inside another, not one in a class body."""
    with pytest.raises(InvalidTask) as raised:
        declare(FRAMEWORK + IN_A_CLASS)
    assert str(raised.value) == (
        "Task 'tests.testapp.tasks.Mailer.send' is defined in the class 'Mailer', and a "
        "worker finds a task by its module and a name at the top level of that module. "
        "Define it with def at the top level of its module."
    )
