"""Golden tests for the selectors: fixed entries in, exact groups out."""

import math
import random
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from app.consolidation.composite import held_through_summaries
from app.consolidation.selectors import HighestRelevance, SimilarityCluster
from app.consolidation.selectors.base import kept_apart_from_its_sources
from app.consolidation.types import Entry, Group, OpResult

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def entry(
    n: int,
    category: str = "general",
    importance: float | None = 0.5,
    minute: int | None = None,
    embedding: tuple[float, ...] | None = None,
    summary_of: tuple[int, ...] = (),
) -> Entry:
    return Entry(
        id=uuid.UUID(int=n),
        content=f"memory {n}",
        category=category,
        importance=importance,
        created_at=T0 + timedelta(minutes=n if minute is None else minute),
        embedding=embedding,
        fact_role="summary" if summary_of else "fact",
        summary_of=tuple(uuid.UUID(int=i) for i in summary_of),
    )


def at_angle(degrees: float) -> tuple[float, float]:
    return (math.cos(math.radians(degrees)), math.sin(math.radians(degrees)))


def ids(group: Group) -> tuple[int | None, list[int]]:
    kept = group.kept.id.int if group.kept is not None else None
    return kept, [e.id.int for e in group.to_remove]


# highest_relevance ------------------------------------------------------------------

WORK = [
    entry(1, "work", 0.9, minute=1),
    entry(2, "work", 0.3, minute=2),
    entry(3, "work", 0.9, minute=5),  # ties 1 on importance, more recent: kept
    entry(4, "work", None, minute=0),
]
PERSONAL = [
    entry(5, "personal", None, minute=9),  # missing counts as 0, most recent of the 0s: kept
    entry(6, "personal", 0.0, minute=7),
    entry(7, "personal", 0.0, minute=8),
]
MISC = [entry(8, "misc", 1.0), entry(9, "misc", 0.1)]  # 2 < threshold 3: skipped


def test_highest_relevance_groups_by_category_and_keeps_most_important_then_most_recent() -> None:
    groups = HighestRelevance(group_threshold=3).select([*WORK, *PERSONAL, *MISC])

    assert [g.category for g in groups] == ["personal", "work"]
    assert [ids(g) for g in groups] == [(5, [6, 7]), (3, [4, 1, 2])]


def test_highest_relevance_output_does_not_depend_on_input_order() -> None:
    entries = [*WORK, *PERSONAL, *MISC]
    expected = HighestRelevance().select(entries)
    for seed in range(5):
        shuffled = entries[:]
        random.Random(seed).shuffle(shuffled)
        assert HighestRelevance().select(shuffled) == expected


def test_highest_relevance_threshold_two_takes_the_small_category_too() -> None:
    groups = HighestRelevance(group_threshold=2).select(MISC)

    assert [(g.category, *ids(g)) for g in groups] == [("misc", 8, [9])]


def test_highest_relevance_never_emits_a_group_with_nothing_to_remove() -> None:
    assert HighestRelevance(group_threshold=1).select([entry(1), entry(2, "other")]) == []


def test_highest_relevance_full_tie_is_settled_by_id() -> None:
    same = [entry(n, importance=0.5, minute=0) for n in (3, 1, 2)]

    assert [ids(g) for g in HighestRelevance(group_threshold=2).select(same)] == [(3, [1, 2])]


def test_highest_relevance_refuses_a_threshold_below_one() -> None:
    with pytest.raises(ValueError, match="group_threshold"):
        HighestRelevance(group_threshold=0)


# similarity_cluster -------------------------------------------------------------------

# Cosine distance 0.15 is about 31.8 degrees apart.
CLUSTERED = [
    entry(1, importance=0.2, embedding=at_angle(0)),
    entry(2, importance=0.9, embedding=at_angle(10)),  # leader of 1 and 3
    entry(3, importance=0.1, embedding=at_angle(20)),
    # 25 degrees from 3 but 35 from its leader 2: no chaining into the first group.
    entry(4, importance=0.5, embedding=at_angle(45)),
    entry(5, importance=0.4, embedding=at_angle(90)),
    entry(6, importance=0.4, minute=50, embedding=at_angle(95)),  # same importance, newest
    entry(7, importance=0.4, embedding=at_angle(100)),
    entry(8, importance=1.0, embedding=at_angle(180)),  # alone
    entry(9, importance=1.0, embedding=None),  # no embedding: never grouped
]


def test_similarity_cluster_groups_around_the_most_important_member() -> None:
    groups = SimilarityCluster(max_distance=0.15, group_threshold=2).select(CLUSTERED)

    assert [ids(g) for g in groups] == [(2, [1, 3]), (6, [5, 7])]
    assert all(g.category == "general" for g in groups)


def test_similarity_cluster_skips_clusters_below_the_threshold() -> None:
    groups = SimilarityCluster(max_distance=0.15, group_threshold=3).select(CLUSTERED)

    assert [ids(g) for g in groups] == [(2, [1, 3]), (6, [5, 7])]
    assert SimilarityCluster(max_distance=0.15, group_threshold=4).select(CLUSTERED) == []


def test_similarity_cluster_wider_distance_takes_more() -> None:
    # 0.3 is about 45.6 degrees: 2 (at 10) now reaches 4 (at 45) but not 5 (at 90).
    groups = SimilarityCluster(max_distance=0.3, group_threshold=2).select(CLUSTERED)

    assert [ids(g) for g in groups] == [(2, [1, 3, 4]), (6, [5, 7])]


def test_similarity_cluster_zero_distance_finds_exact_duplicates_only() -> None:
    entries = [
        entry(1, embedding=(0.6, 0.8)),
        entry(2, embedding=(3.0, 4.0)),  # same direction, another length
        entry(3, embedding=(0.8, 0.6)),
    ]

    groups = SimilarityCluster(max_distance=0.0, group_threshold=2).select(entries)

    assert [ids(g) for g in groups] == [(2, [1])]


def test_similarity_cluster_keeps_categories_apart_unless_told_not_to() -> None:
    entries = [
        entry(1, "a", 0.1, embedding=(1.0, 0.0)),
        entry(2, "b", 0.9, embedding=(1.0, 0.01)),
        entry(3, "a", 0.2, embedding=(1.0, 0.02)),
    ]

    by_category = SimilarityCluster(group_threshold=2).select(entries)
    across = SimilarityCluster(group_threshold=2, by_category=False).select(entries)

    assert [(g.category, *ids(g)) for g in by_category] == [("a", 3, [1])]
    assert [(g.category, *ids(g)) for g in across] == [("b", 2, [1, 3])]


def test_similarity_cluster_ignores_zero_vectors_and_mixed_widths() -> None:
    entries = [
        entry(1, embedding=(0.0, 0.0)),
        entry(2, embedding=(1.0, 0.0)),
        entry(3, embedding=(1.0, 0.0, 0.0)),
        entry(4, embedding=(1.0, 0.0, 0.0)),
    ]

    groups = SimilarityCluster(group_threshold=2).select(entries)

    assert [ids(g) for g in groups] == [(4, [3])]


def test_similarity_cluster_is_deterministic_and_block_size_does_not_matter() -> None:
    rng = random.Random(7)
    entries = [
        entry(
            n,
            importance=rng.choice([None, 0.1, 0.5, 0.9]),
            embedding=tuple(rng.gauss(0, 1) for _ in range(8)),
        )
        for n in range(1, 120)
    ]
    # Near-duplicates of a few entries, so there is something to group.
    entries += [
        entry(
            1000 + n,
            importance=0.3,
            embedding=tuple(x + rng.gauss(0, 0.01) for x in entries[n].embedding or ()),
        )
        for n in range(0, 60, 3)
    ]
    expected = SimilarityCluster(max_distance=0.05, group_threshold=2).select(entries)
    assert len(expected) == 20
    for seed, block in [(1, 1), (2, 7), (3, 1000)]:
        shuffled = entries[:]
        random.Random(seed).shuffle(shuffled)
        selector = SimilarityCluster(max_distance=0.05, group_threshold=2, block_size=block)
        assert selector.select(shuffled) == expected


# the rule every selector's groups keep ----------------------------------------------


def test_a_kept_summary_of_the_groups_own_members_is_folded_and_the_best_other_kept() -> None:
    """The summary (most important, newest) stands for 1 and 2, which the group folds:
    kept, it would stay live beside the new summary of the same memories. Nor is 2 kept,
    though the next most important: its text is in the summary the group folds."""
    summary = entry(9, importance=0.9, summary_of=(1, 2))
    group = Group(category="general", kept=summary,
                  to_remove=(entry(1), entry(2, importance=0.7), entry(3)))

    assert ids(kept_apart_from_its_sources(group)) == (3, [1, 2, 9])


def test_a_kept_summary_of_other_memories_is_kept() -> None:
    group = Group(category="general", kept=entry(9, importance=0.9, summary_of=(20, 21)),
                  to_remove=(entry(1), entry(2)))

    assert kept_apart_from_its_sources(group) == group


def test_a_member_summarising_another_member_is_not_chosen_in_its_place() -> None:
    """8 stands for 1 as 9 does for 4: neither summary can be kept, nor the facts they
    stand for, so the one fact no summary holds is, though the least important."""
    group = Group(category="general", kept=entry(9, importance=0.9, summary_of=(4,)),
                  to_remove=(entry(1, importance=0.3), entry(2, importance=0.1),
                             entry(4, importance=0.4),
                             entry(8, importance=0.8, summary_of=(1,))))

    assert ids(kept_apart_from_its_sources(group)) == (2, [1, 4, 8, 9])


def test_a_group_whose_every_member_a_summary_holds_keeps_nothing() -> None:
    """The next run after two synthesize_only ones, with include_summaries: S (9) stands
    for 1 and 2, S3 (8) for 3, 4 and 5. Any member kept would stay live beside the new
    summary holding its text (a fact 5 kept in S3's place: an exploratory probe), so the
    group folds them all."""
    group = Group(category="general", kept=entry(8, importance=0.9, summary_of=(3, 4, 5)),
                  to_remove=(*(entry(n) for n in range(1, 6)),
                             entry(9, importance=0.7, summary_of=(1, 2))))

    assert ids(kept_apart_from_its_sources(group)) == (None, [1, 2, 3, 4, 5, 8, 9])


def test_a_group_of_summaries_each_standing_for_another_keeps_nothing() -> None:
    group = Group(category="general", kept=entry(9, summary_of=(8,)),
                  to_remove=(entry(8, summary_of=(9,)),))

    assert ids(kept_apart_from_its_sources(group)) == (None, [8, 9])


def test_a_kept_fact_a_folded_summary_holds_is_folded_too() -> None:
    """The selector kept 3, but 9, which the group folds, stands for it."""
    group = Group(category="general", kept=entry(3, importance=0.9),
                  to_remove=(entry(1), entry(2), entry(9, summary_of=(1, 3))))

    assert ids(kept_apart_from_its_sources(group)) == (2, [1, 3, 9])


def test_a_group_that_keeps_nothing_or_a_fact_no_summary_holds_is_left_as_it_is() -> None:
    whole = Group(category="general", kept=None,
                  to_remove=(entry(1), entry(9, summary_of=(1,))))
    fact_kept = Group(category="general", kept=entry(3),
                      to_remove=(entry(1), entry(9, summary_of=(1,))))

    assert kept_apart_from_its_sources(whole) == whole
    assert kept_apart_from_its_sources(fact_kept) == fact_kept


def test_an_op_result_represents_what_a_summary_it_represents_stands_for() -> None:
    """A re-probe: the op's cap took C, D and the short summary S3 of C, D and E, and left
    the long E for the next run; E stayed live beside the new summary holding its text
    through S3. It is represented too (and so archived with the rest)."""
    s3 = entry(9, summary_of=(1, 2, 5))
    group = Group(category="general", kept=entry(7),
                  to_remove=(entry(1), entry(2), entry(5), s3))
    capped = OpResult(summary="...", represented_ids=tuple(uuid.UUID(int=n) for n in (1, 2, 9)),
                      mode="concatenate")

    held = held_through_summaries(capped, group)

    assert [i.int for i in held.represented_ids] == [1, 2, 9, 5]
    whole = replace(capped, represented_ids=tuple(uuid.UUID(int=n) for n in (1, 2)))
    assert held_through_summaries(whole, group) is whole
