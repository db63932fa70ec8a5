"""argparse types and a base command whose mistakes are one clean line.

Each type turns a bad value into ``argparse.ArgumentTypeError`` with a message
that names what was expected; :class:`PgQueueCommand` turns every parser error
into a ``CommandError``, which Django prints as a single line.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import math
import re
import sys
import types
from collections.abc import Callable
from typing import Any, NoReturn, cast

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from django_pgqueue import conf, validation
from django_pgqueue.dberrors import first_line, is_transient, prepare_lost, schema_problem
from django_pgqueue.records import FINISHED

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")
_TIMEDELTA = re.compile(r"(?:(\d+) days?, )?(\d+):(\d\d):(\d\d(?:\.\d+)?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
FINISHED_STATUSES = FINISHED


def _number[N: (int, float)](
    parse: Callable[[str], N], low: N, high: N, *, inclusive: bool, expected: str
) -> Callable[[str], N]:
    """An argparse type: ``parse`` the value and require it above (or at) ``low`` and
    at most ``high`` (the settings' bounds: past them, time and thread arithmetic
    fails later, in the middle of a run)."""

    def convert(value: str) -> N:
        try:
            number = parse(value)
        except ValueError:
            number = None
        # NaN and infinity are floats too, and no sane count of seconds.
        if (
            number is None
            or not math.isfinite(number)
            or not (number >= low if inclusive else number > low)
            or number > high
        ):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {value!r}")
        return number

    convert.__name__ = expected
    return convert


positive_int = _number(
    int,
    1,
    validation.MAX_COUNT,
    inclusive=True,
    expected=f"a whole number from 1 to {validation.MAX_COUNT:,}",
)
non_negative_int = _number(
    int,
    0,
    validation.MAX_COUNT,
    inclusive=True,
    expected=f"a whole number from 0 to {validation.MAX_COUNT:,}",
)
concurrency = _number(
    int,
    1,
    validation.MAX_CONCURRENCY,
    inclusive=True,
    expected=f"a whole number from 1 to {validation.MAX_CONCURRENCY:,}",
)
positive_seconds = _number(
    float,
    0.0,
    validation.MAX_DELAY,
    inclusive=False,
    expected="a number of seconds above 0 (at most ten years)",
)
non_negative_seconds = _number(
    float,
    0.0,
    validation.MAX_DELAY,
    inclusive=True,
    expected="a number of seconds, 0 or more (at most ten years)",
)


def prefetch(value: str) -> int | str:
    """``auto`` or a whole number, 0 or more (within int4, as PREFETCH)."""
    if value.strip().lower() == "auto":
        return "auto"
    try:
        return non_negative_int(value)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected auto or a whole number from 0 to {validation.MAX_COUNT:,}, got {value!r}"
        ) from None


def _duration(*, zero: bool) -> Callable[[str], float]:
    """An argparse type: ``90``, ``30s``, ``15m``, ``12h``, ``7d``, ``2w`` -> seconds;
    0 too when ``zero`` (an age limit: any wait is too long), not for a prune bound,
    where 0 would delete every finished job."""
    lowest = "0 or more" if zero else "above 0"

    def convert(value: str) -> float:
        match = _DURATION.fullmatch(value.strip().lower())
        seconds = float(match[1]) * _UNIT_SECONDS[match[2]] if match else -1.0
        if (spelt := _TIMEDELTA.fullmatch(value.strip())) is not None:
            # str(timedelta): how call_command() passes one for a required option.
            days, hours, minutes, rest = spelt.groups(default="0")
            seconds = ((int(days) * 24 + int(hours)) * 60 + int(minutes)) * 60 + float(rest)
        if seconds < 0 or (seconds == 0 and not zero) or seconds > validation.MAX_DELAY:
            raise argparse.ArgumentTypeError(
                f"expected a duration {lowest} and at most ten years, such as 30s, 15m, 12h, "
                f"7d or 2w, got {value!r}"
            )
        return seconds

    convert.__name__ = "duration"
    return convert


duration = _duration(zero=False)
age_limit = _duration(zero=True)


def queue_list(value: str) -> tuple[str, ...]:
    queues = tuple(q.strip() for q in value.split(",") if q.strip())
    if not queues or not all(validation.QUEUE.is_valid(q) for q in queues):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated queue names, each {validation.QUEUE.expected}; got {value!r}"
        )
    return queues


def queue_name(value: str) -> str:
    if not validation.QUEUE.is_valid(value):
        raise argparse.ArgumentTypeError(f"expected {validation.QUEUE.expected}, got {value!r}")
    return value


def finished_statuses(value: str) -> tuple[str, ...]:
    statuses = tuple(s.strip() for s in value.split(",") if s.strip())
    if not statuses or set(statuses) - set(FINISHED_STATUSES):
        raise argparse.ArgumentTypeError(
            f"expected one or more of {', '.join(FINISHED_STATUSES)}, comma-separated "
            f"(such as done,dead), got {value!r}"
        )
    return tuple(dict.fromkeys(statuses))


def port(value: str) -> int:
    """A TCP port, 0 to 65535 (0: any free one)."""
    try:
        number = int(value)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(
            f"expected a port number, 0 to 65535 (0 picks a free port), got {value!r}"
        )
    return number


def worker_id(value: str) -> str:
    if not value.strip() or len(value) > 200 or not validation.storable(value):
        raise argparse.ArgumentTypeError(
            "expected a non-empty worker id of at most 200 chars, in UTF-8 and without NUL"
        )
    return value.strip()


def _one_line_error(parser: CommandParser, message: str) -> NoReturn:
    raise CommandError(f"{parser.prog.split()[-1]}: {message}")


class PgQueueCommand(BaseCommand):
    """A management command whose bad arguments end in one ``CommandError`` line.

    Django prints argparse's usage block and the error when a command is run
    from the shell; we raise ``CommandError`` instead, which it prints as one line.
    """

    #: Set by the command line, whose values argparse has converted already.
    _parsed = False

    def get_version(self) -> str:
        """``--version``: django-pgqueue's, not Django's."""
        from django_pgqueue import __version__

        return __version__

    def run_from_argv(self, argv: list[str]) -> None:
        # Django parses the arguments before the block that prints CommandError
        # as one line, so a parse error would escape as a traceback.
        self._parsed = True
        try:
            super().run_from_argv(argv)
        except CommandError as exc:
            if "--traceback" in argv:
                raise
            self.stderr.write(f"CommandError: {exc}")
            sys.exit(exc.returncode)

    def execute(self, *args: Any, **options: Any) -> Any:
        if not self._parsed:  # call_command(): its values skipped the converters
            self._check_given(options)
        # A database that cannot be reached, or lacks the tables, is one line too.
        try:
            return super().execute(*args, **options)
        except DatabaseError as exc:
            problem = schema_problem(exc, _job_database())
            if problem is None and (not is_transient(exc) or prepare_lost(exc)):
                raise  # a lost prepared statement is no unreachable database
            raise CommandError(problem or f"cannot reach the database: {first_line(exc)}") from exc

    def _check_given(self, options: dict[str, Any]) -> None:
        """``call_command(..., concurrency=0, older_than="7d")`` passes its values past
        argparse's converters: each is converted, and checked, by its argument's
        converter, as on the command line (a CommandError if bad). A list or tuple
        (``queues=["emails", "sms"]``) is read as its comma-separated items, a
        timedelta as its seconds, and a value outside an option's choices is refused, as
        are two options of a mutually exclusive group."""
        parser = self.create_parser("manage.py", type(self).__module__.rpartition(".")[2])
        for action in parser._actions:
            value, convert = options.get(action.dest), action.type
            shown = "/".join(action.option_strings) or action.dest
            if value is None:
                continue
            # An argument of several values (nargs): each converted on its own, and one
            # string given for it (disable="tick") is a list of one, not its letters.
            each = action.nargs in ("+", "*") or isinstance(action.nargs, int)
            if each and isinstance(value, str):
                value = options[action.dest] = [value]
            if callable(convert):
                items = list(value) if each and isinstance(value, list | tuple) else None
                texts = [_as_text(v) for v in items] if items is not None else [_as_text(value)]
                if None in texts or texts == []:
                    _one_line_error(parser, f"argument {shown}: {value!r} is not a value it takes")
                try:
                    converted = [
                        cast(Callable[[str], Any], convert)(text)
                        for text in texts
                        if text is not None
                    ]
                except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
                    _one_line_error(parser, f"argument {shown}: {exc}")
                value = converted if items is not None else converted[0]
                options[action.dest] = value
            if action.choices is not None and not all(
                v in action.choices for v in (value if isinstance(value, list) else [value])
            ):
                choices = ", ".join(map(repr, action.choices))
                _one_line_error(parser, f"argument {shown}: {value!r} is not one of {choices}")
        # call_command() leaves argparse's mutually exclusive groups unchecked.
        for group in parser._mutually_exclusive_groups:
            given = [
                "/".join(a.option_strings)
                for a in group._group_actions
                if options.get(a.dest) not in (None, a.default)
            ]
            if len(given) > 1:
                _one_line_error(
                    parser, f"argument {given[1]}: not allowed with argument {given[0]}"
                )

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.error = types.MethodType(_one_line_error, parser)  # type: ignore[method-assign]
        return parser


def _as_text(value: object) -> str | None:
    """A ``call_command()`` value as the command line would spell it; None for one
    that has no such spelling (refused)."""
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool):
        return str(value)  # a flag's value given to an option that takes one: refused
    if isinstance(value, float):  # 1e-05 as 0.00001, which the converters read
        return format(value, "f").rstrip("0").rstrip(".") if math.isfinite(value) else str(value)
    if isinstance(value, str | int):
        return str(value)
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return ",".join(value)
    return None


def metrics_address(value: str) -> str:
    """An address for the metrics server to listen on: not empty."""
    if not value.strip():
        raise argparse.ArgumentTypeError(
            "expected an address such as 127.0.0.1, 0.0.0.0 or ::, got ''"
        )
    return value


def setting_default(key: str) -> str:
    """``PGQUEUE['KEY'], now 10``: where an option's default comes from, and its value."""
    try:
        value = getattr(conf.get(), key)
    except ImproperlyConfigured:  # --help still works; check() reports the settings
        value = next(f.default for f in dataclasses.fields(conf.Settings) if f.name == key)
    if value is None:
        shown = "none"
    elif isinstance(value, float):
        shown = f"{value:g}"
    elif isinstance(value, tuple):
        shown = ",".join(value)
    else:
        shown = str(value)
    return f"PGQUEUE['{key}'], now {shown}"


def _job_database() -> str | None:
    """The alias the commands act on (None if the settings cannot tell): `migrate` there."""
    try:
        return conf.database()
    except Exception:
        return None
