"""The reference pages say what the code does: settings and their defaults,
command options, system check ids. A key, option or id added to the code without
docs fails here, and so does a documented default that differs from the code's."""

from __future__ import annotations

import ast
import dataclasses
import pkgutil
import re
from pathlib import Path
from typing import Any

import pytest
from django.core.management import load_command_class
from django.core.management.base import BaseCommand

import django_pgqueue
from django_pgqueue import conf
from django_pgqueue.management import commands

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
PACKAGE = Path(django_pgqueue.__file__).resolve().parent

OVERVIEW_ROW = re.compile(r"^\| `([A-Z_]+)` \| `([^`]*)` \|", re.MULTILINE)
SECTION = re.compile(r"^### `([A-Z_]+)`\n\nDefault: `([^`]*)`\.", re.MULTILINE)
CHECK_ID = re.compile(r"django_pgqueue\.[EW]\d{3}")


def code_defaults() -> dict[str, Any]:
    return {
        field.name: field.default_factory()
        if field.default is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING
        else field.default
        for field in dataclasses.fields(conf.Settings)
    }


def documented(pattern: re.Pattern[str]) -> dict[str, Any]:
    text = (REFERENCE / "settings.md").read_text(encoding="utf-8")
    found: dict[str, Any] = {}
    for key, default in pattern.findall(text):
        assert key not in found, f"{key} is documented twice"
        found[key] = ast.literal_eval(default)
    return found


@pytest.mark.parametrize("pattern", [OVERVIEW_ROW, SECTION], ids=["overview", "sections"])
def test_settings_reference_matches_the_code(pattern: re.Pattern[str]) -> None:
    code, docs = code_defaults(), documented(pattern)
    assert sorted(docs) == sorted(code), "settings in the code and in the reference differ"
    for key, default in code.items():
        # Same value and same type: 60 is not the documented 60.0.
        assert (docs[key], type(docs[key])) == (default, type(default)), key


def command_section(name: str) -> str:
    text = (REFERENCE / "commands.md").read_text(encoding="utf-8")
    match = re.search(rf"^## `{name}`\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"docs/reference/commands.md has no section for {name}"
    return match[1]


def own_options(name: str) -> set[str]:
    def options(command: BaseCommand, prog: str) -> set[str]:
        parser = command.create_parser("manage.py", prog)
        return {opt for action in parser._actions for opt in action.option_strings}

    return options(load_command_class("django_pgqueue", name), name) - options(
        BaseCommand(), "base"
    )


COMMANDS = sorted(module.name for module in pkgutil.iter_modules(commands.__path__))


def test_every_command_is_found() -> None:
    assert COMMANDS == [
        "pausequeue",
        "prunejobs",
        "queuestats",
        "reapjobs",
        "resumequeue",
        "runworker",
        "schedules",
    ]


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_option_is_documented(name: str) -> None:
    section = command_section(name)
    missing = sorted(opt for opt in own_options(name) if f"`{opt}" not in section)
    assert not missing, f"{name} options missing from docs/reference/commands.md: {missing}"


def test_system_check_ids_match_the_code() -> None:
    in_code = {
        match
        for path in PACKAGE.rglob("*.py")
        for match in CHECK_ID.findall(path.read_text(encoding="utf-8"))
    }
    in_docs = set(CHECK_ID.findall((REFERENCE / "checks.md").read_text(encoding="utf-8")))
    assert in_code, "no check ids found in the code"
    assert in_docs == in_code


def test_the_readme_pypi_shows_links_to_files_of_the_repository() -> None:
    """PyPI shows the README without the repository: a relative link (docs/...) was
    dead there. The build makes each absolute, to a file this tree has."""
    if not (ROOT / "pyproject.toml").exists():
        pytest.skip("run from a tree without pyproject.toml (tox's)")
    from hatchling.metadata.core import ProjectMetadata
    from hatchling.plugin.manager import PluginManager

    published = ProjectMetadata(str(ROOT), PluginManager()).core.readme
    home = "https://github.com/django-pgqueue/django-pgqueue/blob/main/"
    targets = re.findall(r"\]\(([^)\s]+)\)", published)
    assert len(targets) >= len(re.findall(r"\]\(docs/", (ROOT / "README.md").read_text())) > 0
    for target in targets:
        assert target.startswith(("https://", "http://")), target
        if target.startswith(home):
            assert (ROOT / target.removeprefix(home).partition("#")[0]).exists(), target


FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def github_anchors(page: Path) -> set[str]:
    """The ids GitHub gives a page's headings: lower case, punctuation but - and _
    dropped, each space a -, so "### `queuestats --check`" is queuestats---check."""
    headings = re.findall(r"^#+\s+(.*?)\s*$", FENCE.sub("", page.read_text()), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_every_relative_link_of_the_docs_reaches_its_file_and_heading() -> None:
    """The README and docs are read on GitHub, where a link's #anchor is the
    heading's GitHub id; one that names no heading lands at the top of the page."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        for link in re.findall(r"\]\(([^)\s]+)\)", FENCE.sub("", page.read_text())):
            if link.startswith(("https://", "http://", "mailto:")):
                continue
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                broken.append(f"{page.relative_to(ROOT)}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in github_anchors(target):
                broken.append(f"{page.relative_to(ROOT)}: {link} (no such heading)")
    assert len(pages) > 10
    assert broken == []
