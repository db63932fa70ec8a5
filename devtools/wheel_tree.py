"""``python devtools/wheel_tree.py SOURCE DEST``: the repository without the package, for tox.

tox installs the built wheel; running the tests from the repository root would
import ``django_pgqueue`` from the source tree instead (the working directory
comes first on ``sys.path``). DEST gets symlinks to everything the tests need
(tests, devtools, benchmarks, example_project, docs, manage.py, pyproject.toml)
but not the package, so the tests, and the worker subprocesses they start,
import the wheel.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

NEEDED = (
    "tests",
    "devtools",
    "benchmarks",  # a test imports its settings (tests/devtools/test_embedded_pg_lifetime.py)
    "example_project",
    "docs",
    "manage.py",
    "pyproject.toml",
    "README.md",
)


def build(source: Path, dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in NEEDED:
        (dest / name).symlink_to(source / name)


if __name__ == "__main__":
    build(Path(sys.argv[1]).resolve(), Path(sys.argv[2]))
