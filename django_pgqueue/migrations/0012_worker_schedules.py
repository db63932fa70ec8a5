"""Whether a registered worker runs the scheduler: a --burst or --max-jobs worker
does not, so it must not count as "a scheduler was up" when a restarted worker
decides which ticks were missed. Adding a column with a constant default is
instant on PostgreSQL 11+."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0011_schedule"),
    ]

    operations = [
        migrations.AddField(
            model_name="registeredworker",
            name="schedules",
            field=models.BooleanField(
                db_default=True,
                default=True,
                help_text="Whether it runs the scheduler of periodic jobs (--burst and "
                "--max-jobs workers do not).",
            ),
        ),
    ]
