"""A task whose function is a decorator's wrapper (``functools.wraps``) takes the
wrapper's arguments, as Python and Django's own backends call it."""

from __future__ import annotations

import pytest

pytest.importorskip(
    "django_pgqueue.backend", reason="needs django.tasks or the backport", exc_type=ImportError
)

from django_pgqueue.backend import call, enqueue_many
from django_pgqueue.backend.compat import TaskResultStatus
from django_pgqueue.exceptions import InvalidJobArguments
from django_pgqueue.testing import run_jobs
from tests.testapp.djtasks import ship

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_call_the_wrapper_takes_is_enqueued_and_run() -> None:
    """``ship`` is called with an order id, which its decorator turns into the order:
    the wrapped function's own signature (``order``) was checked instead, and the
    call refused, where Django's ImmediateBackend runs it."""
    by_name = ship.enqueue(order_id=42)
    by_position = ship.enqueue(7, express=True)
    many = enqueue_many(ship, [call(order_id=1), call(2, express=True)])
    ran = run_jobs()
    assert len(ran.done) == 4
    assert not ran.dead
    assert ship.get_result(by_name.id).return_value == [42, False]
    assert ship.get_result(by_position.id).return_value == [7, True]
    assert [ship.get_result(r.id).status for r in many] == [TaskResultStatus.SUCCESSFUL] * 2


def test_a_call_the_wrapper_refuses_is_still_refused() -> None:
    with pytest.raises(InvalidJobArguments, match=r"ship\(order_id, \*args, \*\*kwargs\)"):
        ship.enqueue()
