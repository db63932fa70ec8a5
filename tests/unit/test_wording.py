"""wording.joined: one way of listing names, with "and" or "or"."""

from __future__ import annotations

from django_pgqueue import wording


def test_joined_lists_words_with_the_conjunction_before_the_last() -> None:
    assert wording.joined([], "and") == ""
    assert wording.joined(["a"], "and") == "a"
    assert wording.joined(["a", "b"], "and") == "a and b"
    assert wording.joined(["a", "b", "c"], "or") == "a, b or c"


def test_either_quotes_the_names_and_joins_them_with_or() -> None:
    assert wording.either([]) == ""
    assert wording.either(["A"]) == "'A'"
    assert wording.either(["A", "B", "C"]) == "'A', 'B' or 'C'"
