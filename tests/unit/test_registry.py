"""Only registered tasks run: rows naming arbitrary import paths are refused."""

from __future__ import annotations

import functools
import sys
from typing import Any

import pytest

from django_pgqueue import registry, signatures
from django_pgqueue.exceptions import UnknownTask
from tests.testapp.tasks import add


def test_registered_task_resolves() -> None:
    assert registry.resolve("tests.testapp.tasks.add").target is add


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("os.system", "'os' is not in an installed app"),
        ("subprocess.run", "not in an installed app"),
        ("nodots", "not a dotted task path"),
        ("tests.testapp.tasks.record", "is not a registered task"),  # a plain function
        ("tests.testapp.tasks.missing", "is not a registered task"),
        ("tests.testapp.nope.task", "cannot be imported"),
    ],
)
def test_unregistered_paths_are_refused(path: str, message: str) -> None:
    with pytest.raises(UnknownTask, match=message):
        registry.resolve(path)


def test_refusal_does_not_import_modules_outside_installed_apps() -> None:
    sys.modules.pop("this", None)  # importing `this` prints the Zen of Python
    with pytest.raises(UnknownTask):
        registry.resolve("this.s")
    assert "this" not in sys.modules


def _greet(name: str, /, greeting: str = "hello", *, loud: bool = False) -> str:
    return f"{greeting} {name}{'!' if loud else ''}"


@pytest.mark.parametrize(
    ("args", "kwargs", "problem"),
    [
        (["ann"], {}, None),
        (["ann", "hi"], {"loud": True}, None),
        (["bob"], {"greeting": "yo"}, None),
        ([], {}, "missing a required argument: 'name'"),
        # Python's own words, which 3.13 changed.
        (
            [],
            {"name": "ann"},
            "'name' parameter is positional only|positional-only arguments passed as keyword "
            "arguments: 'name'",
        ),
        (["ann", "hi", True], {}, "too many positional arguments"),
        (["ann"], {"shout": True}, "got an unexpected keyword argument 'shout'"),
        # Named before what is missing, as Python does, with the keyword it looks like.
        ([], {"greting": "yo"}, "unexpected keyword argument 'greting' \\(did you mean 'greeting'"),
        (["ann", "hi"], {"greeting": "yo"}, "multiple values for argument 'greeting'"),
    ],
)
def test_arguments_are_checked_by_their_shape_every_time(
    args: list[object], kwargs: dict[str, object], problem: str | None
) -> None:
    """The answer for a call's shape is kept; asking again (the worker asks for
    every job) gives the same answer, an error included, whatever the values."""
    for _ in range(2):
        for values in (args, [object() for _ in args]):
            if problem is None:
                signatures.check_arguments(_greet, values, kwargs)
            else:
                with pytest.raises(TypeError, match=problem):
                    signatures.check_arguments(_greet, values, kwargs)


def _with_user(func: Any) -> Any:
    """A decorator that supplies one argument and takes a keyword of its own."""

    @functools.wraps(func)
    def wrapper(day: str, *, tenant: str = "public") -> Any:
        return func(day, user=tenant)

    return wrapper


@_with_user
def _report(day: str, user: str) -> str:
    return f"{day} {user}"


def test_a_wrappers_own_parameters_are_checked_not_the_wrapped_functions() -> None:
    """The worker calls the wrapper: a call it takes (without ``user``, with
    ``tenant``) fits, though the function it wraps (``functools.wraps``) has other
    parameters, and a call it refuses is refused in its words."""
    assert _report("monday", tenant="acme") == "monday acme"
    signatures.check_arguments(_report, ["monday"], {"tenant": "acme"})
    signatures.check_arguments(_report, ["monday"], {})
    with pytest.raises(TypeError, match=r"_report\(day, \*, tenant='public'\): got an "):
        signatures.check_arguments(_report, ["monday"], {"user": "bob"})


def _logged(func: Any) -> Any:
    """A decorator that passes every call on as it came (logging, tracing)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


@_logged
def _invoice(order_id: int, *, notify: bool = False) -> int:
    return order_id


def test_a_wrapper_that_passes_calls_on_is_checked_by_the_function_it_wraps() -> None:
    """``(*args, **kwargs)`` says nothing of the calls that fit: the wrapped
    function's signature does, so a bad call is still refused at enqueue rather
    than accepted and buried when the worker runs it."""
    signatures.check_arguments(_invoice, [1], {"notify": True})
    with pytest.raises(TypeError, match=r"_invoice\(order_id, \*, notify=False\): got an "):
        signatures.check_arguments(_invoice, [1], {"notfy": True})
    with pytest.raises(TypeError, match="missing a required argument: 'order_id'"):
        signatures.check_arguments(_invoice, [], {})


def _with_order(func: Any) -> Any:
    """A decorator that takes an order's id and passes the function the order."""

    @functools.wraps(func)
    def wrapper(order_id: int, *args: Any, **kwargs: Any) -> Any:
        return func({"id": order_id}, *args, **kwargs)

    return wrapper


@_logged
@_with_order
def _ship(order: dict[str, Any], express: bool = False) -> list[Any]:
    return [order["id"], express]


def test_a_pass_through_wrapper_is_checked_by_the_wrapper_under_it() -> None:
    """Under a logging decorator, the wrapper that takes an id counts, not the
    function at the bottom of the ``__wrapped__`` chain: its calls were refused."""
    assert _ship(order_id=42) == [42, False]
    signatures.check_arguments(_ship, [], {"order_id": 42})
    signatures.check_arguments(_ship, [7], {"express": True})
    with pytest.raises(TypeError, match=r"_ship\(order_id, \*args, \*\*kwargs\)"):
        signatures.check_arguments(_ship, [], {})


def test_a_loop_of_pass_through_wrappers_is_not_followed_for_ever() -> None:
    """``__wrapped__`` set by hand can loop; following it hung the enqueue."""

    def first(*args: Any, **kwargs: Any) -> None: ...

    def second(*args: Any, **kwargs: Any) -> None: ...

    first.__wrapped__ = second  # type: ignore[attr-defined]
    second.__wrapped__ = first  # type: ignore[attr-defined]
    signatures.check_arguments(first, [1], {"a": 2})  # nothing to check it by: taken


def test_a_lookup_does_not_forget_a_task_another_thread_registers_meanwhile(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's threads resolve tasks side by side. One that finds a stale entry
    (its module was dropped, as Python drops a module whose import failed) must
    not throw away the entry another thread registered meanwhile by importing the
    module again: the task would then be refused in this process for good (the
    module is imported, so nothing registers it again)."""
    import importlib
    import inspect
    import threading

    from django.test import override_settings

    name = "r1_racy_tasks"
    (tmp_path / f"{name}.py").write_text(
        "import django_pgqueue\n\n\n@django_pgqueue.task\ndef job() -> str:\n    return 'ran'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    path = f"{name}.job"
    lines, first = inspect.getsourcelines(registry._registered)
    # Where a lookup would change the registry: paused there, the other thread runs.
    mutating = {
        first + i
        for i, line in enumerate(lines)
        if "_registry" in line and "_registry.get(" not in line
    }
    paused, go = threading.Event(), threading.Event()
    seen: list[Any] = []

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code is not registry._registered.__code__:
            return None

        def line(frame: Any, event: str, arg: Any) -> Any:
            if event == "line" and frame.f_lineno in mutating and not paused.is_set():
                paused.set()
                go.wait(5)
            return line

        return line

    def resolve_in_a_thread() -> None:
        sys.settrace(tracer)
        try:
            seen.append(registry.resolve(path))
        except UnknownTask as exc:
            seen.append(exc)
        finally:
            sys.settrace(None)

    try:
        with override_settings(PGQUEUE={"TASK_MODULES": [name]}):
            importlib.import_module(name)
            del sys.modules[name]  # dropped: the registered entry is stale
            other = threading.Thread(target=resolve_in_a_thread)
            other.start()
            paused.wait(1)  # the other thread is between its check and its change
            fresh = registry.resolve(path)  # imports the module again: registered anew
            go.set()
            other.join(5)
            assert registry.resolve(path).target is fresh.target
            assert path in registry.runnables()
    finally:
        go.set()
        sys.modules.pop(name, None)
        registry._registry.pop(path, None)
