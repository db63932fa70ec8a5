from __future__ import annotations

from collections import Counter
from urllib.parse import quote

import pytest
from django.db import connection

from django_pgqueue.models import Job


def status_counts() -> dict[str, int]:
    """Final counts by status, e.g. {"done": 999, "dead": 1}."""
    return dict(Counter(Job.objects.values_list("status", flat=True)))


def run_counts(prefix: str = "") -> Counter[str]:
    """How many times each labelled test task ran (rows of testapp_run)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT label, count(*) FROM testapp_run WHERE label LIKE %s GROUP BY label",
            [prefix + "%"],
        )
        return Counter(dict(cursor.fetchall()))


@pytest.fixture
def db_url(transactional_db: None) -> str:
    """A libpq URL for the test database, for second connections and subprocesses."""
    params = connection.get_connection_params()
    user = quote(params.get("user") or "postgres", safe="")
    if params.get("password"):  # the embedded server's; quoted, as any may hold ':' or '@'
        user += ":" + quote(params["password"], safe="")
    return (
        f"postgres://{user}@{params.get('host') or '127.0.0.1'}:"
        f"{params.get('port') or 5432}/{connection.settings_dict['NAME']}"
    )
