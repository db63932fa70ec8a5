"""Per-table autovacuum settings for a table that churns.

Every job is updated at least twice (claim, then done), leaving dead row
versions behind. With PostgreSQL's default scale factor (20 %) a table of a
million finished jobs waits for 200,000 dead rows before it is vacuumed, and the
claim pays for scanning them. 1 % keeps the dead rows, and the claim, small.
"""

from django.db import migrations

SETTINGS = (
    "autovacuum_vacuum_scale_factor = 0.01, "
    "autovacuum_vacuum_insert_scale_factor = 0.01, "
    "autovacuum_analyze_scale_factor = 0.02, "
    "autovacuum_vacuum_cost_delay = 1"
)
RESET = (
    "autovacuum_vacuum_scale_factor, autovacuum_vacuum_insert_scale_factor, "
    "autovacuum_analyze_scale_factor, autovacuum_vacuum_cost_delay"
)


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0001_initial")]

    operations = [
        migrations.RunSQL(
            f"ALTER TABLE pgqueue_job SET ({SETTINGS})",
            reverse_sql=f"ALTER TABLE pgqueue_job RESET ({RESET})",
        ),
    ]
