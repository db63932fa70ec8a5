"""The named SQL statements of ``queries.sql``, loaded once at import.

A line ``-- include: NAME`` inside a block is replaced by the text of block NAME,
so two statements that differ in one part (the claim of every queue, and the
claim of chosen queues) share the rest instead of copying it. Blocks whose
names start with ``_`` are such parts, not statements.
"""

from __future__ import annotations

import re
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"^--\s*include:\s*(\w+)\s*$", re.MULTILINE)


def _load() -> dict[str, str]:
    text = resources.files(__package__).joinpath("queries.sql").read_text(encoding="utf-8")
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise RuntimeError(f"queries.sql defines {name!r} twice")
        queries[name] = body.strip().rstrip(";")
    for name, body in queries.items():
        queries[name] = _INCLUDE.sub(lambda m: queries[m[1]], body)
    return {name: body for name, body in queries.items() if not name.startswith("_")}


QUERIES: dict[str, str] = _load()


def query(name: str) -> str:
    """The text of one named statement."""
    return QUERIES[name]
