"""Operating the queue: what workers and operators' tools read.

- ``models``: the worker registry (``pgqueue_worker``) and the queue gauges'
  snapshot (``pgqueue_queue_gauge``), with their managers;
- ``health``: the conditions ``queuestats --check`` checks;
- ``metrics``, ``exporter``: the Prometheus metrics of a worker and the HTTP
  server for ``/metrics`` and ``/healthz`` (imported only with
  ``--metrics-port``, and only where ``prometheus-client`` is installed);
- ``gauges``: the queue gauges as a Prometheus collector (worker and web view).
"""
