"""System checks of a PgQueueBackend, ids ``django_pgqueue.E1xx``.

Django runs them through its own ``tasks`` check for every configured alias.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks

from django_pgqueue import validation, wording
from django_pgqueue.backend.compat import TASKS_APP
from django_pgqueue.checks import backport_app_missing, database_problem

#: The OPTIONS keys a PgQueueBackend reads, and the job option's rule for each.
OPTION_RULES: dict[str, tuple[validation.Rule[Any], str]] = {
    "MAX_ATTEMPTS": (validation.ATTEMPTS, "django_pgqueue.E104"),
    "BACKOFF": (validation.BACKOFF, "django_pgqueue.E107"),
}


OPTIONS_HINT = 'Give OPTIONS as a dict, such as {"MAX_ATTEMPTS": 5}, or leave it out.'
QUEUES_HINT = 'Give QUEUES as a list of queue names, such as ["default", "emails"].'

#: The keys of a TASKS entry that Django's backends read.
PARAMS = ("BACKEND", "QUEUES", "OPTIONS")

#: PGQUEUE's settings that a backend's jobs obey too, and that OPTIONS has no key for:
#: written in a TASKS entry, not a misspelt BACKOFF (the first retry's delay).
FOR_EVERY_BACKEND = ("BACKOFF_MAX", "BACKOFF_JITTER")

#: QUEUES as written when the settings give none (Django's default, ["default"]).
QUEUES_UNSET = object()


def queues_problem(alias: str, queues: object) -> str | None:
    """What is wrong with the shape of ``TASKS[alias]['QUEUES']`` as written: not a
    list of names (one string, whose letters Django would take for the queues, or
    None); None if nothing."""
    if isinstance(queues, str):
        return (
            f"TASKS[{alias!r}]['QUEUES'] is the string {queues!r}: give a list of queue "
            f"names, such as [{queues!r}]"
        )
    if queues is not QUEUES_UNSET and not isinstance(queues, list | tuple | set | frozenset):
        return f"TASKS[{alias!r}]['QUEUES'] must be a list of queue names, not {queues!r}"
    return None


def queue_not_listed(backend: Any, queue: str, path: str) -> str:
    """Why a task of ``path`` is refused on ``backend``: its ``queue`` is not one of
    the backend's QUEUES (Django's words first, then which task and the fix)."""
    fix = f"add {queue!r} there."
    listed = f"TASKS[{backend.alias!r}]['QUEUES'] is {sorted(backend.queues)}"
    if backend.queues_setting is QUEUES_UNSET:  # not written by the user: say whose it is
        listed = f"TASKS[{backend.alias!r}] sets no QUEUES, so it has Django's default, ['default']"
        fix = f"set its QUEUES to {sorted({*backend.queues, queue})}."
    if not validation.QUEUE.is_valid(queue):  # E105 if it were added
        fix = f"rename it: {validation.QUEUE.message(queue)}."
    if (meant := wording.alike(queue, backend.queues)) is not None:  # a typo: not added
        fix = f"did you mean {meant}? If not, {fix}"
    if backend.unknown_params:  # "QUEUE": the QUEUES meant were never read (E109)
        said = unknown_params_text(backend.alias, backend.unknown_params)
        misspelt = any(
            wording.closest(name, PARAMS, word_added=True) == "QUEUES"
            for name in backend.unknown_params
        )  # else ("MAX_ATTEMPTS" beside BACKEND) renaming it would not take the queue
        fix = said if backend.queues_setting is QUEUES_UNSET and misspelt else f"{fix} {said}"
    return f"Queue {queue!r} is not valid for backend. Task {path} uses it, and {listed}: {fix}"


def options_problem(alias: str, options: object) -> str | None:
    """``TASKS[alias]['OPTIONS']`` that is not a dict; None if it is one."""
    if not isinstance(options, Mapping):
        return f"TASKS[{alias!r}]['OPTIONS'] must be a dict, not {options!r}"
    return None


def shape_problem(alias: str, options: object, queues: object) -> str | None:
    """The first of the two above: what enqueue and declaring a task refuse."""
    return queues_problem(alias, queues) or options_problem(alias, options)


def unknown_params_text(alias: str, unknown: list[str]) -> str:
    """What E109 says, with the key the typo meant, or the OPTIONS a key belongs in
    (``"MAX_ATTEMPTS": 5`` beside ``BACKEND``)."""
    said = wording.did_you_mean(unknown, PARAMS, word_added=True)
    options = [
        wording.closest(name, OPTION_RULES, word_added=True) for name in _not_pgqueue(unknown)
    ]
    if misplaced := sorted({name for name in options if name is not None}):
        said += f" (put {' and '.join(misplaced)} in TASKS[{alias!r}]['OPTIONS'])"
    return (
        f"TASKS[{alias!r}] has unknown key(s) {', '.join(map(repr, unknown))}{said}"
        f"{_pgqueue_settings(unknown)}."
    )


def options_meant(unknown: list[str]) -> str:
    """What E103 adds to the unknown OPTIONS keys: the key a typo meant, or the
    PGQUEUE setting a key is (``BACKOFF_MAX``)."""
    typos = _not_pgqueue(unknown)
    return wording.did_you_mean(typos, OPTION_RULES, word_added=True) + _pgqueue_settings(unknown)


def _not_pgqueue(names: list[str]) -> list[str]:
    return [name for name in names if name.upper() not in FOR_EVERY_BACKEND]


def _pgqueue_settings(names: list[str]) -> str:
    """`` (a PGQUEUE setting, for every backend: set PGQUEUE['BACKOFF_MAX'] instead)``
    for the names among ``names`` of :data:`FOR_EVERY_BACKEND`, in any case."""
    found = sorted({name.upper() for name in names} & set(FOR_EVERY_BACKEND))
    if not found:
        return ""
    what = "a PGQUEUE setting" if len(found) == 1 else "PGQUEUE settings"
    where = " and ".join(f"PGQUEUE[{name!r}]" for name in found)
    return f" ({what}, for every backend: set {where} instead)"


def unknown_options(options: Mapping[str, Any]) -> list[str]:
    """The keys of OPTIONS that a PgQueueBackend does not read (E103)."""
    return sorted(set(options) - set(OPTION_RULES))


def unknown_keys_text(alias: str, params: list[str], options: Mapping[str, Any]) -> str | None:
    """What enqueue refuses, as E109 and E103 say it (a silenced one left out): keys of
    TASKS[alias], or of its OPTIONS, that nothing reads, so what they meant is not
    applied; None if none."""
    silenced = set(settings.SILENCED_SYSTEM_CHECKS)
    if params and "django_pgqueue.E109" not in silenced:
        return f"{unknown_params_text(alias, params)[:-1]} (django_pgqueue.E109)"
    unknown = unknown_options(options)
    if unknown and "django_pgqueue.E103" not in silenced:
        return (
            f"TASKS[{alias!r}]['OPTIONS'] has unknown key(s) {', '.join(map(repr, unknown))}"
            f"{options_meant(unknown)}: PgQueueBackend reads "
            f"{', '.join(sorted(OPTION_RULES))} (django_pgqueue.E103)"
        )
    return None


def unknown_params_problem(alias: str, unknown: list[str]) -> list[checks.CheckMessage]:
    """E109: keys of TASKS[alias] that no backend reads (Django ignores them)."""
    if not unknown:
        return []
    return [
        checks.Error(
            unknown_params_text(alias, unknown),
            hint=f"A TASKS entry has {', '.join(PARAMS)}; the backend's own settings go in "
            "OPTIONS.",
            id="django_pgqueue.E109",
        )
    ]


def check_backend(
    alias: str, options: Mapping[str, Any], queues: Collection[Any], queues_setting: object
) -> list[checks.CheckMessage]:
    """Everything that would make backend ``alias`` fail at its first enqueue."""
    name = f"TASKS[{alias!r}]"
    errors: list[checks.CheckMessage] = []
    if not apps.is_installed("django_pgqueue"):
        errors.append(
            checks.Error(
                f"{name} uses PgQueueBackend, but django_pgqueue is not installed.",
                hint="Add 'django_pgqueue' to INSTALLED_APPS and run migrate.",
                id="django_pgqueue.E101",
            )
        )
    errors += _check_database(name)
    # Each of OPTIONS and QUEUES is read only when it has the right shape (E108).
    if (problem := options_problem(alias, options)) is not None:
        errors.append(checks.Error(f"{problem}.", hint=OPTIONS_HINT, id="django_pgqueue.E108"))
    else:
        errors += _check_options(name, options)
    if (problem := queues_problem(alias, queues_setting)) is not None:
        errors.append(checks.Error(f"{problem}.", hint=QUEUES_HINT, id="django_pgqueue.E108"))
    else:
        errors += _check_queues(name, queues)
    if TASKS_APP is not None and not apps.is_installed(TASKS_APP):
        errors.append(backport_app_missing(alias))
    return errors


def _check_options(name: str, options: Mapping[str, Any]) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    unknown = unknown_options(options)
    if unknown:
        errors.append(
            checks.Error(
                f"{name}['OPTIONS'] has unknown key(s) {', '.join(map(repr, unknown))}"
                f"{options_meant(unknown)}.",
                hint=f"PgQueueBackend reads: {', '.join(sorted(OPTION_RULES))}.",
                id="django_pgqueue.E103",
            )
        )
    for key, (rule, check_id) in OPTION_RULES.items():
        value = options.get(key)
        if value is not None and not rule.is_valid(value):
            errors.append(
                checks.Error(
                    f"{name}['OPTIONS'][{key!r}] = {value!r}: expected {rule.expected}.",
                    id=check_id,
                )
            )
    return errors


def _check_queues(name: str, queues: Collection[Any]) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    bad_queues = sorted(map(repr, (q for q in queues if not validation.QUEUE.is_valid(q))))
    if bad_queues:
        errors.append(
            checks.Error(
                f"{name}['QUEUES'] has invalid queue name(s) {', '.join(bad_queues)}.",
                hint="A queue name is 1-64 letters, digits, _ . : -.",
                id="django_pgqueue.E105",
            )
        )
    return errors


def _check_database(name: str) -> list[checks.CheckMessage]:
    # With the app installed its own check (E002) reports the database: one mistake,
    # one error. Without it, that check is not registered, so this one says it.
    if apps.is_installed("django_pgqueue"):
        return []
    problem = database_problem()
    if problem is None:
        return []
    message, hint = problem
    return [
        checks.Error(f"{name} uses PgQueueBackend: {message}.", hint=hint, id="django_pgqueue.E102")
    ]
