"""How counts and durations are written in every message: one rule, one home.

``count(1, "job")`` is ``1 job``, never ``1 jobs``; ``duration(200)`` is
``3 min 20 s``. The worker's log lines, the commands' output and the admin use them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence

#: What every way in says when the app is missing from INSTALLED_APPS (also
#: installed.NOT_INSTALLED; here so that the models' base can say it without a cycle).
NOT_INSTALLED = (
    "django_pgqueue is not in INSTALLED_APPS, so there is no job table to write to: add "
    '"django_pgqueue" to INSTALLED_APPS and run `python manage.py migrate`'
)

#: Why a task must be at the top level of its module, after where it was found instead.
TOP_LEVEL_ONLY = (
    "a worker finds a task by its module and a name at the top level of that module. "
    "Define it with def at the top level of its module."
)

_UNITS = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))


def shown(name: str) -> str:
    """A name read from a job row (task, queue, key) as a log line prints it: as it is,
    or, holding a line break or another control character (written by hand), as its
    repr, so that one row cannot forge a log line of its own."""
    return name if name.isprintable() else repr(name)


def count(number: int, noun: str, plural: str | None = None) -> str:
    """``1 job``, ``0 jobs``, ``3 jobs`` (``plural`` for nouns that take more than an s)."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def duration(seconds: float) -> str:
    """A short human duration with at most two units: ``45 s``, ``3 min 20 s``, ``2 d 4 h``."""
    left = max(0, int(seconds))
    parts: list[str] = []
    for unit, size in _UNITS:
        if left >= size or (unit == "s" and not parts):
            parts.append(f"{left // size} {unit}")
            left %= size
        elif parts:
            break  # "2 h 0 min 5 s" reads worse than "2 h"
        if len(parts) == 2:
            break
    return " ".join(parts)


def not_top_level(qualname: str) -> str | None:
    """Where a function whose ``__qualname__`` is ``qualname`` is defined when that is
    not the top level of its module (``inside the function 'make'``, ``in the class
    'Mailer'``): a worker could not find it as a task. None at the top level."""
    if "<locals>" in qualname:
        return f"inside the function {qualname.rpartition('.<locals>.')[0]!r}"
    if "." in qualname:
        return f"in the class {qualname.rpartition('.')[0]!r}"
    return None


def task_path(func: object) -> str:
    """``shop.tasks.send``: where a task's function is (its module and qualified name),
    for a message; whatever a callable without them (a ``partial``) can say."""
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    return f"{getattr(func, '__module__', None)}.{name}" if name else repr(func)


def did_you_mean(unknown: Iterable[str], known: Iterable[str], *, word_added: bool = False) -> str:
    """`` (did you mean 'CONCURRENCY'?)`` for the unknown names that look like known
    ones (in any case), or an empty string (``word_added``: see :func:`meant`)."""
    choices = list(known)
    return said_meant({name: meant(name, choices, word_added=word_added) for name in unknown})


def said_meant(found: Mapping[str, Sequence[str]]) -> str:
    """`` (did you mean 'LEASE'?)``, `` (did you mean 'LEASE' for 'Lease', ...?)``: what
    :func:`did_you_mean` says of each unknown name and the known ones it may mean (those
    with none left out)."""
    said = {wrong: either(right) for wrong, right in found.items() if right}
    if len(said) == 1:
        return f" (did you mean {next(iter(said.values()))}?)"
    listed = ", ".join(f"{right} for {wrong!r}" for wrong, right in said.items())
    return f" (did you mean {listed}?)" if said else ""


def either(names: Sequence[str]) -> str:
    """``'A'``, ``'A' or 'B'``, ``'A', 'B' or 'C'``: the names quoted, :func:`joined`."""
    return joined(list(map(repr, names)), "or")


def joined(words: Sequence[str], conjunction: str) -> str:
    """``A``, ``A and B``, ``A, B and C`` (``conjunction`` "and"; "or" likewise)."""
    if len(words) < 2:
        return "".join(words)
    return f"{', '.join(words[:-1])} {conjunction} {words[-1]}"


def closest(name: str, known: Iterable[str], *, word_added: bool = False) -> str | None:
    """The one known name that ``name`` looks most like (see :func:`meant`); None if
    none does, or if several do."""
    found = meant(name, known, word_added=word_added)
    return found[0] if len(found) == 1 else None


def meant(name: str, known: Iterable[str], *, word_added: bool = False) -> tuple[str, ...]:
    """The known names that ``name`` may mean, in any case: the one it looks most like,
    or none. ``word_added``, for settings keys only: or every one that ``name`` begins
    up to an underscore (``BACKOFF``: ``BACKOFF_BASE``, ``BACKOFF_JITTER`` and
    ``BACKOFF_MAX``, not whichever difflib prefers), else the one that ``name`` is with a
    word added (``LEASE_SECONDS``). A task, an argument or a database alias with a word
    added (``send_email``, ``user_id``, ``default_replica``) is most often another one."""
    by_fold = {k.casefold(): k for k in known}
    folded = str(name).casefold()
    if folded in by_fold:
        return (by_fold[folded],)
    if word_added and (begun := sorted(k for k in by_fold if k.startswith(folded + "_"))):
        return tuple(by_fold[k] for k in begun)
    close = difflib.get_close_matches(folded, list(by_fold), n=1, cutoff=0.75)
    if not close and word_added:  # LEASE_SECONDS, QUEUES_LIST
        close = sorted((k for k in by_fold if folded.startswith(k + "_")), key=len)[-1:]
    return tuple(by_fold[k] for k in close)


def alike(name: str, known: Iterable[str]) -> str | None:
    """``'emails'`` or ``'emails' or 'email'``: the known queue names that ``name``
    looks like (a typo), for a "did you mean"; None if none does."""
    close = difflib.get_close_matches(name, sorted(known), n=3)
    return " or ".join(map(repr, close)) if close else None
