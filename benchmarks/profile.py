"""``python -m benchmarks.profile [--tasks-path]``: where a draining worker's CPU goes.

Drains N no-op jobs (the direct API's, or with ``--tasks-path`` the ``django.tasks``
task's) with one ``runworker --burst`` under ``py-spy record --gil`` (only samples
of the thread holding the GIL, i.e. Python work, not waiting), then prints the top
frames by own time and by inclusive time, and writes them to
``benchmarks/results/profile-w2-<settings>.md``. Needs ``pip install py-spy``.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import ROOT, SETTINGS

RESULTS = ROOT / "benchmarks" / "results"
LINE_NUMBER = re.compile(r":\d+\)")


RUNNING = ("Worker.run (", "Thread._bootstrap (")  # the worker proper, not Django's start-up


def summarise(raw: Path, top: int) -> str:
    """Markdown tables of the top frames from py-spy's collapsed ("raw") stacks.

    Stacks outside the worker's loop and threads (imports, settings, checks) are
    counted apart as start-up and left out of the tables.
    """
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = startup = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        samples = int(count)
        if not any(marker in stack for marker in RUNNING):
            startup += samples
            continue
        total += samples
        frames = [LINE_NUMBER.sub(")", frame) for frame in stack.split(";")]
        own[frames[-1] or "(no Python frame)"] += samples
        for frame in set(frames):
            inclusive[frame] += samples
    out = [
        f"{total:,} samples of the GIL-holding thread while the worker ran, and "
        f"{startup:,} more in start-up and exit (imports, checks), not shown.",
        "",
    ]
    for title, counter in (("own time", own), ("inclusive time", inclusive)):
        out += [f"| share | frame ({title}) |", "| ---: | --- |"]
        out += [f"| {n / total:.1%} | `{frame}` |" for frame, n in counter.most_common(top)]
        out.append("")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=None)
    parser.add_argument("--prefetch", type=int, default=None)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--tasks-path",
        action="store_true",
        help="jobs of the django.tasks task, run through PgQueueBackend",
    )
    options = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        sys.exit("py-spy is not installed: pip install py-spy")
    from benchmarks.run import prepare_database, use_job_file
    from benchmarks.w2_drain import enqueue_noops, task_path

    prepare_database()
    use_job_file()
    enqueue_noops(options.jobs, task_path(options.tasks_path, "noop"))
    flags = ["--concurrency", str(options.concurrency)] if options.concurrency else []
    flags += ["--prefetch", str(options.prefetch)] if options.prefetch is not None else []
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "stacks.txt"
        subprocess.run(
            [
                spy,
                "record",
                "--gil",
                "-r",
                "250",
                "-f",
                "raw",
                "-o",
                str(raw),
                "--",
                sys.executable,
                "-m",
                "django",
                "runworker",
                "--burst",
                "-v",
                "0",
                *flags,
            ],
            cwd=ROOT,
            env={**os.environ, "DJANGO_SETTINGS_MODULE": SETTINGS},
            check=True,
            capture_output=True,
        )
        path = "the Tasks path" if options.tasks_path else "the direct API"
        report = (
            f"# Where `runworker` spends its CPU: {options.jobs:,} no-op jobs of {path}"
            f"{', ' + ' '.join(flags) if flags else ', default settings'}\n\n"
            + summarise(raw, options.top)
        )
    print(report)
    name = "-".join(flag.lstrip("-") for flag in flags) or "default"
    name = f"tasks-{name}" if options.tasks_path else name
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"profile-w2-{name}.md").write_text(report)


if __name__ == "__main__":
    main()
