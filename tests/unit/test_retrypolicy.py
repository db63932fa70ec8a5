"""The retry policy: one object decides whether and when, for the executor and the
reaper alike."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_pgqueue.control import Snooze
from django_pgqueue.exceptions import InvalidJob, JobTimeout, UnreadablePolicy
from django_pgqueue.records import ClaimedJob
from django_pgqueue.retrypolicy import (
    DEFAULT,
    RetryPolicy,
    classes_named,
    policy_of,
    row_policy,
    stored_policy,
)
from django_pgqueue.worker.executor import snoozed

NO_JITTER = {"BACKOFF_BASE": 2.0, "BACKOFF_MAX": 100.0, "BACKOFF_JITTER": 0}


def test_by_default_every_exception_is_retried_while_attempts_are_left() -> None:
    with override_settings(PGQUEUE=NO_JITTER):
        assert DEFAULT.after_failure(ValueError(), 1, 3, None) == 2.0
        assert DEFAULT.after_failure(KeyboardInterrupt(), 2, 3, None) == 4.0
        assert DEFAULT.after_failure(ValueError(), 3, 3, None) is None  # spent
        assert DEFAULT.after_failure(ValueError(), 1, 3, 10.0) == 10.0  # the job's own


def test_retry_on_retries_only_those_and_discard_on_wins() -> None:
    policy = RetryPolicy.build(retry_on=(OSError, JobTimeout), discard_on=FileNotFoundError)
    assert policy.retries(ConnectionError())  # a subclass of OSError
    assert policy.retries(JobTimeout())
    assert not policy.retries(ValueError())
    assert not policy.retries(FileNotFoundError())  # an OSError, but discarded
    with override_settings(PGQUEUE=NO_JITTER):
        assert policy.after_failure(ValueError(), 1, 5, None) is None
        assert policy.after_failure(TimeoutError(), 1, 5, None) == 2.0
    assert RetryPolicy.build(discard_on=[KeyError]).retries(ValueError())
    assert not RetryPolicy.build(retry_on=()).retries(ValueError())  # nothing retried


def test_a_lost_lease_is_a_failure_under_the_backoff_whatever_retry_on_says() -> None:
    picky = RetryPolicy.build(retry_on=KeyError)
    with override_settings(PGQUEUE=NO_JITTER):
        assert picky.after_lease_expired(1, 3, None) == 2.0
        assert picky.after_lease_expired(2, 3, 1.0) == 2.0
        assert picky.after_lease_expired(3, 3, None) is None


def test_a_backoff_that_is_no_number_of_seconds_counts_as_none_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # NaN and Infinity (a row written by hand) waited the year a 1e300 waits.
    with override_settings(PGQUEUE=NO_JITTER), caplog.at_level("WARNING", "django_pgqueue"):
        assert DEFAULT.after_failure(ValueError(), 2, 3, float("nan"), 7) == 4.0
        assert DEFAULT.after_lease_expired(1, 3, float("inf"), 8) == 2.0
        assert DEFAULT.after_lease_expired(1, 3, 1e300) == 365 * 86400.0  # a year, as ever
    assert caplog.messages == [
        "job 7 has backoff = NaN, no number of seconds: its retry waits as "
        "PGQUEUE['BACKOFF_BASE'] says",
        "job 8 has backoff = Infinity, no number of seconds: its retry waits as "
        "PGQUEUE['BACKOFF_BASE'] says",
    ]


def test_snoozes_are_bounded_by_max_snoozes() -> None:
    assert DEFAULT.may_snooze(99)
    assert not DEFAULT.may_snooze(100)
    with override_settings(PGQUEUE={"MAX_SNOOZES": 0}):
        assert not DEFAULT.may_snooze(0)


@pytest.mark.parametrize("value", ["ValueError", ValueError(), 3, (ValueError, "x"), int])
def test_a_policy_takes_exception_classes_only(value: object) -> None:
    with pytest.raises(InvalidJob, match=r"retry_on .* must be an exception class or a tuple"):
        RetryPolicy.build(retry_on=value)


def test_policy_of_reads_the_task_objects_policy() -> None:
    class Declared:
        retry_policy = RetryPolicy.build(retry_on=KeyError)

    assert policy_of(Declared()).retry_on == ("builtins.KeyError",)
    assert policy_of(object()) is DEFAULT
    assert RetryPolicy.build(retry_on=[KeyError]) == RetryPolicy.build(retry_on=KeyError)


def test_a_policy_travels_as_class_paths_and_matches_subclasses() -> None:
    policy = RetryPolicy.build(retry_on=OSError, discard_on=FileNotFoundError)
    copy = RetryPolicy.from_json(policy.to_json())
    assert copy == policy
    assert copy.retries(ConnectionError())  # an OSError subclass
    assert not copy.retries(FileNotFoundError())
    assert not copy.retries(KeyError())
    assert RetryPolicy().to_json() is None
    assert RetryPolicy.from_json("null") is DEFAULT  # JSON null, as SQL NULL: none kept


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"retry_on": 3}', "retry_on is not a list of exception paths: 3"),
        ('{"discard_on": {"a": 1}}', "discard_on is not a list of exception paths: {'a': 1}"),
        ("[]", "not a JSON object with retry_on and discard_on"),
        ('{"retry_on": ["builtins.KeyError", "KeyError"]}', "retry_on holds 'KeyError', not"),
        ('{"discard_on": ["a..b"]}', "discard_on holds 'a..b', not an exception's dotted path"),
        ('{"discard_on": ["a.b\\u2028"]}', "discard_on holds 'a.b\\u2028', not an"),
        ('{"retry_on": ' + "[" * 3000 + "]" * 3000 + "}", "its JSON is nested too deep"),
        ('{"retry_on": ["' + "a." * 40_000 + 'E"]}', "longer than 65536 characters"),
    ],
)
def test_a_policy_written_by_hand_that_is_none_says_why(text: str, why: str) -> None:
    """It read as the default policy (retry every exception), whatever its task
    declared; now the caller is told, and the worker applies the task's."""
    with pytest.raises(UnreadablePolicy) as raised:
        RetryPolicy.from_json(text)
    assert str(raised.value).startswith(why), raised.value
    assert stored_policy(text) is None  # a result shows its task's
    declared = RetryPolicy.build(retry_on=KeyError)
    assert row_policy(1, "t.t", text, lambda: declared, warn=False) is declared


def test_the_snooze_bound_says_how_many_snoozes_in_words() -> None:
    claimed = ClaimedJob(
        id=1, run=1, task="t.t", args=[], kwargs={}, queue="default", priority=0, attempt=1,
        max_attempts=3, concurrency_key=None, unique_key=None, snoozes=1,
    )  # fmt: skip
    with override_settings(PGQUEUE={"MAX_SNOOZES": 1}):
        outcome = snoozed(claimed, Snooze(5))
    assert outcome.final
    assert outcome.message == (
        "the job snoozed 1 time, the most PGQUEUE['MAX_SNOOZES'] allows; it asked to snooze "
        "again (snoozed for 5s) and is buried instead"
    )


class Outer:
    class Nested(LookupError):
        pass


def test_a_rows_paths_name_the_classes_imported_here_or_stand_ins_for_them() -> None:
    policy = RetryPolicy.build(retry_on=(KeyError, Outer.Nested))
    assert classes_named(policy.retry_on or ()) == (KeyError, Outer.Nested)
    (gone,) = classes_named(("nowhere.errors.Gone",))
    assert RetryPolicy.build(retry_on=gone).retry_on == ("nowhere.errors.Gone",)
    assert stored_policy(None) is None
    assert stored_policy({"retry_on": None, "discard_on": ["builtins.KeyError"]}) == (
        RetryPolicy.build(discard_on=KeyError)
    )


def test_a_rows_class_paths_are_looked_up_without_running_any_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A row's paths are read on every run (the running job's TaskResult): walking
    them with getattr ran a module's ``__getattr__`` (PEP 562: a lazy import, or an
    error, which then failed the run before the task started) and set up any lazy
    object on the way. Only what modules and classes already hold is read."""
    import sys
    import types

    from django.utils.functional import SimpleLazyObject

    asked: list[str] = []

    def lazy_getattr(name: str) -> object:
        asked.append(name)
        raise RuntimeError(f"importing the submodule for {name!r} failed")

    lazy = types.ModuleType("r1_lazy_errors")
    lazy.__getattr__ = lazy_getattr  # type: ignore[method-assign]

    def set_up() -> type[Outer]:
        asked.append("client set up")
        return Outer

    lazy.client = SimpleLazyObject(set_up)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "r1_lazy_errors", lazy)
    paths = ("r1_lazy_errors.Boom", "r1_lazy_errors.client.Nested", "r1_lazy_errors.client")
    assert [f"{c.__module__}.{c.__qualname__}" for c in classes_named(paths)] == list(paths)
    assert asked == []


def test_a_stand_in_pickles_by_its_path() -> None:
    """A result's task carries the row's classes, a stand-in for one no module here
    holds: pickling that task (Django 6.1's Tasks pickle) raised PicklingError, as
    the stand-in's module cannot be imported. It pickles by its path, and unpickles
    as the class where that is imported, or as a stand-in again."""
    import pickle

    (gone,) = classes_named(("nowhere.errors.Gone",))
    again = pickle.loads(pickle.dumps(gone))
    assert RetryPolicy.build(retry_on=again).retry_on == ("nowhere.errors.Gone",)
    both = pickle.loads(pickle.dumps((gone, Outer.Nested)))
    assert both[1] is Outer.Nested
    assert RetryPolicy.build(retry_on=both).retry_on == (
        "nowhere.errors.Gone",
        f"{__name__}.Outer.Nested",
    )


def test_a_stand_in_is_made_once_per_path() -> None:
    """A running job's result carries its row's classes, looked up whenever the
    result's task is not cached (a job with its own unique_key or run_after: each
    one). A new stand-in class per job made that some 50 us a run; the same path
    now gets the same stand-in, and a class imported since is found first."""
    import sys
    import types

    (first,) = classes_named(("r1_later.errors.Gone",))
    assert classes_named(("r1_later.errors.Gone",)) == (first,)
    module = types.ModuleType("r1_later.errors")
    real = type("Gone", (Exception,), {"__module__": "r1_later.errors", "__qualname__": "Gone"})
    module.Gone = real  # type: ignore[attr-defined]
    sys.modules["r1_later.errors"] = module
    try:
        assert classes_named(("r1_later.errors.Gone",)) == (real,)
    finally:
        del sys.modules["r1_later.errors"]


def test_classes_all_found_are_looked_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A running job's result names its row's classes on every run whose task is
    not cached (one with its own unique_key or run_after): looking each path up
    again cost a job with two classes some 4 us of 8. Classes all found are kept;
    a stand-in is looked for again (its module may be imported since)."""
    from django_pgqueue import retrypolicy

    looked: list[str] = []
    find = retrypolicy._class_named

    def counted(path: str) -> type[BaseException]:
        looked.append(path)
        return find(path)

    monkeypatch.setattr(retrypolicy, "_class_named", counted)
    monkeypatch.setattr(retrypolicy, "_found", {})  # as a fresh worker
    paths = ("builtins.ConnectionError", f"{__name__}.Outer.Nested")
    assert classes_named(paths) == classes_named(paths) == (ConnectionError, Outer.Nested)
    assert looked == list(paths)
    classes_named(("nowhere.errors.Gone",))
    classes_named(("nowhere.errors.Gone",))
    assert looked[2:] == ["nowhere.errors.Gone"] * 2
