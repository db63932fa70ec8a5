"""The package's shape, kept by tests: imports flow one way, states have one home,
modules stay small."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

import django_pgqueue

PACKAGE = Path(django_pgqueue.__file__).resolve().parent  # as installed, under tox
STATES = {"queued", "running", "done", "dead", "cancelled"}
MAX_LINES = 330


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """Every package module ``name`` imports, anywhere in it (functions, TYPE_CHECKING)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                # "from pkg import mod" imports the module; "from pkg import name", pkg.
                submodule = f"{base}.{alias.name}"
                targets.add(submodule if submodule in known else base)
    return {t for t in targets if t in known and t != name}


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imported(name, path, known) for name, path in found.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                found.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def test_no_module_of_the_package_imports_itself_back() -> None:
    """Counting imports inside functions and under TYPE_CHECKING."""
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]


@pytest.mark.parametrize("name", sorted(modules()))
def test_no_status_is_spelled_outside_the_states_home(name: str) -> None:
    if name == "django_pgqueue.records":
        return  # JobStatus lives here
    literals = [
        node.value
        for node in ast.walk(ast.parse(modules()[name].read_text()))
        if isinstance(node, ast.Constant) and node.value in STATES
    ]
    assert literals == [], f"{name} spells job states {literals}: use records.JobStatus"


@pytest.mark.parametrize("name", sorted(modules()))
def test_modules_stay_small(name: str) -> None:
    lines = len(modules()[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines"


def test_the_sdist_ships_every_local_package_the_tests_import() -> None:
    """The sdist can run its own tests: what they import from the source tree is in it."""
    tests = Path(__file__).resolve().parent.parent
    root = tests.parent
    pyproject = root / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("run from a tree without pyproject.toml (tox's)")
    shipped = set(
        tomllib.loads(pyproject.read_text())["tool"]["hatch"]["build"]["targets"]["sdist"][
            "include"
        ]
    )
    local = {p.name for p in root.iterdir() if (p / "__init__.py").exists()}
    used = set()
    for path in tests.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                used |= {alias.name.partition(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                used.add(node.module.partition(".")[0])
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                head = node.value.partition(".")[0]  # "benchmarks.settings", a module by name
                if head in local and "." in node.value:
                    used.add(head)
    assert (used & local) - shipped == set()


#: The first psycopg-binary release with wheels for each Python (3.13's came in 3.2.2).
FIRST_BINARY_WHEELS = {"3.12": (3, 1, 12), "3.13": (3, 2, 2)}


def test_the_binary_extra_floor_installs_on_every_python_the_classifiers_name() -> None:
    """``pip install "django-pgqueue[binary]" psycopg==<floor>`` finds a psycopg-binary."""
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("run from a tree without pyproject.toml (tox's)")
    project = tomllib.loads(pyproject.read_text())["project"]
    (requirement,) = project["optional-dependencies"]["binary"]
    floor = tuple(int(part) for part in requirement.partition(">=")[2].split("."))
    pythons = {
        c.rpartition(" :: ")[2]
        for c in project["classifiers"]
        if c.startswith("Programming Language :: Python :: 3.")
    }
    assert pythons <= FIRST_BINARY_WHEELS.keys(), "add those Pythons to FIRST_BINARY_WHEELS"
    assert floor >= max(FIRST_BINARY_WHEELS[python] for python in pythons), requirement
