"""The test session's database: ``-p devtools.pytest_plugin`` in pyproject's addopts.

With ``DATABASE_URL`` unset it starts an embedded PostgreSQL before pytest-django
sets Django up, so ``tests.settings`` finds its URL in the environment (and worker
subprocesses inherit it). The server belongs to the pytest process: it is
stopped when the session ends, and by its watchdog if pytest is killed.
``devtools.embedded_pg.current()`` returns it, for tests that restart it.

Before each transactional test's flush, sessions the test left holding locks are
terminated (``devtools.lock_guard``), and the test fails at its teardown.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import pytest

from devtools import embedded_pg, lock_guard

_undo: list[Callable[[], None]] = []


@pytest.hookimpl(tryfirst=True)  # pytest-django's own hook sets Django up
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    options = early_config.known_args_namespace
    if options.help or options.version:
        return
    embedded_pg.ensure_database_url()


def pytest_configure(config: pytest.Config) -> None:
    _undo.append(lock_guard.install())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None]:
    """Fails the teardown of a test whose flush had to end sessions it left."""
    try:
        yield
    except BaseException as exc:
        report = lock_guard.take_report()
        if report is not None:
            exc.add_note(report)
        raise
    report = lock_guard.take_report()
    if report is not None:
        pytest.fail(report, pytrace=False)


def pytest_unconfigure(config: pytest.Config) -> None:
    while _undo:
        _undo.pop()()
    server = embedded_pg.current()
    if server is not None:
        server.destroy()
