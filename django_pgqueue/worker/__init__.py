"""The worker runtime, one unit per module:

- ``runner``: the :class:`~django_pgqueue.worker.runner.Worker` and its claim loop;
- ``pool`` and ``executor``: the job threads, and running one job to an outcome;
- ``completer``: writes outcomes in batches;
- ``ledger``: the runs a worker holds, under one lock;
- ``listener``: LISTEN/NOTIFY wake-ups;
- ``services``: the supervised thread base and the timers thread (heartbeat,
  reaper, pruner, job timeouts, throughput);
- ``shutdown``: the start-up check and the bounded shutdown;
- ``events`` and ``waker``: what the worker emits, and how it is woken.
"""
