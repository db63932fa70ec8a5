"""Each schedule's "enabled" of the settings, as the latest worker to start read
them: a worker whose settings switch a schedule on after the previous one had it
off restarts it from its next tick (schedules_sync), rather than enqueueing the
ticks that fell while it was off. Adding a column with a constant default is
instant on PostgreSQL 11+."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0013_error_entry_time"),
    ]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="settings_enabled",
            field=models.BooleanField(
                db_default=True,
                default=True,
                help_text='The settings\' "enabled", as the latest worker to start read them.',
            ),
        ),
    ]
