"""The test app; with ``PGQUEUE_TEST_BREAK`` set, it breaks one worker thread on purpose.

Fault tests start ``runworker`` subprocesses with ``PGQUEUE_TEST_BREAK=heartbeat``
(or ``listener``) to prove that a worker whose own thread fails keeps its
promises. Nothing in the package knows about it: the break is patched in here.
"""

from __future__ import annotations

import os
from typing import Any

from django.apps import AppConfig


class InjectedFailure(RuntimeError):
    """A bug planted by a fault test."""


class TestAppConfig(AppConfig):
    name = "tests.testapp"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        broken = os.environ.get("PGQUEUE_TEST_BREAK")
        if not broken:
            return
        from django_pgqueue.worker.housekeeping import Housekeeping
        from django_pgqueue.worker.listener import Listener

        def fail(*args: Any, **kwargs: Any) -> float:
            raise InjectedFailure(f"{broken} broken on purpose by the fault test")

        def heartbeat_with_leases(housekeeping: Housekeeping) -> None:
            if housekeeping.ledger.lease_keys():  # breaks once there is a lease to renew
                fail()

        if broken == "heartbeat":
            Housekeeping.heartbeat = heartbeat_with_leases  # type: ignore[method-assign,assignment]
        elif broken == "listener":
            Listener.step = fail  # type: ignore[method-assign]
        else:
            raise ValueError(f"PGQUEUE_TEST_BREAK={broken!r}: expected heartbeat or listener")
