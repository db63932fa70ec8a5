"""What the public outcome calls (``Job.objects.complete``, ``fail``, ``record``)
check before they write: one value PostgreSQL refuses would fail the whole batch
with a database error, so each is refused first, as an InvalidJob that names it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from django_pgqueue import validation
from django_pgqueue.exceptions import InvalidJob
from django_pgqueue.jsonargs import jsonb_text_problem
from django_pgqueue.records import Failure, Success


def check_successes(successes: Sequence[Success], *, decode: bool) -> None:
    """InvalidJob unless each is a Success whose result is JSON text that jsonb
    stores (``decode``: checked by decoding it)."""
    for success in successes:
        if (
            not isinstance(success, Success)
            or not isinstance(success.result, str)
            or not (
                validation.run_key_part(success.job_id) and validation.run_key_part(success.run)
            )
        ):
            raise InvalidJob(
                "expected Success(job_id, run, result), job_id and run the claimed run's, "
                "the result the JSON text of the return value (json.dumps(value)), "
                f"not {success!r}"
            )
        problem = jsonb_text_problem(success.result) if decode else None
        if problem is not None:
            raise InvalidJob(f"job {success.job_id}: result {success.result[:80]!r} {problem}")


def check_failures(failures: Sequence[Failure]) -> list[Failure]:
    """InvalidJob unless each is a Failure of a (job_id, run) key, with texts
    PostgreSQL stores, a delay of 0 to ten years and yes/no flags; the failures,
    each delay in seconds (a timedelta is taken too)."""
    checked = []
    for failure in failures:
        if not isinstance(failure, Failure) or not (
            validation.run_key_part(failure.job_id) and validation.run_key_part(failure.run)
        ):
            raise InvalidJob(
                "expected Failure(job_id, run, exception, message, traceback, delay), "
                f"job_id and run the claimed run's, not {failure!r}"
            )
        where = f"job {failure.job_id}: "
        for name in ("exception", "message", "traceback"):
            text = getattr(failure, name)
            if not isinstance(text, str) or not validation.storable(text):
                raise InvalidJob(
                    f"{where}{name} {text!r:.80} must be a string without NUL characters "
                    "or lone surrogates"
                )
        delay = validation.DELAY(failure.delay, f"{where}delay")
        for name in ("final", "cancel", "snooze"):
            if not isinstance(getattr(failure, name), bool):
                raise InvalidJob(
                    f"{where}{name} must be True or False, not {getattr(failure, name)!r}"
                )
        # As a float: psycopg refuses a list of ints and floats (delay=0 beside 1.5).
        if type(failure.delay) is not float:
            failure = dataclasses.replace(failure, delay=delay)
        checked.append(failure)
    return checked
