"""The tests' settings with system check W002 silenced (test_contract_scale_out_third)."""

from tests.settings import *  # noqa: F403

SILENCED_SYSTEM_CHECKS = ["django_pgqueue.W002"]
