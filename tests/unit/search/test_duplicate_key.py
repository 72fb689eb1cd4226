"""What makes two retrieved memories one result: the same text as a reader sees it, in the
same owner's hands (app/search/duplicate_key.py)."""

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
    # Full-width letters and the ideographic full stop.
    "".join(chr(ord(ch) + 0xFEE0) if ch != " " else " " for ch in "The user prefers dark mode")
    + "\u3002",
])
def test_case_blanks_surrounding_punctuation_and_width_do_not_count(copy: str) -> None:
    assert duplicate_key(_candidate(copy)) == duplicate_key(
        _candidate("The user prefers dark mode."))


@pytest.mark.parametrize("other", [
    "The user prefers light mode.",
    "The user prefers dark mode on 3 May.",
    "The user doesn't prefer dark mode.",
    "The user prefers dark-mode.",
])
def test_any_other_character_keeps_a_memory_apart(other: str) -> None:
    assert duplicate_key(_candidate(other)) != duplicate_key(
        _candidate("The user prefers dark mode."))


def test_inner_punctuation_stays() -> None:
    assert normalized_text("Version 3.5, don't.") == "version 3.5, don't"
    assert normalized_text("...") == ""


def test_the_session_does_not_count_but_the_owner_does() -> None:
    fact = duplicate_key(_candidate("Likes tea."))
    assert duplicate_key(_candidate("Likes tea.", session_id="another")) == fact
    assert duplicate_key(_candidate("Likes tea.", session_id=None)) == fact
    for owner in ({"user_id": "v"}, {"agent_id": None}, {"namespace": "m"}):
        assert duplicate_key(_candidate("Likes tea.", **owner)) != fact


def test_a_summary_is_never_a_fact_s_duplicate() -> None:
    assert duplicate_key(_candidate("Likes tea.", "summary")) != duplicate_key(
        _candidate("Likes tea."))
