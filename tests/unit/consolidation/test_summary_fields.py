"""What a summary inherits from the memories it folds: the tags and the metadata they all
share."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from app.consolidation.executor import common_metadata, common_tags
from app.consolidation.types import Entry


def entry(n: int, *, tags: tuple[str, ...] = (), **metadata: Any) -> Entry:
    return Entry(id=uuid.UUID(int=n), content=f"memory {n}", category="general",
                 importance=0.5, created_at=datetime(2026, 1, 1, tzinfo=UTC), tags=tags,
                 metadata=metadata)


@pytest.mark.parametrize(("entries", "expected"), [
    ([], {}),
    ([entry(1, doc="d1", page=1)], {"doc": "d1", "page": 1}),
    ([entry(1, doc="d1", page=1), entry(2, doc="d1", page=2)], {"doc": "d1"}),
    # Equal JSON values, nested ones too; a missing key or another value drops the key.
    ([entry(1, doc="d1", project={"n": "a", "k": [1]}), entry(2, doc="d1",
                                                             project={"n": "a", "k": [1]})],
     {"doc": "d1", "project": {"n": "a", "k": [1]}}),
    ([entry(1, doc="d1", project={"n": "a"}), entry(2, doc="d1", project={"n": "b"})],
     {"doc": "d1"}),
    ([entry(1, doc="d1"), entry(2), entry(3, doc="d1")], {}),
    ([entry(1, doc=None), entry(2, doc=None)], {"doc": None}),
    # JSON's equality, not Python's: true is not 1, 1 is 1.0, a list's order counts.
    ([entry(1, flag=True, num=1, xs=[1, 2]), entry(2, flag=1, num=1.0, xs=[2, 1])], {"num": 1}),
    ([entry(1, v={"a": [True]}), entry(2, v={"a": [1]})], {}),
    ([entry(1, v={"a": [True, "x"]}), entry(2, v={"a": [True, "x"]})], {"v": {"a": [True, "x"]}}),
    # Keys reserved for consolidation output are never inherited from folded summaries.
    ([entry(1, doc="d1", summary_of=["x"]), entry(2, doc="d1", summary_of=["x"])],
     {"doc": "d1"}),
])
def test_a_summary_keeps_the_metadata_every_source_shares(
    entries: list[Entry], expected: dict[str, Any],
) -> None:
    assert common_metadata(entries) == expected


def test_a_summary_keeps_the_tags_every_source_carries_in_the_first_ones_order() -> None:
    entries = [entry(1, tags=("b", "a", "c")), entry(2, tags=("a", "b")),
               entry(3, tags=("b", "d", "a"))]

    assert common_tags(entries) == ["b", "a"]
