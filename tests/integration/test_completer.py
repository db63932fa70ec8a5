"""The completer: an outcome the database refuses must not hold up the others."""

from __future__ import annotations

import pytest
from django.db import connections

from django_pgqueue.models import Job
from django_pgqueue.records import Failure, Success
from django_pgqueue.worker.completer import Completer
from django_pgqueue.worker.services import ConnectionEpoch, Supervision
from tests.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_unstorable_outcome_is_buried_with_the_reason_and_the_rest_recorded() -> None:
    good, bad = add.enqueue(1, 1), add.enqueue(2, 2)
    claimed = {j.id: j for j in Job.objects.claim("w", limit=2)}
    settled: list[tuple[int, int]] = []
    completer = Completer(
        "w",
        "default",
        lambda pairs, done, buried, retried, statuses: settled.extend(pairs),
        Supervision(fatal=pytest.fail, epoch=ConnectionEpoch()),
    )
    outcomes: list[Success | Failure] = [
        Success(good.pk, claimed[good.pk].run, "2"),
        # jsonb refuses the NUL escape: a DataError, not a lost connection
        Success(bad.pk, claimed[bad.pk].run, '"a\\u0000b"'),
    ]
    try:
        completer._write(outcomes)  # settled, not retried forever
    finally:
        connections.close_all()
    assert sorted(settled) == sorted([claimed[good.pk].key, claimed[bad.pk].key])
    assert (Job.objects.get(pk=good.pk).status, Job.objects.get(pk=good.pk).result) == ("done", 2)
    refused = Job.objects.get(pk=bad.pk)
    assert refused.status == "dead"
    assert refused.last_error.startswith("OutcomeNotStored: DataError")
