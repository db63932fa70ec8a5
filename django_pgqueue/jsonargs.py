"""JSON encoding of job arguments and results, with errors that name the bad value."""

from __future__ import annotations

import json
from typing import Any

from django_pgqueue.exceptions import InvalidJobArguments

_encode = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False).encode
_decode = json.JSONDecoder().decode


def _storable(text: str) -> bool:
    """PostgreSQL stores neither NUL characters nor lone surrogates."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _find_bad(value: Any, path: str) -> tuple[str, Any] | None:
    if isinstance(value, str):
        return None if _storable(value) else (path, value)
    if value is None or isinstance(value, bool | int):
        return None
    if isinstance(value, float):
        return None if value == value and value not in (float("inf"), float("-inf")) else (
            path, value)
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _find_bad(item, f"{path}[{index}]")
            if found:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or not _storable(key):
                return f"{path} key {key!r}", key
            found = _find_bad(item, f"{path}[{key!r}]")
            if found:
                return found
        return None
    return path, value


def _storable_json(encoded: str) -> bool:
    # json writes NUL as the escape \u0000, which jsonb refuses too.
    return "\\u0000" not in encoded and _storable(encoded)


def dumps(value: Any, what: str) -> str:
    """Encode ``value`` as JSON, or raise :class:`InvalidJobArguments` naming the bad part.

    ``what`` names the value in the message (``"args"``, ``"kwargs"``, ``"result"``).
    Only plain JSON is accepted: str, int, float (finite), bool, None, lists,
    tuples and dicts with string keys. Anything else would come back different,
    or not at all, so it is refused before anything is written.
    """
    try:
        encoded = _encode(value)
    except (TypeError, ValueError):
        encoded = None
    # Fast path, all in C: if the JSON reads back equal, nothing was lost. Only
    # when it does not (or cannot be encoded) walk the value to name the culprit;
    # tuples read back as lists, which the walk accepts.
    if encoded is not None and _decode(encoded) == value and _storable_json(encoded):
        return encoded
    found = _find_bad(value, what)
    if found is None:
        return encoded if encoded is not None else _encode(value)
    path, bad = found
    shown = repr(bad)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    if isinstance(bad, str):
        raise InvalidJobArguments(
            f"{path} is the string {shown}, which PostgreSQL cannot store: it holds a NUL "
            "character or a lone surrogate")
    raise InvalidJobArguments(
        f"{path} is {type(bad).__module__}.{type(bad).__qualname__} {shown}, which is not JSON; "
        "pass only str, int, float, bool, None, lists and dicts with string keys "
        "(for example an id or an ISO date string)"
    )
