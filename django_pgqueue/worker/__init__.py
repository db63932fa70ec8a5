"""The worker runtime: producer (claims), executor (runs one job), completer
(records outcomes in batches), listener (NOTIFY), maintenance, and the Worker
that wires them together."""
