"""Do a call's arguments fit a task? The one rule, applied at enqueue (both APIs)
and again by the worker to every row it claims, since a row can be written by anyone.

Binding reads the call's shape (how many positional arguments, which keyword
names), never its values, so the answer is cached per task and shape.
"""

from __future__ import annotations

import inspect
from functools import cache, lru_cache
from inspect import Parameter
from typing import Any

from django_pgqueue import wording


@cache
def _signature(func: Any) -> inspect.Signature | None:
    """The callable's own signature; for a ``functools.wraps`` wrapper that passes
    ``(*args, **kwargs)`` on (logging, ``atomic``), that of what it wraps, one
    wrapper at a time: a wrapper with parameters of its own under it (one that
    takes an id and passes an object) is the one whose signature counts."""
    seen = {id(func)}
    try:
        own = inspect.signature(func, follow_wrapped=False)
        while _passes_on(own) and hasattr(func, "__wrapped__"):
            func = func.__wrapped__
            if id(func) in seen:  # a __wrapped__ loop (set by hand): no signature to read
                return None
            seen.add(id(func))
            own = inspect.signature(func, follow_wrapped=False)
    except (TypeError, ValueError):  # a builtin or C function without one
        return None
    return own


def _passes_on(signature: inspect.Signature) -> bool:
    kinds = {p.kind for p in signature.parameters.values()}
    return kinds == {Parameter.VAR_POSITIONAL, Parameter.VAR_KEYWORD}


def _described(func: Any, signature: inspect.Signature) -> str:
    """``send_receipt(order_id, *, notify=False)``: the call's shape, without the
    annotations (often strings, under ``from __future__ import annotations``)."""
    bare = signature.replace(
        parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
        return_annotation=signature.empty,
    )
    return f"{getattr(func, '__qualname__', None) or getattr(func, '__name__', 'task')}{bare}"


def check_arguments(target: Any, args: Any, kwargs: Any) -> None:
    """Raise TypeError if ``args``/``kwargs`` cannot be passed to ``target``'s function.

    The one rule for "do these arguments fit the task": enqueue applies it (both
    APIs), and the worker applies it again to every row it claims, since a row
    can be written by anyone. ``target`` is a registered object: a plain
    callable, or one with ``.func`` (our TaskFunction, a Tasks-framework Task);
    one whose ``takes_context`` is true is passed a context first (see _signature).
    """
    func = getattr(target, "func", target)
    if not isinstance(args, list | tuple) or not isinstance(kwargs, dict):
        raise TypeError(
            f"malformed arguments: args must be a JSON list and kwargs a JSON "
            f"object, got {type(args).__name__} and {type(kwargs).__name__}"
        )
    context = bool(getattr(target, "takes_context", False))
    problem = _shape_problem(func, context, len(args), tuple(kwargs))
    if problem is not None:
        # False on a Tasks-framework task (the direct API's have no such option).
        context_off = getattr(target, "takes_context", None) is False
        raise TypeError(problem + (_no_context(func) if context_off else ""))


def _no_context(func: Any) -> str:
    """The likely mistake when a Tasks-framework task's first parameter is ``context``
    and it is not declared ``takes_context=True``: the call fills that parameter
    (nothing passes a context), so the call seems an argument short."""
    signature = _signature(func)
    first = next(iter(signature.parameters), None) if signature is not None else None
    if first != "context":
        return ""
    return (
        "; its first parameter is 'context', which is passed a TaskContext only when "
        "the task is declared with @task(takes_context=True)"
    )


_BY_NAME = (Parameter.POSITIONAL_OR_KEYWORD, Parameter.KEYWORD_ONLY)


@lru_cache(maxsize=4096)
def _shape_problem(func: Any, context: bool, positional: int, names: tuple[str, ...]) -> str | None:
    """Why ``positional`` arguments (after the context, if any) and the keyword
    arguments ``names`` cannot be passed to ``func``; None if they can. Binding
    reads the call's shape, never its values, so the answer holds for every
    later call of the same shape: the worker asks once per task, not per job."""
    signature = _signature(func)
    if signature is None:
        return None
    params = signature.parameters.values()
    # Named first, as Python's own call does: bind() would say "missing 'order_id'".
    if not any(p.kind is p.VAR_KEYWORD for p in params) and (
        unexpected := [name for name in names if name not in signature.parameters]
    ):
        # Not one the call passes by position already: no did-you-mean for it.
        slots = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        passed = slots[: context + positional]
        takes = [p.name for p in params if p.kind in _BY_NAME and p not in passed]
        return (
            f"arguments do not match the task's signature {_described(func, signature)}: "
            f"got an unexpected keyword argument {unexpected[0]!r}"
            f"{wording.did_you_mean(unexpected[:1], takes)}"
        )
    try:
        signature.bind(*([None] * (context + positional)), **dict.fromkeys(names))
    except TypeError as exc:
        return f"arguments do not match the task's signature {_described(func, signature)}: {exc}"
    return None
