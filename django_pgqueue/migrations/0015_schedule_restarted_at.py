"""Where a schedule goes on from after it was enabled again or changed is kept in
its own column, ``restarted_at``: it was written into ``last_tick``, which the
admin and ``manage.py schedules`` then showed as a tick the schedule never had.
Rows that have enqueued no tick yet move that moment over (for them the two
cannot be told apart, and ticking goes on from the same point either way); a
schedule that has ticks keeps its last tick. Adding a nullable column is
instant."""

from django.db import migrations, models

MOVE = """
UPDATE pgqueue_schedule SET restarted_at = last_tick, last_tick = NULL
WHERE ticks = 0 AND last_tick IS NOT NULL;
"""

MOVE_BACK = """
UPDATE pgqueue_schedule SET last_tick = GREATEST(last_tick, restarted_at)
WHERE restarted_at IS NOT NULL;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0014_schedule_settings_enabled"),
    ]

    operations = [
        migrations.AlterField(
            model_name="schedule",
            name="last_tick",
            field=models.DateTimeField(
                blank=True,
                help_text="The latest tick taken: enqueued (its job's run_at), or passed while "
                "disabled.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="restarted_at",
            field=models.DateTimeField(
                blank=True,
                help_text="When it was last enabled again or changed: it goes on from its next "
                "tick after this, and no tick before it is enqueued.",
                null=True,
            ),
        ),
        migrations.RunSQL(MOVE, reverse_sql=MOVE_BACK),
    ]
