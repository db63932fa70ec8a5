"""The tests' settings with system check W004 silenced (test_contract_scale_out_more)."""

from tests.settings import *  # noqa: F403

SILENCED_SYSTEM_CHECKS = ["django_pgqueue.W004"]
