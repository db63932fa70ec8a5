"""``PgQueueBackend``: Django's Tasks framework on the django-pgqueue job table."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.apps import apps
from django.db import DatabaseError, DataError, transaction

from django_pgqueue import conf, validation, wording
from django_pgqueue.backend.checks import (
    OPTION_RULES,
    PARAMS,
    QUEUES_UNSET,
    check_backend,
    queue_not_listed,
    queues_problem,
    shape_problem,
    unknown_params_problem,
)
from django_pgqueue.backend.compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
    task_enqueued,
)
from django_pgqueue.backend.enqueueing import (
    check_call,
    checked,
    encode,
    not_a_task,
    pair_at,
    plan,
)
from django_pgqueue.backend.results import build_result, job_result
from django_pgqueue.backend.task import PgQueueTask, validate_extras
from django_pgqueue.dberrors import first_line, schema_problem
from django_pgqueue.exceptions import InvalidJob
from django_pgqueue.installed import NOT_INSTALLED, job_model

if TYPE_CHECKING:
    from django_pgqueue.models import Job


class PgQueueBackend(BaseTaskBackend):
    """Tasks run by django-pgqueue workers; results read from the job table.

    ``TASKS = {"default": {"BACKEND": "django_pgqueue.backend.PgQueueBackend",
    "QUEUES": [...], "OPTIONS": {"MAX_ATTEMPTS": 5}}}``. Jobs go to the database
    ``PGQUEUE["DATABASE"]``, in the caller's transaction.
    """

    task_class = PgQueueTask
    supports_defer = True
    supports_priority = True
    supports_get_result = True
    supports_async_task = True

    #: The OPTIONS keys this backend reads; check() reports any other (E103).
    known_options = frozenset(OPTION_RULES)

    # Django builds a backend at import time of every module that declares a task
    # (and once per thread), possibly before the app registry is ready, so OPTIONS
    # are read when used and check() reports what is wrong with them.

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        #: QUEUES as written: Django's set() turns one string into its letters, and
        #: fails on None. Of the wrong shape, no queue is checked here: check() and
        #: validate_task() say what is wrong instead.
        self.queues_setting = params.get("QUEUES", QUEUES_UNSET)
        #: Keys Django's backends do not read (a typo, "QUEUE"): check() says so (E109).
        self.unknown_params = sorted(set(params) - set(PARAMS))
        if queues_problem(alias, self.queues_setting) is not None:
            params = {**params, "QUEUES": []}
        super().__init__(alias, params)

    @property
    def database(self) -> str:
        """The database alias jobs are written to and results read from."""
        return conf.database()

    def validate_task(self, task: Task[Any, Any]) -> None:
        """Django's checks, then the queue's own: the app installed, a valid queue name
        and valid options.

        Django validates a Task when it is declared: a task module imported without
        the app installed (by a URLconf that ``manage.py check`` loads, say) fails
        there with the fix, as a model of an app that is not installed does. Before
        the app registry is ready it cannot be told, and enqueue says it instead.
        """
        if apps.ready and "django_pgqueue" not in apps.app_configs:
            raise InvalidTask(
                f"{NOT_INSTALLED} (django_pgqueue.E101: TASKS[{self.alias!r}] uses PgQueueBackend)"
            )
        if (problem := shape_problem(self.alias, self.options, self.queues_setting)) is not None:
            raise InvalidTask(problem)
        if not _whole_priority(task.priority):
            raise InvalidTask(  # Django's own check would raise TypeError or ValueError
                f"priority must be a whole number between -100 and 100, not {task.priority!r}"
            )
        if self.queues and task.queue_name not in self.queues:
            raise InvalidTask(queue_not_listed(self, task.queue_name, task.module_path))
        try:
            super().validate_task(task)  # refuses a function defined inside another
        except InvalidTask as exc:  # Django's words do not say which task
            raise InvalidTask(f"{exc} (task {wording.task_path(task.func)!r})") from None
        if "<lambda>" in task.func.__qualname__:  # all of a module's share its path
            raise InvalidTask(
                f"Task {task.module_path!r} is a lambda: a worker finds a task by its module "
                "and name, and every lambda of a module has the same one. Define it with def "
                "at the top level of its module."
            )
        if (where := wording.not_top_level(task.func.__qualname__)) is not None:  # a class
            raise InvalidTask(
                f"Task {task.module_path!r} is defined {where}, and {wording.TOP_LEVEL_ONLY}"
            )
        if not validation.QUEUE.is_valid(task.queue_name):
            raise InvalidTask(
                f"Queue name {task.queue_name!r} is not valid for django-pgqueue: "
                f"expected {validation.QUEUE.expected}."
            )
        validate_extras(task)

    def enqueue[**P, R](
        self, task: Task[P, R], args: list[Any], kwargs: dict[str, Any]
    ) -> TaskResult[P, R]:
        """Insert the job in the caller's transaction and return its READY result.

        With a ``unique_key`` that a queued or running job already holds, nothing is
        inserted, no ``task_enqueued`` is sent, and the result is that job's.
        """
        result, inserted = self._write(task, args, kwargs)
        if inserted:
            task_enqueued.send(type(self), task_result=result)
        return result

    def _write[**P, R](
        self, task: Task[P, R], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> tuple[TaskResult[P, R], bool]:
        """:meth:`enqueue` without its signal: (the result, whether a job was inserted)."""
        shared = plan(self, task)  # validated once per task
        args_json, kwargs_json, plain_args, plain_kwargs = encode(args, kwargs)
        check_call(task, args, kwargs)
        inserted = job_model().objects.insert(
            shared.spec(args_json, kwargs_json), using=self.database
        )
        if inserted.duplicate:
            live = load_job(inserted.id, self.database)
            if live.task == task.module_path:
                return job_result(live, self.alias, task), False
            try:
                return job_result(live, self.alias), False  # another Task's job holds the key
            except TaskResultDoesNotExist:
                raise InvalidJob(
                    f"unique_key {shared.unique_key!r} is held by live job {live.id} of "
                    f"{live.task!r}, which is not a Tasks-framework Task, so there is no "
                    f"TaskResult to return for it; nothing was enqueued. Give "
                    f"{task.module_path!r} keys of its own (prefix them with its name)."
                ) from None
        result: TaskResult[P, R] = build_result(
            task,
            str(inserted.id),
            TaskResultStatus.READY,
            inserted.created_at,
            None,
            None,
            plain_args,
            plain_kwargs,
            self.alias,
            [],
            [],
        )
        return result, True

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        """The job's current state; TaskResultDoesNotExist for unknown or malformed ids."""
        return job_result(load_job(result_id, self.database), self.alias)

    def check(self, **kwargs: Any) -> list[Any]:
        """Django's checks, then ours (E101-E109, see ``django_pgqueue.backend.checks``)."""
        return [
            *super().check(**kwargs),
            *check_backend(self.alias, self.options, self.queues, self.queues_setting),
            *unknown_params_problem(self.alias, self.unknown_params),
        ]


def _whole_priority(priority: object) -> bool:
    """Django's own priority check, without its TypeError (a str) or ValueError (NaN):
    a number from -100 to 100 that int() leaves unchanged. So True (an int), 5.0,
    Decimal("5") and Fraction(5) pass, as in Django; the job stores int(priority).
    ArithmeticError: Decimal("NaN") raises InvalidOperation when compared."""
    try:
        return -100 <= priority <= 100 and int(priority) == priority  # type: ignore[operator, call-overload]
    except (TypeError, ValueError, ArithmeticError):
        return False


async def aenqueue_many[**P, R](
    task: Task[P, R], calls: Iterable[tuple[Sequence[Any], Mapping[str, Any]]]
) -> list[TaskResult[P, R]]:
    """:func:`enqueue_many` from async code, as Django's ``aenqueue()`` runs
    ``enqueue()``: in the thread that holds the caller's database connection, so
    it joins the same transaction."""
    return await sync_to_async(enqueue_many, thread_sensitive=True)(task, calls)


def enqueue_many[**P, R](
    task: Task[P, R], calls: Iterable[tuple[Sequence[Any], Mapping[str, Any]]]
) -> list[TaskResult[P, R]]:
    """Enqueue one job of ``task`` per ``(args, kwargs)`` pair, in one statement.

    The bulk counterpart of ``task.enqueue(...)``: it joins the caller's
    transaction, wakes the workers when that commits, sends ``task_enqueued``
    for every job and returns their READY results in order. Build the pairs with
    :func:`call`. Batches of 500 jobs or more without a ``unique_key`` are
    written with COPY. A task with a ``unique_key`` enqueues at most one job
    (the others are duplicates of it), as repeated ``enqueue()`` calls would.
    A receiver of ``task_enqueued`` that raises gets every job's signal all the
    same (sent with ``send``, as ``enqueue()`` sends it); then its first error is
    raised, the jobs written (as ``enqueue()`` leaves its own). On another
    backend (Django's ImmediateBackend in tests, say) it calls ``task.enqueue()``
    once per pair.
    """
    if not isinstance(task, Task):
        raise TypeError(not_a_task(task))
    backend = task_backends[task.backend]
    pairs = [pair_at(task, index, item) for index, item in enumerate(calls)]
    if not isinstance(backend, PgQueueBackend):
        # Another backend (Django's ImmediateBackend or DummyBackend in tests, say):
        # one enqueue per call, each as that backend does it.
        return [task.enqueue(*args, **kwargs) for args, kwargs in pairs]
    shared = plan(backend, task)
    # Every call is checked before anything is written.
    encoded = [checked(task, index, *pair) for index, pair in enumerate(pairs)]
    if shared.unique_key is not None:
        # One live job per key: every call after the first is its duplicate.
        with transaction.atomic(using=backend.database):
            written = [backend._write(task, args, kwargs) for args, kwargs in pairs]
        _announce(backend, [result for result, inserted in written if inserted])
        return [result for result, _ in written]
    ids, created_at = job_model().objects.insert_many(
        [shared.spec(a, k) for a, k, _, _ in encoded], using=backend.database
    )
    results: list[TaskResult[P, R]] = [
        build_result(
            task,
            str(job_id),
            TaskResultStatus.READY,
            created_at,
            None,
            None,
            args,
            kwargs,
            backend.alias,
            [],
            [],
        )
        for job_id, (_, _, args, kwargs) in zip(ids, encoded, strict=True)
    ]
    _announce(backend, results)
    return results


def _announce(backend: PgQueueBackend, results: Sequence[TaskResult[Any, Any]]) -> None:
    """``task_enqueued`` for each result, as enqueue() sends it; a receiver's error
    is raised once every job's signal was sent (the first, if several raise)."""
    first: Exception | None = None
    for result in results:
        try:
            task_enqueued.send(type(backend), task_result=result)
        except Exception as exc:
            first = first or exc
    if first is not None:
        raise first


MAX_JOB_ID = 2**63 - 1  # bigint


def parse_id(result_id: object) -> int | None:
    """The job id in ``result_id`` (canonical decimal), or None if it cannot be one."""
    if isinstance(result_id, int) and not isinstance(result_id, bool):
        job_id = result_id
    elif isinstance(result_id, str) and result_id.isascii() and result_id.isdigit():
        job_id = int(result_id)
        if str(job_id) != result_id:  # "007" would read job 7 under another id
            return None
    else:
        return None
    return job_id if 0 < job_id <= MAX_JOB_ID else None


def load_job(result_id: object, database: str) -> Job:
    """The job a result id names, or TaskResultDoesNotExist (also for malformed ids).
    InvalidJob, naming it, for a row Python cannot read (JSON with a number past
    int's 4,300 digits or nesting past the recursion limit, a time of infinity:
    written by another program), since a TaskResult holds its values."""
    job_id = parse_id(result_id)
    try:
        job = (
            None
            if job_id is None
            else job_model().objects.using(database).filter(id=job_id).first()
        )
    except (ValueError, RecursionError, DataError) as exc:
        # DataError: psycopg could not load a time (infinity, a year BC: written by hand).
        what = "a time" if isinstance(exc, DataError) else "JSON"
        raise InvalidJob(
            f"job {job_id} holds {what} that Python cannot read ({first_line(exc)}), so "
            "there is no TaskResult for it (the admin shows the row as stored)"
        ) from None
    except DatabaseError as exc:  # a missing table: say "migrate", as enqueue does
        if (problem := schema_problem(exc, database)) is not None:
            exc.add_note(problem)
        raise
    if job is None:
        raise TaskResultDoesNotExist(result_id)
    return job
