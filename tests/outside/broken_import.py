"""A tasks module that fails as it is imported: a dependency that is not installed.
Only the tests that name it in TASK_MODULES import it."""

from __future__ import annotations

import a_dependency_that_is_not_installed  # type: ignore[import-not-found]  # noqa: F401
