"""Issue 7's support matrix and extras, as a packager reads them: the classifiers,
tox's environments, the versions the docs state and the extras the docs tell users
to install all say the same thing."""

from __future__ import annotations

import configparser
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def pyproject() -> dict[str, Any]:
    path = ROOT / "pyproject.toml"
    if not path.exists():
        pytest.skip("run from a tree without pyproject.toml (tox's)")
    with path.open("rb") as file:
        return tomllib.load(file)


def classified(prefix: str) -> set[str]:
    """The versions of the classifiers 'prefix :: X.Y' (3.12, 5.2, ...)."""
    found = set()
    for classifier in pyproject()["project"]["classifiers"]:
        match = re.fullmatch(re.escape(prefix) + r" :: (\d+\.\d+)", classifier)
        if match:
            found.add(match.group(1))
    return found


def tox_envs() -> list[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / "tox.ini")
    return config["tox"]["env_list"].split()


def test_the_classifiers_name_the_pythons_and_djangos_tox_runs() -> None:
    """tox's py{312,313}-django{52,60,61}: the issue's matrix, and the classifiers'."""
    (matrix,) = [env for env in tox_envs() if env.startswith("py{")]
    pythons, djangos = re.fullmatch(r"py\{([\d,]+)\}-django\{([\d,]+)\}", matrix).groups()  # type: ignore[union-attr]
    assert {f"{v[0]}.{v[1:]}" for v in pythons.split(",")} == {"3.12", "3.13"}
    assert {f"{v[0]}.{v[1:]}" for v in djangos.split(",")} == {"5.2", "6.0", "6.1"}
    assert classified("Programming Language :: Python") == {"3.12", "3.13"}
    assert classified("Framework :: Django") == {"5.2", "6.0", "6.1"}
    project = pyproject()["project"]
    assert project["requires-python"] == ">=3.12"
    assert "Django>=5.2" in project["dependencies"]
    assert "Typing :: Typed" in project["classifiers"]


def test_every_extra_the_docs_tell_users_to_install_exists() -> None:
    """`pip install "django-pgqueue[backport,binary]"` and the like, in the README and
    docs/: an extra the package does not declare installs nothing, with only a pip
    warning."""
    extras = set(pyproject()["project"]["optional-dependencies"])
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    named: dict[str, set[str]] = {}
    for page in pages:
        for group in re.findall(r"django-pgqueue\[([a-z,\s-]+)\]", page.read_text()):
            for extra in group.split(","):
                named.setdefault(extra.strip(), set()).add(page.relative_to(ROOT).as_posix())
    assert {"binary", "backport", "metrics"} <= set(named)
    assert {extra: pages for extra, pages in named.items() if extra not in extras} == {}


def floor(requirement: str) -> tuple[int, ...]:
    version = re.fullmatch(r"[\w\[\]-]+>=([\d.]+)", requirement).group(1)  # type: ignore[union-attr]
    return tuple(int(part) for part in version.split("."))


def test_the_psycopg_floor_is_one_whose_notifies_sees_what_hung_up_read() -> None:
    """With psycopg 3.2.2 and 3.2.3 (which the floor allowed),
    tests/integration/test_statement_runner.py's
    test_looking_for_a_hang_up_leaves_a_notification_to_the_listener fails: a
    notification goodbye.hung_up read from the socket never reaches notifies(); from 3.2.4
    on it passes. The dependency, the binary extra and the groups all ask for 3.2.4."""
    project = pyproject()
    floors = [
        floor(requirement)
        for requirement in [
            *project["project"]["dependencies"],
            *project["project"]["optional-dependencies"]["binary"],
            *project["dependency-groups"]["test"],
            *project["dependency-groups"]["docs"],
        ]
        if isinstance(requirement, str) and re.match(r"psycopg(\[binary\])?>=", requirement)
    ]
    assert len(floors) == 4
    assert min(floors) >= (3, 2, 4)
