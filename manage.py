#!/usr/bin/env python
"""Django's command-line utility for the example project.

Without ``DATABASE_URL`` it runs the command on the example's own embedded
PostgreSQL 18.6 (the database ``make demo`` fills, kept between runs), started
for the command and stopped after it; one such command at a time (the settings
themselves never start a server). With ``DATABASE_URL`` it uses that server.
"""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    if not os.environ.get("DATABASE_URL") and os.environ["DJANGO_SETTINGS_MODULE"].startswith(
        "example_project."
    ):
        from devtools.demo import DEMO_DATA
        from devtools.embedded_pg import EmbeddedPostgresError, ensure_database_url

        try:
            ensure_database_url(data_dir=DEMO_DATA)
        except EmbeddedPostgresError as exc:
            sys.exit(
                f"DATABASE_URL is unset and the example's embedded PostgreSQL ({DEMO_DATA}) "
                f"could not start: {exc}. Another manage.py may be using it: set DATABASE_URL "
                "to a server of yours, or run one command at a time."
            )
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
