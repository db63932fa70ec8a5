"""Tasks of tests/integration/test_contract_tasks_53.py: exceptions at the edges of
what Django's ImmediateBackend reports, run by both backends."""

from __future__ import annotations

from collections.abc import Callable

from django.tasks import task


class OwnBaseException(BaseException):
    """A BaseException that is neither SystemExit nor KeyboardInterrupt."""


class Outer:
    class NestedError(Exception):
        """Its path (module.Outer.NestedError) is not one import_string can follow."""


RAISED: dict[str, Callable[[], BaseException]] = {
    "generator-exit": lambda: GeneratorExit("closing"),
    "own-base-exception": lambda: OwnBaseException("own"),
    "exception-group": lambda: ExceptionGroup("group", [ValueError("v"), KeyError("k")]),
    "base-exception-group": lambda: BaseExceptionGroup("bg", [SystemExit(2), ValueError("v")]),
    "nested-class": lambda: Outer.NestedError("nested"),
    "stop-iteration": lambda: StopIteration("stop"),
    "no-message": lambda: ValueError(),
    "multiline-message": lambda: ValueError("line one\nline two"),
    "os-error": lambda: FileNotFoundError(2, "No such file", "/nope"),
}


@task
def raises(kind: str) -> None:
    raise RAISED[kind]()


@task
def raises_chained() -> None:
    try:
        raise KeyError("first")
    except KeyError as exc:
        raise ValueError("second") from exc
