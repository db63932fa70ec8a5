"""Contract of issue 11 (one home for each rule), as the package's source shows it:
the queue runs SQL one way, and an import left inside a function says why."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import django_pgqueue

PACKAGE = Path(django_pgqueue.__file__).resolve().parent  # as installed, under tox


def _calls(path: Path, attribute: str) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == attribute
    ]


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.joinpath("queue").glob("*.py")), ids=lambda path: path.name
)
def test_the_queue_runs_sql_only_through_the_runner(path: Path) -> None:
    """One way to run SQL: the queue's modules hand named statements to sql.runner;
    none opens a cursor of its own with a statement written in Python."""
    assert _calls(path, "cursor") == []
    assert _calls(path, "execute") == []


def _explained(node: ast.Import | ast.ImportFrom, parent: ast.AST, lines: list[str]) -> bool:
    """A comment says why: on the import, or from the line above the statement whose
    body holds it down to it, or on that try's except lines; or the function's
    docstring speaks of the import."""
    start = getattr(parent, "lineno", node.lineno)
    spans = [(start - 1, node.end_lineno or node.lineno)]
    if isinstance(parent, ast.Try):
        spans += [(h.lineno, h.lineno) for h in parent.handlers]
    if any("#" in line for first, last in spans for line in lines[first - 1 : last]):
        return True
    if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef):
        return "import" in (ast.get_docstring(parent) or "")
    return False


def test_every_import_left_inside_a_function_says_why() -> None:
    """Issue 11: where an import must stay inside a function, a comment says so."""
    silent = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import | ast.ImportFrom) and not _explained(
                    node, parents[node], lines
                ):
                    silent.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert silent == []
