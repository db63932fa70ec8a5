"""Periodic jobs: ``PGQUEUE["PERIODIC"]`` schedules, each tick enqueued exactly once.

``spec`` checks a settings entry and computes its ticks; ``calls`` turns it into
the job each tick enqueues; ``models`` is the schedule table; ``scheduler`` is
the worker thread that enqueues due ticks. See docs/periodic.md.
"""
