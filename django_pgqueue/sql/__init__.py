"""The named SQL statements of ``queries.sql``, loaded once at import.

A line ``-- include: NAME`` inside a block is replaced by the text of block NAME,
so two statements that differ in one part (the claim of every queue, and the
claim of chosen queues) share the rest instead of copying it. Blocks whose
names start with ``_`` are such parts, not statements.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"^--\s*include:\s*(\w+)\s*$", re.MULTILINE)
#: A string literal (kept whole) or a comment (dropped). queries.sql has no
#: dollar-quoted or double-quoted text that could hold "--".
_LITERAL_OR_COMMENT = re.compile(r"'(?:[^']|'')*'|--[^\n]*")


def _compact(text: str) -> str:
    """``text`` without its comments and blank lines.

    The comments are for readers of queries.sql. Sent, they cost on every call:
    psycopg caches the parsing of a statement's placeholders only for texts of at
    most 4 KiB, and the claim's comments alone took it past that.
    """
    text = _LITERAL_OR_COMMENT.sub(lambda m: m[0] if m[0].startswith("'") else "", text)
    return "\n".join(line.rstrip() for line in text.splitlines() if line.strip())


def _load() -> dict[str, str]:
    text = resources.files(__package__).joinpath("queries.sql").read_text(encoding="utf-8")
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise RuntimeError(f"queries.sql defines {name!r} twice")
        queries[name] = body.strip().rstrip(";")
    for name, body in queries.items():
        # A part may include parts in turn (a few levels at most).
        for _ in range(5):
            body = _INCLUDE.sub(lambda m: queries[m[1]], body)
        if _INCLUDE.search(body):
            raise RuntimeError(f"queries.sql: {name!r} includes parts too deeply")
        queries[name] = _compact(body)
    PARTS.update({name: body for name, body in queries.items() if name.startswith("_")})
    return {name: body for name, body in queries.items() if not name.startswith("_")}


#: The shared parts (blocks named _...), by name.
PARTS: dict[str, str] = {}
QUERIES: dict[str, str] = _load()


def query(name: str) -> str:
    """The text of one named statement."""
    return QUERIES[name]


#: The lock of the _free_runs part: rows another transaction holds are skipped.
_SKIP_LOCKED = "FOR NO KEY UPDATE OF j SKIP LOCKED"


@lru_cache(maxsize=8)
def waiting(name: str) -> str:
    """Statement ``name``, which starts from the _free_runs part, waiting for rows
    another transaction holds instead of skipping them. For callers that must write
    every run they still hold (``Job.objects.complete()`` and its kin): a row is
    also held for a moment by any claim whose scan passes its old version."""
    text = QUERIES[name]
    if text.count(_SKIP_LOCKED) != 1:
        raise ValueError(f"{name!r} does not start from _free_runs")
    return text.replace(_SKIP_LOCKED, "FOR NO KEY UPDATE OF j")


#: Parameters a statement variant may have written into its text instead of bound.
_LITERALS = {"limit": "%(limit)s::int", "queues": "%(queues)s::text[]"}


@lru_cache(maxsize=256)
def variant(name: str, *, limit: int, queues: tuple[str, ...] | None = None) -> str:
    """Statement ``name`` with its ``limit`` (and ``queues``) written into the text.

    For the claims: a bound LIMIT is costed as a tenth of the table, and a bound
    queue array as ten queues, so against a big backlog the prepared statement's
    generic plan looked expensive and was replanned on every call, or even
    JIT-compiled (some 15 ms a claim). With the values in the text the generic
    plan is exact. Callers keep the variants few (the worker claims in powers of
    two, for one list of queues), and pass only validated queue names.
    """
    text = QUERIES[name].replace(_LITERALS["limit"], str(int(limit)))
    if queues is not None:
        literal = ", ".join("'" + queue.replace("'", "''") + "'" for queue in queues)
        text = text.replace(_LITERALS["queues"], f"ARRAY[{literal}]::text[]")
    return text
