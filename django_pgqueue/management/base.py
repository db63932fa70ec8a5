"""The base of our management commands: every mistake on the command line, or in
``call_command()``'s values, is one clean ``CommandError`` line.

Django prints argparse's usage block and the error when a command is run from the
shell; :class:`PgQueueCommand` raises ``CommandError`` instead, which it prints as
one line, with exit status 2 (:data:`USAGE`) as argparse's. A database that cannot
be reached, or lacks the tables, is one line too (status 1).
"""

from __future__ import annotations

import argparse
import datetime as dt
import difflib
import math
import sys
import types
from collections.abc import Callable
from typing import Any, NoReturn, cast

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connections
from django.utils.connection import ConnectionDoesNotExist

from django_pgqueue import __version__, conf
from django_pgqueue.dberrors import first_line, is_transient, prepare_lost, schema_problem
from django_pgqueue.sql import runner

#: The exit status of a command line a command cannot take: argparse's and Django's own
#: (``queuestats --check`` keeps 1 for an unhealthy queue).
USAGE = 2


def usage_error(command: str, message: str) -> CommandError:
    """A command line ``command`` cannot take, as one line: ``command: message``."""
    return CommandError(f"{command}: {message}", returncode=USAGE)


def _one_line_error(parser: CommandParser, message: str) -> NoReturn:
    extras = message.removeprefix("unrecognized arguments: ")
    if (  # "--queues a b", as RQ's worker takes them, or a queue given alone
        extras != message
        and "--queues" in parser._option_string_actions
        and not any(word.startswith("-") for word in extras.split())
    ):
        message += (
            " (queues are given with --queues, several as one comma-separated list: --queues a,b)"
        )
    elif extras != message:  # a misspelt flag (--brust): name the one meant
        flags = [flag for flag in parser._option_string_actions if flag.startswith("--")]
        for word in extras.split():
            meant = difflib.get_close_matches(word.partition("=")[0], flags, n=1, cutoff=0.85)
            if word.startswith("--") and meant:
                message += f" (did you mean {meant[0]}?)"
                break
    raise usage_error(parser.prog.split()[-1], message)


class PgQueueCommand(BaseCommand):
    """A management command whose bad arguments end in one ``CommandError`` line.

    Django prints argparse's usage block and the error when a command is run
    from the shell; we raise ``CommandError`` instead, which it prints as one line.
    """

    #: Set by the command line, whose values argparse has converted already.
    _parsed = False

    def refuse(self, message: str) -> CommandError:
        """The error for options that do not go together (exit status 2)."""
        return usage_error(type(self).__module__.rpartition(".")[2], message)

    def get_version(self) -> str:
        """``--version``: django-pgqueue's, not Django's."""
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
            if options.get("skip_checks") and (alias := _job_database()) is not None:
                runner.usable(alias)  # E002's error, before a command trips over it
            return super().execute(*args, **options)
        except DatabaseError as exc:
            problem = schema_problem(exc, _job_database())
            if problem is None and (not is_transient(exc) or prepare_lost(exc)):
                raise  # a lost prepared statement is no unreachable database
            raise CommandError(problem or f"cannot reach the database: {first_line(exc)}") from exc
        except ImproperlyConfigured as exc:  # PGQUEUE, read with the checks skipped
            raise CommandError(str(exc)) from exc
        except ConnectionDoesNotExist as exc:  # PGQUEUE["DATABASE"] too, read so
            alias = _job_database()
            if alias is not None and alias not in connections.settings:
                raise CommandError(str(runner.missing_database(alias))) from exc
            raise CommandError(str(exc)) from exc

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


def _job_database() -> str | None:
    """The alias the commands act on (None if the settings cannot tell): `migrate` there."""
    try:
        return conf.database()
    except Exception:
        return None
