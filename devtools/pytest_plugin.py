"""The test session's database: ``-p devtools.pytest_plugin`` in pyproject's addopts.

With ``DATABASE_URL`` unset it starts an embedded PostgreSQL before pytest-django
sets Django up, so ``tests.settings`` finds its URL in the environment (and worker
subprocesses inherit it). The server belongs to the pytest process: it is
stopped when the session ends, and by its watchdog if pytest is killed.
``devtools.embedded_pg.current()`` returns it, for tests that restart it.
"""

from __future__ import annotations

import pytest

from devtools import embedded_pg


@pytest.hookimpl(tryfirst=True)  # pytest-django's own hook sets Django up
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    options = early_config.known_args_namespace
    if options.help or options.version:
        return
    embedded_pg.ensure_database_url()


def pytest_unconfigure(config: pytest.Config) -> None:
    server = embedded_pg.current()
    if server is not None:
        server.destroy()
