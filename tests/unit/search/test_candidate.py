"""Candidate.rescored: a new candidate with a new score, everything else carried over."""

from __future__ import annotations

import dataclasses

import pytest

from app.search.types import Candidate
from tests.unit.search.builders import make_candidate


def test_rescored_carries_every_other_field_over() -> None:
    original = make_candidate(7, vector_rank=3, text_rank=2, importance=0.9, age_days=4,
                              fact_role="summary")

    copy = original.rescored(1.5)

    assert copy is not original
    assert copy.score == 1.5
    for f in dataclasses.fields(Candidate):
        if f.name != "score":
            assert getattr(copy, f.name) == getattr(original, f.name), f.name
    assert copy == dataclasses.replace(original, score=1.5)


def test_rescored_adds_a_stage_explanation_without_touching_the_original() -> None:
    original = make_candidate(1, vector_rank=1).rescored(0.5, "fusion", {"rrf": 0.5})

    copy = original.rescored(0.7, "scoring", {"score": 0.7})

    assert copy.explanation == {"fusion": {"rrf": 0.5}, "scoring": {"score": 0.7}}
    assert original.explanation == {"fusion": {"rrf": 0.5}}


def test_retrieved_is_the_constructor() -> None:
    c = make_candidate(3, vector_rank=2, text_rank=5, importance=0.4, age_days=2)

    built = Candidate.retrieved(c.memory_id, c.payload, c.importance, c.created_at,
                                c.fact_role, c.vector_rank, c.vector_similarity,
                                c.text_rank, c.text_score)

    assert built == c
    assert built.score == 0.0
    assert built.explanation == {}


def test_a_rescored_candidate_is_still_frozen() -> None:
    copy = make_candidate(1, vector_rank=1).rescored(0.5)

    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.score = 2.0  # type: ignore[misc]
    assert hash(copy) == hash(dataclasses.replace(copy))
