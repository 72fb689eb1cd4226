"""The vector space's rules: what a start does, and where a re-embedding begins."""

from __future__ import annotations

import uuid

import pytest

from app.embedding_space.rules import StoredSpace, on_start, reembed_start

A, B = "sentence-transformers/all-MiniLM-L6-v2", "text-embedding-3-small"
AFTER = uuid.UUID(int=7)


@pytest.mark.parametrize(("stored", "has_memories", "action"), [
    (None, False, "record"),
    # Before the space was recorded, the vectors are taken to be the configured model's.
    (None, True, "record"),
    (StoredSpace(A), True, "keep"),
    (StoredSpace(A), False, "keep"),
    (StoredSpace(B), True, "refuse"),
    # No memory holds a vector: nothing to mix.
    (StoredSpace(B), False, "adopt"),
    (StoredSpace(B, A, AFTER), False, "adopt"),
    (StoredSpace(A, B, AFTER), False, "adopt"),
    # A pass left unfinished: two models, whichever is configured.
    (StoredSpace(B, A, AFTER), True, "refuse"),
    (StoredSpace(A, B, AFTER), True, "refuse"),
    (StoredSpace("", A, None), True, "refuse"),
])
def test_what_a_start_does(stored: StoredSpace | None, has_memories: bool,
                           action: str) -> None:
    assert on_start(stored, A, has_memories).action == action


def test_a_refusal_names_both_models_and_the_command() -> None:
    reason = on_start(StoredSpace(B), A, True).reason

    assert f"come from {B}" in reason
    assert f"gives {A}" in reason
    assert "`python -m app reembed`" in reason


def test_an_unfinished_pass_is_named_as_such() -> None:
    reason = on_start(StoredSpace(B, A, AFTER), A, True).reason
    assert f"from {B} to {A} was left unfinished" in reason
    assert "going on where it stopped" in reason

    before_any_start = on_start(StoredSpace("", A, None), A, True).reason
    assert "from an unrecorded model to" in before_any_start


@pytest.mark.parametrize(("stored", "needed", "after"), [
    (None, True, None),
    (StoredSpace(A), False, None),
    (StoredSpace(B), True, None),
    # Resumed only towards the same model.
    (StoredSpace(B, A, AFTER), True, AFTER),
    (StoredSpace(B, A, None), True, None),
    (StoredSpace(A, B, AFTER), True, None),
])
def test_where_a_reembedding_to_a_begins(stored: StoredSpace | None, needed: bool,
                                         after: uuid.UUID | None) -> None:
    start = reembed_start(stored, A)

    assert start.needed is needed
    assert start.after == after
    assert start.resumed is (after is not None)
