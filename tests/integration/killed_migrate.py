"""``manage.py migrate ARGS`` in a process that SIGKILLs itself just before sending
its Nth statement that changes something (anything but a SELECT): a deploy killed
part-way, between two statements of a migration. With N past the last, it runs to
its end. Each such statement is listed on stderr as it is sent, numbered from 0.

    python -m tests.integration.killed_migrate N [migrate's arguments]
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import django


def main(argv: list[str]) -> None:
    kill_before = int(argv[0])
    django.setup()
    from django.core.management import call_command
    from django.db import connection

    sent = 0

    def kill_at(
        execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        nonlocal sent
        if not sql.lstrip().upper().startswith("SELECT"):
            if sent == kill_before:
                os.kill(os.getpid(), signal.SIGKILL)
            print(f"statement {sent}: {' '.join(sql.split())[:120]}", file=sys.stderr, flush=True)
            sent += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(kill_at):
        call_command("migrate", *argv[1:], verbosity=0)


if __name__ == "__main__":
    main(sys.argv[1:])
