"""What makes two retrieved memories one result: the same text as a reader sees it, in the
same owner's hands and category (app/search/duplicate_key.py)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from app.memories.repository import ANSWER_KEYS
from app.search.duplicate_key import duplicate_key, normalized_text
from app.search.repository import RetrievedRow
from app.search.types import Candidate

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _candidate(content: str, fact_role: str = "fact", **scope: str | None) -> Candidate:
    fields: dict[str, Any] = dict.fromkeys(ANSWER_KEYS)
    fields.update(id=uuid.uuid4(), content=content, fact_role=fact_role, importance=0.5,
                  created_at=NOW, user_id="u", agent_id="a", session_id="s", namespace="n")
    fields.update(scope)
    row = RetrievedRow(fields["id"], 0.5, NOW, fact_role,
                       tuple(fields[k] for k in ANSWER_KEYS), 1, 0.9, None, None)
    return Candidate.retrieved(row.memory_id, row, 0.5, NOW, fact_role, 1, 0.9, None, None)


@pytest.mark.parametrize("copy", [
    "The user prefers dark mode.",
    "the user prefers dark mode",
    "  The user   prefers\tdark mode!  ",
    "\"The user prefers dark mode.\"",
    "The user prefers dark mode\u3002",  # the ideographic full stop
    "The\u00a0user prefers dark mode.",  # a no-break space
])
def test_case_blanks_and_the_marks_ending_a_sentence_do_not_count(copy: str) -> None:
    assert duplicate_key(_candidate(copy)) == duplicate_key(
        _candidate("The user prefers dark mode."))


def test_composed_and_decomposed_accents_are_one_text() -> None:
    assert duplicate_key(_candidate("Zo\u00eb lives in Besan\u00e7on.")) == duplicate_key(
        _candidate("Zoe\u0308 lives in Besanc\u0327on"))


@pytest.mark.parametrize("other", [
    "The user prefers light mode.",
    "The user prefers dark mode on 3 May.",
    "The user doesn't prefer dark mode.",
    "The user prefers dark-mode.",
])
def test_any_other_character_keeps_a_memory_apart(other: str) -> None:
    assert duplicate_key(_candidate(other)) != duplicate_key(
        _candidate("The user prefers dark mode."))


@pytest.mark.parametrize(("one", "other"), [
    # A re-probe: each pair was one result while the punctuation around a text and
    # Unicode's compatibility forms did not count.
    ("Blood type: O+", "Blood type: O-"),
    ("My grade was A+", "My grade was A"),
    ("I love C++", "I love C"),
    ("I use C#", "I use C"),
    ("Discount is 20%", "Discount is 20"),
    ("-5\u00b0C in Oslo today", "5\u00b0C in Oslo today"),
    ("Rating: 5*", "Rating: 5"),
    ("Path is /usr/", "Path is /usr"),
    ("Budget is 10\u2076 dollars", "Budget is 106 dollars"),
    ("x = 2\u00b2", "x = 22"),
    (":)", ":("),
    ("Ma\u00dfe 10", "Masse 10"),
    ("(see notes)", "see notes"),
])
def test_signs_brackets_and_symbols_keep_texts_apart(one: str, other: str) -> None:
    assert duplicate_key(_candidate(one)) != duplicate_key(_candidate(other))


def test_a_text_of_marks_alone_is_compared_whole() -> None:
    assert normalized_text("...") == "..."
    assert duplicate_key(_candidate("...")) != duplicate_key(_candidate("!!!"))


def test_inner_punctuation_stays() -> None:
    assert normalized_text("Version 3.5, don't.") == "version 3.5, don't"


def test_the_session_does_not_count_but_the_owner_does() -> None:
    fact = duplicate_key(_candidate("Likes tea."))
    assert duplicate_key(_candidate("Likes tea.", session_id="another")) == fact
    assert duplicate_key(_candidate("Likes tea.", session_id=None)) == fact
    for owner in ({"user_id": "v"}, {"agent_id": None}, {"namespace": "m"}):
        assert duplicate_key(_candidate("Likes tea.", **owner)) != fact


def test_the_category_counts() -> None:
    """A re-probe: "Paid 50 dollars." for the rent and for the gym are two payments."""
    assert duplicate_key(_candidate("Paid 50 dollars.", category="rent")) != duplicate_key(
        _candidate("Paid 50 dollars.", category="gym"))
    assert duplicate_key(_candidate("Paid 50 dollars.", category="rent")) == duplicate_key(
        _candidate("paid 50 dollars", category="rent"))


def test_a_summary_is_never_a_fact_s_duplicate() -> None:
    assert duplicate_key(_candidate("Likes tea.", "summary")) != duplicate_key(
        _candidate("Likes tea."))
