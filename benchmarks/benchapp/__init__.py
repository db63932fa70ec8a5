"""Tasks the benchmarks enqueue (no models: results travel in the job rows)."""
