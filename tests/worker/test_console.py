"""What ``manage.py runworker`` prints on its console when the project configures no
logging: a failed run's traceback once, whoever else logs the same exception."""

from __future__ import annotations

import io
import logging
import threading
from pathlib import Path

import pytest

from django_pgqueue.management.console import console_handler
from tests.testapp import djtasks
from tests.testapp.tasks import always_fails
from tests.worker.test_first_hour import NO_LOGGING, manage, settings_module

TRACEBACK = "Traceback (most recent call last):"
RAISED = "ValueError: This Task failed due to ValueError"


def failing_runs() -> list[str]:
    """Three failed runs of a Tasks-framework task: one buried at once, one retried
    then buried. The retry is due at once (backoff 0): a --burst worker exits when
    nothing is ready, and a retry some 0.1 s away was, now and then, not yet."""
    from django_pgqueue.backend import options

    task = djtasks.failing_task_value_error
    return [
        options(task, max_attempts=1).enqueue().id,
        options(task, max_attempts=2, backoff=0).enqueue().id,
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_failed_tasks_run_prints_its_traceback_once(db_url: str, tmp_path: Path) -> None:
    """Django's task_finished line and ours both carry the exception: each printed its
    traceback, so each failed run showed it twice."""
    env = settings_module(tmp_path, "co_once", NO_LOGGING)
    once, twice = failing_runs()
    output = manage(db_url, "runworker", "--burst", "--no-listen", env=env)
    assert output.count(TRACEBACK) == 3, output
    assert output.count(f"\n{RAISED}\n") == 3, output
    # Both lines are still there, each with the exception's words.
    path = djtasks.failing_task_value_error.module_path
    assert f"ERROR Task id={once} path={path} state=FAILED\n" in output
    assert output.count(" state=FAILED\n") == 3, output
    assert f"ERROR job {once} ({path}) buried dead after attempt 1 of 1: {RAISED}\n" in output
    assert f"WARNING job {twice} ({path}) failed on attempt 1 of 2, retrying in " in output


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_without_djangos_line_ours_prints_the_traceback(db_url: str, tmp_path: Path) -> None:
    """Django's receiver disconnected (or its logger silenced, as at -v 0): our line
    is the one with the traceback."""
    (tmp_path / "co_quiet_tasks.py").write_text(
        "from django_pgqueue.backend.compat import TASKS_LOGGER\n"
        "import importlib\n"
        "signals = importlib.import_module(TASKS_LOGGER + '.signals')\n"
        "signals.task_finished.disconnect(signals.log_task_finished)\n"
    )
    env = settings_module(
        tmp_path,
        "co_quiet",
        f'{NO_LOGGING}\nPGQUEUE = {{**PGQUEUE, "TASK_MODULES": ["co_quiet_tasks"]}}',
    )
    failing_runs()
    output = manage(db_url, "runworker", "--burst", "--no-listen", env=env)
    assert "state=FAILED" not in output
    assert output.count(TRACEBACK) == 3, output
    assert output.count(f"\n{RAISED}\n") == 3, output
    failing_runs()
    always_fails.using(max_attempts=1).enqueue("co-quiet")
    output = manage(db_url, "runworker", "--burst", "--no-listen", "-v", "0", env=env)
    assert output.count(TRACEBACK) == 4, output


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def loggers() -> tuple[logging.Logger, logging.Logger, io.StringIO, Collect]:
    """Django's logger and ours as runworker sets them up, and another handler on
    ours (an error tracker's) that sees every record as it was logged."""
    stream = io.StringIO()
    handler = console_handler(stream)
    theirs = logging.Logger("django.tasks")
    ours = logging.Logger("django_pgqueue")
    tracker = Collect()
    for logger in (theirs, ours):
        logger.addHandler(handler)
    ours.addHandler(tracker)
    return theirs, ours, stream, tracker


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_the_second_record_of_an_exception_is_printed_without_its_traceback() -> None:
    theirs, ours, stream, tracker = loggers()
    exc = raised(ValueError("boom"))
    theirs.error("Task id=1 state=FAILED", exc_info=exc)
    ours.error("job 1 buried dead: ValueError: boom", exc_info=exc)
    printed = stream.getvalue()
    assert printed.count(TRACEBACK) == 1, printed
    assert printed.endswith(" ERROR job 1 buried dead: ValueError: boom\n"), printed
    # Other handlers (Sentry's) still get the exception, and format it themselves.
    (record,) = tracker.records
    assert record.exc_info is not None
    assert record.exc_info[1] is exc
    assert TRACEBACK in logging.Formatter().format(record)


def test_each_run_of_an_exception_raised_again_prints_its_traceback() -> None:
    """A module-level exception instance raised by each run is the same object every
    time: each run's first record still prints the traceback, with or without
    Django's."""
    theirs, ours, stream, _ = loggers()
    same = ValueError("again")
    for _ in range(2):
        theirs.error("Task state=FAILED", exc_info=raised(same))
        ours.error("job buried dead", exc_info=same)
    assert stream.getvalue().count(TRACEBACK) == 2, stream.getvalue()
    for _ in range(2):
        ours.error("job buried dead", exc_info=raised(same))
    assert stream.getvalue().count(TRACEBACK) == 4, stream.getvalue()


def test_other_exceptions_and_other_threads_print_their_tracebacks() -> None:
    theirs, ours, stream, _ = loggers()
    first, second = raised(ValueError("one")), raised(KeyError("two"))
    theirs.error("Task state=FAILED", exc_info=first)
    ours.error("job buried dead", exc_info=second)  # not the exception Django printed
    elsewhere = threading.Thread(target=lambda: ours.error("other thread", exc_info=first))
    theirs.error("Task state=FAILED", exc_info=first)
    elsewhere.start()
    elsewhere.join()
    assert stream.getvalue().count(TRACEBACK) == 4, stream.getvalue()
