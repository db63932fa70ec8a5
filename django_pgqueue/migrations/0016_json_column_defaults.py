"""The JSON columns a job row needs (``args``, ``kwargs``, ``errors``,
``worker_ids``) get database defaults, as the other columns have: a row written
by hand (``INSERT INTO pgqueue_job (task) VALUES (...)``, a fixture, another
program) needs only its ``task``. Setting a column's default is instant.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0015_schedule_restarted_at"),
    ]

    operations = [
        migrations.AlterField(
            model_name="job",
            name="args",
            field=models.JSONField(blank=True, db_default=[], default=list),
        ),
        migrations.AlterField(
            model_name="job",
            name="errors",
            field=models.JSONField(
                blank=True,
                db_default=[],
                default=list,
                help_text="The newest error history entries: attempt, time, exception, message, traceback.",
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="kwargs",
            field=models.JSONField(blank=True, db_default={}, default=dict),
        ),
        migrations.AlterField(
            model_name="job",
            name="worker_ids",
            field=models.JSONField(
                blank=True,
                db_default=[],
                default=list,
                help_text="Workers that claimed it (newest 100).",
            ),
        ),
    ]
