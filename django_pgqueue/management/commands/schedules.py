"""``manage.py schedules``: each periodic schedule, its last and next tick; and
``--disable NAME`` / ``--enable NAME``, kept in the database for every worker."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from django_pgqueue import conf
from django_pgqueue.exceptions import InvalidSchedule, SchedulesBusy
from django_pgqueue.management.base import PgQueueCommand
from django_pgqueue.models import Schedule
from django_pgqueue.periodic.overview import ScheduleView, local_moment, overview

HEADER = ("schedule", "expression", "timezone", "state", "last tick", "last job", "next tick")


def _row(view: ScheduleView) -> tuple[str, ...]:
    job = "-"
    if view.last_job_id is not None:
        job = f"#{view.last_job_id} {view.last_job_status or 'pruned'}"
    return (
        view.name,
        view.expression,
        view.timezone,
        view.state_text() if view.seen else f"{view.state} (no worker has started with it yet)",
        view.last_tick_text(),
        job,
        local_moment(view.next_tick, view.timezone),
    )


class Command(PgQueueCommand):
    help = (
        "List the periodic schedules (PGQUEUE['PERIODIC']): expression, time zone, state, "
        "last tick enqueued and its job's status, next tick. --disable and --enable switch "
        "schedules for every worker, without a deploy."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print JSON for monitoring.")
        switch = parser.add_mutually_exclusive_group()
        switch.add_argument(
            "--disable",
            nargs="+",
            metavar="NAME",
            help="Stop enqueueing these schedules' ticks (kept in the database).",
        )
        switch.add_argument(
            "--enable",
            nargs="+",
            metavar="NAME",
            help="Enqueue these schedules' ticks again, from the next one.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        alias = conf.database()
        for key, enabled in (("disable", False), ("enable", True)):
            if options[key]:
                try:
                    changed = Schedule.objects.set_enabled(options[key], enabled, using=alias)
                except InvalidSchedule as exc:
                    raise CommandError(str(exc)) from None
                except SchedulesBusy as exc:
                    raise CommandError(f"nothing was {key}d: {exc}") from None
                off = {spec.name for spec in conf.get().schedules if not spec.enabled}
                for name in dict.fromkeys(options[key]):  # once each, in the order given
                    done = "" if name in changed else " already"
                    self.stdout.write(f"schedule {name!r} was{done} {key}d")
                    if name in off:
                        self.stderr.write(
                            f"warning: schedule {name!r} is off in PGQUEUE['PERIODIC'] "
                            '("enabled": False): no worker enqueues it, whatever this switch '
                            "says, until the settings turn it on"
                        )
                return
        views = overview(alias)
        if options["json"]:
            self.stdout.write(json.dumps([view.as_json() for view in views], indent=2))
            return
        if not views:
            self.stdout.write("no schedules: PGQUEUE['PERIODIC'] is empty")
            return
        rows = [HEADER, *(_row(view) for view in views)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
        for row in rows:
            self.stdout.write(
                "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            )
