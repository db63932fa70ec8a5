"""Bad input is refused where it is made, with the same message on every way in."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_pgqueue import conf, registry
from django_pgqueue.exceptions import InvalidJob, InvalidJobArguments
from django_pgqueue.models import Job
from tests.testapp.tasks import add, noop

pytestmark = pytest.mark.django_db


def test_a_queue_name_with_a_trailing_newline_is_refused_everywhere() -> None:
    with pytest.raises(InvalidJob, match=r"queue 'emails\\n' is not a valid queue name"):
        add.using(queue="emails\n").enqueue(1, 2)
    with (
        override_settings(PGQUEUE={"DEFAULT_QUEUE": "emails\n"}),
        pytest.raises(ImproperlyConfigured, match=r"PGQUEUE\['DEFAULT_QUEUE'\]"),
    ):
        conf.get()
    assert Job.objects.count() == 0


def test_a_notify_channel_postgresql_would_cut_is_refused_by_the_settings() -> None:
    with (
        override_settings(PGQUEUE={"CHANNEL": "c" * 64}),
        pytest.raises(
            ImproperlyConfigured,
            match=r"PGQUEUE\['CHANNEL'\] = 'c+': expected a non-empty "
            r"name of at most 63 bytes",
        ),
    ):
        conf.get()
    with override_settings(PGQUEUE={"CHANNEL": "é" * 32}), pytest.raises(ImproperlyConfigured):
        conf.get()  # 64 bytes in UTF-8
    with override_settings(PGQUEUE={"CHANNEL": "c" * 63}):
        assert conf.get().CHANNEL == "c" * 63


def _nested(levels: int) -> list[object]:
    value: list[object] = [1]
    for _ in range(levels - 1):
        value = [value]
    return value


# The args list is the first level, so one argument of 200 levels puts its
# innermost value 201 deep. 500 levels encode and decode at C speed on every
# supported Python, and 2,000 do on 3.13: the depth rule must not depend on where
# Python's JSON gives up, since the worker may run a Python that decodes less
# than the enqueuer's.
@pytest.mark.parametrize("levels", [200, 500, 2000])
def test_arguments_nested_too_deep_get_the_clear_error_not_a_recursion_error(
    levels: int,
) -> None:
    with pytest.raises(InvalidJobArguments, match="nested more than 200 levels deep"):
        noop.enqueue(_nested(levels))
    with pytest.raises(InvalidJobArguments, match="nested more than 200 levels deep"):
        noop.enqueue(key={"items": [{"deeper": _nested(levels)}]})
    assert Job.objects.count() == 0


@pytest.mark.parametrize("levels", [500, 2000])
def test_tasks_framework_arguments_nested_too_deep_get_the_clear_error(levels: int) -> None:
    # The Tasks path retries a refused encoding through Django's normalize_json,
    # which recurses: 2,000 levels raised RecursionError instead of the clear error.
    djtasks = pytest.importorskip("tests.testapp.djtasks", exc_type=ImportError)
    with pytest.raises(InvalidJobArguments, match="nested more than 200 levels deep"):
        djtasks.noop_task.enqueue(_nested(levels))
    with pytest.raises(InvalidJobArguments, match="nested more than 200 levels deep"):
        djtasks.noop_task.enqueue(key={"items": [{"deeper": _nested(levels)}]})
    assert Job.objects.count() == 0


def test_arguments_nested_as_deep_as_the_limit_are_accepted() -> None:
    args = [_nested(199)]  # its innermost value lies 200 levels deep
    job = noop.enqueue(*args)
    assert Job.objects.get(id=job.id).args == args


def test_an_integer_json_cannot_carry_is_refused() -> None:
    with pytest.raises(InvalidJobArguments, match=r"args\[0\] is an integer with too many digits"):
        noop.enqueue(10**5000)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"unique_key": "k\udcff"}, "unique_key 'k\\\\udcff' must be a non-empty string"),
        ({"concurrency_key": "a\x00b"}, "concurrency_key 'a\\\\x00b' must be"),
    ],
)
def test_keys_postgresql_cannot_store_are_refused(options: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidJob, match=message):
        add.using(**options).enqueue(1, 2)


def test_a_task_path_postgresql_cannot_store_is_refused() -> None:
    with pytest.raises(InvalidJob, match=r"task 'app\.t\\udcff' must be a dotted path"):
        Job.objects.enqueue("app.t\udcff")


def test_a_mistake_in_the_decorator_itself_is_refused_where_the_task_is_declared() -> None:
    """Not an AttributeError, nor a name refused later at every enqueue."""
    from django_pgqueue import task
    from django_pgqueue.backend.compat import task as framework_task

    def send(order_id: int) -> None: ...

    send.__module__, send.__qualname__ = "tests.testapp.tasks", "send"
    with pytest.raises(TypeError, match=r"not 'emails': give its options by keyword, as in "):
        task("emails")  # type: ignore[call-overload]
    # Not told to write @task(queue=<classmethod ...>): the keywords fit a string only.
    with pytest.raises(TypeError, match=r"not <classmethod\(.*\)>: not callable$"):
        task(classmethod(send))  # type: ignore[call-overload, arg-type]
    with pytest.raises(
        TypeError, match=r"'tests.testapp.tasks.send' is already a django.tasks Task: use one"
    ):
        task(framework_task()(send))  # type: ignore[call-overload]
    with pytest.raises(InvalidJob, match=r"@task\(name='send-receipt'\): a task's name is"):
        task(name="send-receipt")(send)
    with pytest.raises(InvalidJob, match=r"@task\(name=''\)"):
        task(name="")(send)
    try:
        assert task(name="first.hour.send")(send).path == "first.hour.send"
    finally:
        registry._registry.pop("first.hour.send", None)
