"""Error-history entries name their moment ``time`` (it was ``at``), as the job
table's contract says: attempt, time, exception, message, traceback. Only the
function that shapes new entries changes: entries written before keep ``at``,
which the admin still reads. Instant."""

from django.db import migrations

ENTRY = """
CREATE OR REPLACE FUNCTION pgqueue_error_entry(attempt integer, exception text, message text,
                                               traceback text)
RETURNS jsonb LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT jsonb_build_object(
        'attempt', attempt, '{key}', now(), 'exception', left(exception, 255),
        'message', left(message, 2000),
        -- the end of a traceback says what failed: keep that end
        'traceback', CASE WHEN length(traceback) > 10000
                          THEN '...' || right(traceback, 10000) ELSE traceback END)
$$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("django_pgqueue", "0012_worker_schedules"),
    ]

    operations = [
        migrations.RunSQL(ENTRY.format(key="time"), reverse_sql=ENTRY.format(key="at")),
    ]
