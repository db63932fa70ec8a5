"""Whether and when a job runs again after a run that did not succeed.

One :class:`RetryPolicy` decides, for the executor (a task raised) and the
reaper (a run's lease expired) alike. ``retry_on`` and ``discard_on`` are given
with the task (``@task(retry_on=...)``, ``options(task, retry_on=...)``) or per
enqueue (``.using(...)``), and each job row keeps its own as the exceptions'
class paths (JSON, column ``retry_policy``): the worker matches a raised
exception's class and its bases against those names, so it never imports
anything a row names. A row's policy no worker can read (written by hand) gives
way to its task's, with a warning. The default retries every exception. The delays are
``backoff.retry_delay``: exponential from the job's ``backoff`` (or
``PGQUEUE["BACKOFF_BASE"]``), capped, with jitter.
"""

from __future__ import annotations

import copyreg
import dataclasses
import json
import logging
import math
import sys
from functools import lru_cache
from types import ModuleType
from typing import Any, cast

from django_pgqueue import conf, validation, wording
from django_pgqueue.backoff import retry_delay
from django_pgqueue.exceptions import TooManySnoozes, UnreadablePolicy

logger = logging.getLogger("django_pgqueue")

Classes = tuple[type[BaseException], ...]
Paths = tuple[str, ...]

#: The longest ``retry_policy`` a row may keep (JSON text, some 600 class paths): a
#: longer one, written by hand, would cost a Tasks job a stand-in class a path a run.
MAX_POLICY_CHARS = 65_536


def class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclasses.dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``retry_on``: only these exceptions are retried (None: every exception);
    ``discard_on``: these bury the job at once, and win over ``retry_on``. Both
    hold class paths (``builtins.ValueError``); an exception matches when its
    class, or one of its bases, is named."""

    retry_on: Paths | None = None
    discard_on: Paths = ()

    @classmethod
    def build(cls, retry_on: Any = None, discard_on: Any = None) -> RetryPolicy:
        """A checked policy from exception classes; :class:`~django_pgqueue.exceptions.
        InvalidJob` names a bad value."""
        return cls(
            None if retry_on is None else _paths(validation.EXCEPTIONS(retry_on, "retry_on")),
            () if discard_on is None else _paths(validation.EXCEPTIONS(discard_on, "discard_on")),
        )

    def replace(self, retry_on: Any = None, discard_on: Any = None) -> RetryPolicy:
        """This policy with ``retry_on`` and/or ``discard_on`` (classes) replaced."""
        given = RetryPolicy.build(retry_on, discard_on)
        return RetryPolicy(
            self.retry_on if retry_on is None else given.retry_on,
            self.discard_on if discard_on is None else given.discard_on,
        )

    def to_json(self) -> str | None:
        """What the row keeps: None for the default policy."""
        if self == DEFAULT:
            return None
        return json.dumps(
            {
                "retry_on": None if self.retry_on is None else list(self.retry_on),
                "discard_on": list(self.discard_on),
            },
            separators=(",", ":"),
        )

    @staticmethod
    def from_json(text: str | None) -> RetryPolicy:
        """The policy a row keeps (the default for None or JSON null);
        :class:`UnreadablePolicy` for a text that is no policy."""
        found = None if text is None else _decoded(text)
        if isinstance(found, Unreadable):
            raise UnreadablePolicy(found.why)
        return DEFAULT if found is None else found

    def retries(self, exc: BaseException) -> bool:
        """Whether a run that raised ``exc`` may be tried again (attempts allowing)."""
        if self.retry_on is None and not self.discard_on:
            return True
        names = {class_path(c) for c in type(exc).__mro__}
        if not names.isdisjoint(self.discard_on):
            return False
        return self.retry_on is None or not names.isdisjoint(self.retry_on)

    def delay(self, attempt: int, backoff: float | None, job_id: int | None = None) -> float:
        """Seconds before the run after ``attempt`` (1 for the first one) of job ``job_id``."""
        settings = conf.get()
        if backoff is not None and not math.isfinite(backoff):
            # NaN or Infinity, written by hand (enqueue refuses both, and the column's
            # check lets NaN >= 0 through): no number of seconds, so none was given.
            spelt = "NaN" if math.isnan(backoff) else f"{'-' if backoff < 0 else ''}Infinity"
            logger.warning(
                "job %s has backoff = %s, no number of seconds: its retry waits as "
                "PGQUEUE['BACKOFF_BASE'] says",
                "?" if job_id is None else job_id,
                spelt,
            )
            backoff = None
        base = settings.BACKOFF_BASE if backoff is None else backoff
        if not 0 <= base <= validation.MAX_BACKOFF:  # 1e300 written by hand:
            base = validation.MAX_BACKOFF  # as long as enqueue allows (no timestamp past it)
        # A job's own backoff may exceed the global cap: its first delay is honoured.
        return retry_delay(attempt, base, max(settings.BACKOFF_MAX, base), settings.BACKOFF_JITTER)

    def after_failure(
        self,
        exc: BaseException,
        attempt: int,
        max_attempts: int,
        backoff: float | None,
        job_id: int | None = None,
    ) -> float | None:
        """Seconds before the next run of a job whose run raised ``exc``; None buries it."""
        if attempt >= max_attempts or not self.retries(exc):
            return None
        return self.delay(attempt, backoff, job_id)

    def after_lease_expired(
        self, attempt: int, max_attempts: int, backoff: float | None, job_id: int | None = None
    ) -> float | None:
        """The same for a run whose worker stopped renewing its lease (it died, hung or
        lost the database): a failure under the job's backoff, so that a job that
        kills its worker is not taken up again at once. Not an exception of the
        task's, so ``retry_on`` and ``discard_on`` do not apply."""
        if attempt >= max_attempts:
            return None
        return self.delay(attempt, backoff, job_id)

    @staticmethod
    def may_snooze(snoozes: int) -> bool:
        """Whether a job snoozed ``snoozes`` times before may snooze once more."""
        return snoozes < conf.get().MAX_SNOOZES


DEFAULT = RetryPolicy()


def snooze_refused(snoozes: int, snooze: BaseException) -> TooManySnoozes | None:
    """Why a job that snoozed ``snoozes`` times before is buried instead of snoozing
    once more (``snooze``, the request); None while it may snooze."""
    if RetryPolicy.may_snooze(snoozes):
        return None
    return TooManySnoozes(
        f"the job snoozed {wording.count(snoozes, 'time')}, the most "
        "PGQUEUE['MAX_SNOOZES'] allows; "
        f"it asked to snooze again ({snooze}) and is buried instead"
    )


def policy_of(target: Any) -> RetryPolicy:
    """The retry policy a task object carries (the default if it has none)."""
    found = getattr(target, "retry_policy", None)
    return found if isinstance(found, RetryPolicy) else DEFAULT


def stored_policy(value: object) -> RetryPolicy | None:
    """The policy a job row keeps (its JSON, as text or decoded), or None where the
    row keeps none, or one no worker can read: the worker then applies its task's
    (:func:`policy_of`)."""
    if value is None:
        return None
    found = _decoded(value if isinstance(value, str) else json.dumps(value))
    return None if isinstance(found, Unreadable) else found


def row_policy(
    job_id: int, task: str, text: str | None, declared: Any, *, warn: bool = True
) -> RetryPolicy:
    """The policy job ``job_id``'s row keeps (``text``), else its task's: ``declared()``
    where the row keeps none, or keeps one no worker can read (written by hand), which
    is logged at WARNING (with ``warn``) naming the job and why. A row cannot make
    its job retry what its task says to bury, nor bury what it says to retry."""
    found = None if text is None else _decoded(text)
    if isinstance(found, Unreadable):
        if warn:
            logger.warning(
                "job %s (%s): its retry_policy cannot be read (%s): its task's own policy applies",
                job_id,
                wording.shown(task),
                found.why,
            )
        found = None
    return cast("RetryPolicy", declared()) if found is None else found


def classes_named(paths: Paths) -> Classes:
    """The exception classes ``paths`` name, as modules this process imported hold
    them: nothing is imported because a row names it. A path no such module holds
    gets a stand-in class under that very path, so that its policy reads back as
    the row keeps it (:meth:`RetryPolicy.build` gives the same paths again).
    Classes all found are kept (a running job's result asks on every run whose task
    is not cached); a stand-in is looked for again, as its module may be imported
    since."""
    found = _found.get(paths)
    if found is None:
        found = tuple(_class_named(path) for path in paths)
        if len(_found) < 256 and not any(type(cls) is _StandIn for cls in found):
            _found[paths] = found
    return found


_found: dict[Paths, Classes] = {}


def _class_named(path: str) -> type[BaseException]:
    # Read from the module's and classes' own dicts, not with getattr: a module's
    # __getattr__ (a lazy import) or a lazy object on the way would run code a row
    # names, on every run, and its error would fail the run before the task starts.
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):  # a nested class: module "a", "B.C"
        found: Any = sys.modules.get(".".join(parts[:cut]))
        for name in parts[cut:] if found is not None else ():
            # type(), not isinstance(): that asks a lazy object its __class__.
            found = vars(found).get(name) if issubclass(type(found), type | ModuleType) else None
        if issubclass(type(found), type) and issubclass(found, BaseException):
            exception: type[BaseException] = found
            if class_path(exception) == path:
                return exception
    return _stand_in(path)


@lru_cache(maxsize=256)
def _stand_in(path: str) -> type[BaseException]:
    """One stand-in per path: made anew for every result not cached (a job with its
    own unique_key or run_after), a class cost some 50 us a run."""
    module, _, name = path.rpartition(".")
    return cast(
        "type[BaseException]",
        _StandIn(name, (Exception,), {"__module__": module, "__qualname__": name}),
    )


class _StandIn(type):
    """The class of a stand-in for a class no module here holds."""


def _pickled_stand_in(cls: _StandIn) -> tuple[Any, tuple[str]]:
    # By its path (pickle would import its module, which is not here): unpickled as
    # the class where that is imported, or as a stand-in again.
    return _class_named, (class_path(cls),)


copyreg.pickle(_StandIn, _pickled_stand_in)


def _paths(classes: Classes) -> Paths:
    return tuple(sorted({class_path(c) for c in classes}))


@dataclasses.dataclass(frozen=True, slots=True)
class Unreadable:
    """A row's policy text that is no policy, and why."""

    why: str


@lru_cache(maxsize=256)
def _decoded(text: str) -> RetryPolicy | Unreadable | None:
    """The policy ``text`` keeps; None for JSON null (as SQL NULL: it keeps none)."""
    if len(text) > MAX_POLICY_CHARS:
        return Unreadable(f"longer than {MAX_POLICY_CHARS} characters")
    try:
        found = json.loads(text)
    except RecursionError:
        return Unreadable("its JSON is nested too deep to decode")
    except ValueError as exc:
        return Unreadable(f"not JSON: {exc}")
    if found is None:
        return None
    if not isinstance(found, dict):
        return Unreadable("not a JSON object with retry_on and discard_on")
    retry_on = _names("retry_on", found.get("retry_on"))
    discard_on = _names("discard_on", found.get("discard_on"))
    if isinstance(retry_on, Unreadable):
        return retry_on
    if isinstance(discard_on, Unreadable):
        return discard_on
    why = _unreadable(retry_on, discard_on)
    return Unreadable(why) if why is not None else RetryPolicy(retry_on, discard_on or ())


def _names(field: str, value: object) -> Paths | Unreadable | None:
    """A stored list of exception paths, or null (a list of lists matches nothing)."""
    if value is None:
        return None
    if isinstance(value, list) and all(isinstance(name, str) for name in value):
        return tuple(value)
    return Unreadable(f"{field} is not a list of exception paths: {value!r:.80}")


def _unreadable(retry_on: Paths | None, discard_on: Paths | None) -> str | None:
    """Why these paths are no policy a worker can apply (a name with no module, such
    as ``ValueError``, never matches: :func:`class_path` gives ``builtins.ValueError``),
    or None."""
    for field, paths in (("retry_on", retry_on), ("discard_on", discard_on)):
        for path in paths or ():
            parts = path.split(".")
            if len(parts) < 2 or not all(parts) or not path.isprintable():
                return f"{field} holds {path!r:.80}, not an exception's dotted path"
    return None
