"""JSON encoding of job arguments and results, with errors that name the bad value."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from django_pgqueue.exceptions import InvalidJobArguments
from django_pgqueue.validation import storable as _storable

_encode = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False).encode
_decode = json.JSONDecoder().decode


@dataclasses.dataclass(frozen=True, slots=True)
class Encoded:
    """A result already checked and encoded (by an invoker that had to encode it to
    report it): the executor stores ``text`` instead of encoding the value again."""

    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class Refused:
    """A result an invoker found it cannot store, with the error to record: the
    executor buries the job with it at once, as it does a value it cannot encode."""

    error: BaseException


#: Deeper values are refused: Python's own JSON decoder (in the worker, or Django
#: reading a row back) gives up at a depth that depends on the Python version, so a
#: value nested deeper could be stored but never run. 200 is well inside them all.
MAX_DEPTH = 200


def _find_bad(value: Any, path: str, depth: int = 0) -> tuple[str, Any] | None:
    if depth > MAX_DEPTH:
        return path, _TooDeep()
    if isinstance(value, str):
        return None if _storable(value) else (path, value)
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        try:
            str(value)  # past sys.get_int_max_str_digits() it cannot be written, nor read
        except ValueError:
            return path, _TooLong()
        return None
    if isinstance(value, float):
        return (
            None if value == value and value not in (float("inf"), float("-inf")) else (path, value)
        )
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _find_bad(item, f"{path}[{index}]", depth + 1)
            if found:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or not _storable(key):
                return f"{path} key {key!r}", key
            found = _find_bad(item, f"{path}[{key!r}]", depth + 1)
            if found:
                return found
        return None
    return path, value


#: A JSON string, or a number Python wrote with a positive exponent: a float of 1e16
#: or more (Python writes no int that way).
_EXPONENT = re.compile(r'"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?e\+\d+')


#: A JSON string, or the float -0.0 as Python writes it.
_NEGATIVE_ZERO = re.compile(r'"(?:[^"\\]|\\.)*"|-0\.0(?![\d])')


def _for_jsonb(encoded: str) -> str:
    """``encoded`` with its floats of 1e16 or more written out in full with a decimal
    point. jsonb keeps numbers as numeric and writes ``1e+16`` back as
    ``10000000000000000``, which reads back as an int; ``10000000000000000.0``
    reads back as the float it was (the full expansion of a float is exact)."""
    if "e+" not in encoded:
        return encoded
    return _EXPONENT.sub(lambda m: m[0] if m[0][0] == '"' else f"{float(m[0]):.1f}", encoded)


def _negative_zero(encoded: str) -> bool:
    """Whether ``encoded`` may hold the number -0.0: ``-0.0`` ends a number token
    (``-0.05`` does not), so it is followed by ``,``, ``]``, ``}`` or the end."""
    return "-0.0" in encoded and (
        "-0.0," in encoded or "-0.0]" in encoded or "-0.0}" in encoded or encoded[-4:] == "-0.0"
    )


def _stored(encoded: str, read_back: Any) -> tuple[str, Any]:
    """The text to store, and the value as it reads back from the row. numeric has no
    negative zero: ``-0.0`` is written ``0.0``, as jsonb keeps it."""
    stored = _for_jsonb(encoded)
    if not _negative_zero(stored):
        return stored, read_back
    stored = _NEGATIVE_ZERO.sub(lambda m: m[0] if m[0][0] == '"' else "0.0", stored)
    return stored, _decode(stored)


_CONTAINERS = (list, tuple, dict)
_EMPTY = frozenset({list, tuple, dict})


def _may_nest_too_deep(encoded: str, value: Any) -> bool:
    """True if something in ``value`` lies deeper than MAX_DEPTH: the depth rule of
    :func:`_find_bad`, for a value the fast path has already encoded."""
    # No deeper than it has brackets: a bound that clears nearly every value at C
    # speed. Past it, the containers are walked level by level.
    if encoded.count("[") + encoded.count("{") <= MAX_DEPTH:
        return False
    level = [value]
    for _ in range(MAX_DEPTH):
        below: list[Any] = []
        add = below.append
        for container in level:
            for item in container.values() if isinstance(container, dict) else container:
                if isinstance(item, _CONTAINERS):
                    add(item)
        if not below:
            return False
        level = below
    return any(level)  # a non-empty container at MAX_DEPTH holds something deeper


class _TooDeep:
    """Marks the place where a value is nested deeper than MAX_DEPTH."""


class _TooLong:
    """Marks an integer with more digits than Python converts to or from text."""

    def __repr__(self) -> str:
        return "an integer with too many digits"


def _storable_json(encoded: str) -> bool:
    # json writes NUL as the escape \u0000, which jsonb refuses too.
    return "\\u0000" not in encoded and _storable(encoded)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def jsonb_text_problem(text: str) -> str | None:
    """Why PostgreSQL's jsonb would refuse the JSON text ``text``, or None (for a
    result given as text, which nothing here encoded)."""
    if not _storable_json(text):
        return "holds \\u0000 or a lone surrogate, which jsonb cannot store"
    try:  # numbers as text: jsonb takes any length of digits, int() does not
        value = json.loads(text, parse_int=str, parse_float=str, parse_constant=_no_constant)
    except RecursionError:
        return "nests too deeply to read"
    except ValueError as exc:
        return f"is not JSON text ({exc})"
    # The depth rule, not this Python's decoder (3.13 reads far deeper than 3.12):
    # what one worker stores, any worker or reader must be able to decode.
    if isinstance(value, _CONTAINERS) and _may_nest_too_deep(text, value):
        return "nests too deeply to read"
    return None


def dumps(value: Any, what: str, *, returned: bool = False) -> str:
    """Encode ``value`` as JSON, or raise :class:`InvalidJobArguments` naming the bad part.

    ``what`` names the value in the message (``"args"``, ``"kwargs"``, ``"the return
    value"``); ``returned`` words the advice for a task's return value rather than
    for a caller's arguments.
    Only plain JSON is accepted: str, int, float (finite), bool, None, lists,
    tuples and dicts with string keys. Anything else would come back different,
    or not at all, so it is refused before anything is written.
    """
    return dumps_read_back(value, what, returned=returned)[0]


def dumps_read_back(value: Any, what: str, *, returned: bool = False) -> tuple[str, Any]:
    """:func:`dumps`, with the value as the JSON reads back: a fresh copy (tuples
    become lists), which is what a worker will pass to the task. Checking the
    encoding decodes it anyway, so the copy costs nothing."""
    if value is None:
        return "null", None  # what most tasks return
    if not value and type(value) in _EMPTY:  # no arguments of one kind: half the calls
        return ("{}", {}) if type(value) is dict else ("[]", [])
    try:
        encoded = _encode(value)
        # Fast path, all in C: if the JSON reads back equal, nothing was lost. The
        # depth rule is checked too: this Python may encode and decode deeper
        # (about 1,500 levels on 3.12, 10,000 on 3.13) than the one that reads it.
        read_back = _decode(encoded)
        if (
            read_back == value
            and _storable_json(encoded)
            and not _may_nest_too_deep(encoded, value)
        ):
            return _stored(encoded, read_back)
    except (TypeError, ValueError, RecursionError):
        encoded = None
    # Only when it does not read back (or cannot be encoded) walk the value to
    # name the culprit; tuples read back as lists, which the walk accepts.
    found = _find_bad(value, what)
    if found is None and encoded is not None:
        return _stored(encoded, _decode(encoded))
    if found is None:  # the walk accepts nothing the encoder refuses; kept as a backstop
        raise InvalidJobArguments(f"{what} cannot be encoded as JSON")
    path, bad = found
    verb = "return" if returned else "pass"
    if isinstance(bad, _TooDeep):
        raise InvalidJobArguments(
            f"{what} is nested more than {MAX_DEPTH} levels deep (at {path[:80]}...), which "
            f"the worker could not decode; {verb} a flatter value"
        )
    if isinstance(bad, _TooLong):
        raise InvalidJobArguments(
            f"{path} is {bad!r}, which JSON cannot carry; {verb} it as a string"
        )
    shown = repr(bad)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    if isinstance(bad, str):
        raise InvalidJobArguments(
            f"{path} is the string {shown}, which PostgreSQL cannot store: it holds a NUL "
            "character or a lone surrogate"
        )
    example = "an id, or a dict of plain values" if returned else "an id or an ISO date string"
    raise InvalidJobArguments(
        f"{path} is {type(bad).__module__}.{type(bad).__qualname__} {shown}, which is not JSON; "
        f"{verb} only str, int, float, bool, None, lists and dicts with string keys "
        f"(for example {example})"
    )


def dumps_result(value: Any) -> str:
    """A task's return value as JSON, or a plain ``TypeError`` that names the bad part.

    Plain, not :class:`InvalidJobArguments`: nobody passed anything wrong, and
    Django's Tasks framework (with its backends' contract tests) reports a return
    value it cannot store as ``builtins.TypeError``.
    """
    try:
        return dumps(value, "the return value", returned=True)
    except InvalidJobArguments as exc:
        raise TypeError(str(exc)) from None
