"""The tests' settings with system check W001 silenced, as the docs say to where the
pool keeps prepared statements (a session-mode pool: test_contract_scale_out_third)."""

from tests.settings import *  # noqa: F403

SILENCED_SYSTEM_CHECKS = ["django_pgqueue.W001"]
