"""Signals of the direct ``@django_pgqueue.task`` API, sent by the worker around a run.

Tasks-framework tasks have Django's own (``task_started``, ``task_finished``);
these are their counterpart for ``@django_pgqueue.task`` functions. Both are sent
on the job's thread with ``send_robust``: a receiver that raises is logged (with
its traceback) and ignored, and never changes what happens to the job.

- ``job_started(sender=task, job=ClaimedJob)``: before the function is called.
- ``job_finished(sender=task, job=ClaimedJob, outcome=RunOutcome, result=...,
  exception=...)``: after it returned or raised. ``outcome`` is ``succeeded``,
  ``retried`` (it raised, with attempts left, or snoozed), ``dead`` (it raised on
  its last attempt, a failure retrying cannot fix, snoozed past ``MAX_SNOOZES``,
  or returned a value that is not JSON) or ``cancelled`` (it raised ``Cancel``,
  or stopped as an operator asked); ``result`` is its return value
  (None when it raised), ``exception`` what it raised (or why its value was
  refused; None on success). Sent inside the ``except`` block when it raised, so
  a receiver that logs with ``exc_info`` sees the exception.

``sender`` is the registered task (what ``@task`` returned), so
``job_finished.connect(receiver, sender=send_receipt)`` hears one task only.
"""

from __future__ import annotations

from django.dispatch import Signal

job_started = Signal()
job_finished = Signal()
