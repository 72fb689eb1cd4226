"""Collapsing duplicate results, alone: which copy stands for a set, what fills its places."""

from __future__ import annotations

from collections.abc import Hashable

import pytest

from app.search.stages.collapse_duplicates import CollapseDuplicates
from app.search.stages.cut import CutToTopK
from app.search.types import Candidate, SearchContext

from .builders import make_candidate, make_context, order

# Candidates 1, 2 and 3 hold the same text; 4 and 5 another; the rest their own.
_TEXT = {1: "tea", 2: "tea", 3: "tea", 4: "coffee", 5: "coffee"}


def _text(c: Candidate) -> Hashable:
    n = c.memory_id.int
    return _TEXT.get(n, f"own {n}")


def _collapsed(ctx: SearchContext) -> list[int]:
    return order(CutToTopK()(CollapseDuplicates(key=_text)(ctx)))


def test_the_best_copy_stands_for_its_set_and_the_next_distinct_one_fills_in() -> None:
    ctx = make_context(
        make_candidate(1, score=0.9), make_candidate(2, score=0.8), make_candidate(3, score=0.7),
        make_candidate(6, score=0.6), make_candidate(4, score=0.5), make_candidate(5, score=0.4),
        make_candidate(7, score=0.3), top_k=3,
    )
    assert _collapsed(ctx) == [1, 6, 4]
    # It says how many it left out (the service retrieves deeper when that leaves the
    # answer short): 2 and 3, copies of 1; 5 was never read.
    assert CollapseDuplicates(key=_text)(ctx).collapsed == 2
    # Without the stage the copies take the places.
    assert order(CutToTopK()(ctx)) == [1, 2, 3]


def test_a_tie_between_copies_goes_to_the_newest() -> None:
    ctx = make_context(
        make_candidate(1, score=0.5, age_days=30), make_candidate(2, score=0.5, age_days=1),
        make_candidate(3, score=0.5, age_days=7), make_candidate(6, score=0.1),
    )
    assert _collapsed(ctx) == [2, 6]


def test_distinct_candidates_are_the_cut_s_own_first_top_k() -> None:
    ctx = make_context(*(make_candidate(n, score=n / 10) for n in range(6, 10)),
                       make_candidate(1, score=0.5), top_k=3, explain=False)
    collapsed = CollapseDuplicates(key=_text)(ctx)
    # Only the top_k that can make the cut are passed on, in its order.
    assert order(collapsed) == order(CutToTopK()(ctx)) == [9, 8, 7]
    assert all(c.explanation == {} for c in collapsed.candidates)


def test_without_a_key_nothing_is_collapsed() -> None:
    ctx = make_context(make_candidate(1, score=0.9), make_candidate(2, score=0.8))
    assert CollapseDuplicates()(ctx) is ctx
    assert order(CutToTopK()(CollapseDuplicates()(ctx))) == [1, 2]


def test_explain_names_the_copies_each_result_stands_for() -> None:
    ctx = make_context(
        make_candidate(1, score=0.9), make_candidate(6, score=0.85), make_candidate(3, score=0.8),
        make_candidate(2, score=0.7),
    )
    out = CutToTopK()(CollapseDuplicates(key=_text)(ctx))
    assert order(out) == [1, 6]
    tea, own = out.candidates
    assert tea.explanation["collapse_duplicates"] == {
        "duplicates": 2,
        "duplicate_ids": f"{make_candidate(3).memory_id},"
                         f"{make_candidate(2).memory_id}",
    }
    assert own.explanation["collapse_duplicates"] == {"duplicates": 0, "duplicate_ids": None}
    # The scores are the stages' before: collapsing reorders nothing.
    assert [c.score for c in out.candidates] == [0.9, 0.85]


def test_keys_are_read_only_until_top_k_distinct_are_found() -> None:
    asked: list[int] = []

    def key(c: Candidate) -> Hashable:
        asked.append(c.memory_id.int)
        return _text(c)

    ctx = make_context(*(make_candidate(n, score=1 - n / 100) for n in range(1, 41)), top_k=3,
                       explain=False)
    collapsed = CollapseDuplicates(key=key)(ctx)
    # 1 stands for 2 and 3; 4 for 5: the third distinct is 6, and nothing past it is read.
    assert order(collapsed) == order(CutToTopK()(collapsed)) == [1, 4, 6]
    assert asked == [1, 2, 3, 4, 5, 6]


def test_explain_names_every_copy_whatever_top_k() -> None:
    """A re-probe: one memory's copies past the cut went unnamed, so it said 0 copies at
    top_k 1 and all of them at top_k 5."""
    ctx = make_context(make_candidate(1, score=0.9), make_candidate(6, score=0.8),
                       make_candidate(2, score=0.7), make_candidate(3, score=0.6), top_k=1)
    (tea,) = CollapseDuplicates(key=_text)(ctx).candidates
    assert tea.explanation["collapse_duplicates"]["duplicates"] == 2


@pytest.mark.parametrize("top_k", [1, 2, 5, 10])
def test_the_answer_is_the_first_top_k_distinct_for_any_top_k(top_k: int) -> None:
    ctx = make_context(*(make_candidate(n, score=1 - n / 100) for n in range(1, 12)),
                       top_k=top_k)
    distinct = [1, 4, 6, 7, 8, 9, 10, 11]
    assert _collapsed(ctx) == distinct[:top_k]
