"""Reading a worker's Prometheus endpoint in tests: one parser for the tests that
scrape it (the metrics tests and the operating contract tests)."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.worker.conftest import WorkerProcess

#: (name, labels) -> value, for every sample of one scrape.
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
SERVING = re.compile(r"serving metrics on (http://[\d.]+:\d+)/metrics")


def parse(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(base: str) -> Samples:
    """Every sample of ``base/metrics``."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
        return parse(response.read().decode())


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def completed(found: Samples) -> dict[tuple[str, str], float]:
    """``pgqueue_jobs_completed_total`` by (task, outcome)."""
    return {
        (dict(labels)["task"], dict(labels)["outcome"]): v
        for (name, labels), v in found.items()
        if name == "pgqueue_jobs_completed_total"
    }


def base_url(worker: WorkerProcess) -> str:
    """The address a worker started with a metrics port says it serves on."""
    worker.wait_for_output("serving metrics on")
    match = SERVING.search(worker.output)
    assert match, worker.output
    return match[1]


#: A row of the observability page's table of metrics: name, type, labels.
DOCUMENTED = re.compile(r"^\| `(pgqueue_\w+)` \| (\w+) \|([^|]*)\|", re.MULTILINE)


def documented() -> dict[str, tuple[str, set[str]]]:
    """The metrics the observability page's table names: name -> (type, labels)."""
    text = (Path(__file__).absolute().parents[2] / "docs" / "observability.md").read_text()
    return {
        name: (kind, set(re.findall(r"`(\w+)`", labels)))
        for name, kind, labels in DOCUMENTED.findall(text)
    }
