"""Issue 17's system checks behind a real PgBouncer (transaction mode), as
``manage.py check --database default`` runs them; more of the contract is in
test_contract_scale_out.py, whose fixtures these tests share."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from devtools.pgbouncer import PgBouncer
from tests.cluster.conftest import pgbouncer, pooled_env
from tests.worker.conftest import django_command

__all__ = ["pgbouncer"]  # the fixture, for these tests too

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Bouncer = Callable[..., PgBouncer]


def test_the_pooler_warnings_do_not_hang_on_an_unrelated_silenced_warning(
    pgbouncer: Bouncer, db_url: str
) -> None:
    """W001 and W002 were left out whenever another check of ours had anything to
    say, even a warning the project silenced: W004, which its hint says to silence
    where only the workers can import a tasks module (a web host, say)."""
    bouncer = pgbouncer(pool_size=2)
    env = pooled_env(
        bouncer,
        db_url,
        PREPARE=True,
        LISTEN_DATABASE=None,
        TASK_MODULES=["tests.outside.broken_import"],
    )
    # The tests' settings read SILENCED_SYSTEM_CHECKS from nowhere: a settings module.
    env["DJANGO_SETTINGS_MODULE"] = "tests.integration.silenced_w004"
    done = django_command(env["DATABASE_URL"], "check", "--database", "default", env=env)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert "django_pgqueue.W004" not in said, said  # silenced
    assert "django_pgqueue.W001" in said, said
    assert "django_pgqueue.W002" in said, said
