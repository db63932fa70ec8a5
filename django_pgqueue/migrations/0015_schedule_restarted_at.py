"""Where a schedule goes on from after it was enabled again or changed is kept in
its own column, ``restarted_at``: it was written into ``last_tick``, which the
admin and ``manage.py schedules`` then showed as a tick the schedule never had.

Rows written before keep their ``last_tick`` (a worker still on the previous
code, during a rolling deploy, goes on from it), and those where it may be such a
restart point get it copied into ``restarted_at`` too; listings do not show a
``last_tick`` equal to ``restarted_at`` as a tick. May be: a schedule that has
enqueued no tick yet (its ``last_tick`` is a restart point, or a tick skipped
while disabled, which was not shown either), or one whose ``last_tick`` is not a
whole second (every tick of a cron expression or of a whole number of seconds
is; a restart point, a moment of the database's clock, is not). Adding a
nullable column is instant.
"""

from django.db import migrations, models

COPY = """
UPDATE pgqueue_schedule SET restarted_at = last_tick
WHERE last_tick IS NOT NULL AND (ticks = 0 OR date_trunc('second', last_tick) <> last_tick);
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
        migrations.RunSQL(COPY, reverse_sql=MOVE_BACK),
    ]
