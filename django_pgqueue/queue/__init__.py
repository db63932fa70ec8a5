"""The queue's operations on the job table, by role: enqueue, the worker's claim and
outcomes, maintenance.

Each runs named statements through :mod:`django_pgqueue.sql.runner` on the Django
connection ``alias`` and returns plain records. ``Job.objects`` (the
:class:`~django_pgqueue.models.JobManager`) is their public face; nothing else
calls them.
"""
