"""JSON encoding of job arguments and results, with errors that name the bad value."""

from __future__ import annotations

import json
from typing import Any

from django_pgqueue.exceptions import InvalidJobArguments

_encode = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False).encode
_decode = json.JSONDecoder().decode


def _find_bad(value: Any, path: str) -> tuple[str, Any] | None:
    if value is None or isinstance(value, bool | int | str):
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
            if not isinstance(key, str):
                return f"{path} key {key!r}", key
            found = _find_bad(item, f"{path}[{key!r}]")
            if found:
                return found
        return None
    return path, value


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
    if encoded is not None and _decode(encoded) == value:
        return encoded
    found = _find_bad(value, what)
    if found is None:
        return encoded if encoded is not None else _encode(value)
    path, bad = found
    shown = repr(bad)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    raise InvalidJobArguments(
        f"{path} is {type(bad).__module__}.{type(bad).__qualname__} {shown}, which is not JSON; "
        "pass only str, int, float, bool, None, lists and dicts with string keys "
        "(for example an id or an ISO date string)"
    )
