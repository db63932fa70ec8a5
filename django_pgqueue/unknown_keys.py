"""What an unknown key of ``PGQUEUE`` is told: the setting a typo meant, or, for an
option of each job written there, where it goes instead."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from django_pgqueue import validation, wording

#: The options of each job (the direct API's, and Django's ``run_after``) that no
#: setting gives a default for: told where they go, not the setting they look like
#: (``concurrency_key`` is not CONCURRENCY, worker threads; ``run_after`` is not
#: PRUNE_AFTER). ``max_attempts`` and ``backoff`` are left out (MAX_ATTEMPTS and the
#: BACKOFF_ keys are their defaults), and so are the queue's names (below).
JOB_ONLY = (set(validation.OPTION_RULES) | {"run_after"}) - {"max_attempts", "backoff", "queue"}

#: A job's queue, by either API's name: the settings are the default one and the ones a
#: worker serves, not QUEUES alone (a worker that served only "emails" while jobs still
#: went to "default").
QUEUE_SETTINGS: dict[str, Sequence[str]] = {
    "queue": ("DEFAULT_QUEUE", "QUEUES"),
    "queue_name": ("DEFAULT_QUEUE", "QUEUES"),
}


def unknown_keys_text(unknown: Sequence[str], known: Collection[str]) -> str:
    """The message of the unknown keys ``unknown`` of PGQUEUE, whose keys are ``known``."""
    typos = {
        name: QUEUE_SETTINGS.get(str(name).casefold())
        or wording.meant(name, known, word_added=True)
        for name in unknown
        if str(name).casefold() not in JOB_ONLY
    }
    return (
        f"PGQUEUE has unknown key(s) {', '.join(map(repr, unknown))}"
        f"{wording.said_meant(typos)}{_job_options(unknown)}; "
        f"known keys: {', '.join(sorted(known))}"
    )


def _job_options(unknown: Sequence[str]) -> str:
    """`` (priority is an option of each job, not a setting: ...)`` for the names among
    ``unknown`` of :data:`JOB_ONLY`, in any case."""
    found = sorted({str(name).casefold() for name in unknown} & JOB_ONLY)
    if not found:
        return ""
    names = wording.joined(found, "and")
    what = "is an option of each job, not a setting: give it"
    if len(found) > 1:
        what = "are options of each job, not settings: give them"
    using = ", ".join(f"{name}=..." for name in found)
    return f" ({names} {what} when enqueueing, as in .using({using}))"
