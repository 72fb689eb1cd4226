"""The exact-or-HNSW choice by the scope's share of the index (app/search/vector_path.py)."""

from __future__ import annotations

import pytest

from app.search.vector_path import prefers_exact


@pytest.mark.parametrize(("scope_rows", "index_rows", "kv", "exact"), [
    # The measured crossover at 100k rows and kv 20: about 4,200 rows (4%).
    (1_500, 100_000, 20, True),
    (4_000, 100_000, 20, True),
    (4_500, 100_000, 20, False),
    (10_000, 100_000, 20, False),
    # A deeper list moves it up (HNSW visits more tuples per row found) ...
    (4_500, 100_000, 50, True),
    # ... and so does a larger index.
    (10_000, 1_000_000, 20, True),
    (100_000, 1_000_000, 20, False),
    # A tenant that is the whole index never is.
    (100_000, 100_000, 100, False),
])
def test_a_scope_is_ranked_exactly_below_the_cost_crossover(
    scope_rows: int, index_rows: int, kv: int, exact: bool,
) -> None:
    assert prefers_exact(scope_rows, index_rows, kv, 9.0) is exact


def test_an_unknown_index_size_or_a_zero_ratio_keeps_hnsw() -> None:
    assert prefers_exact(10, 0, 20, 9.0) is False
    assert prefers_exact(10, -1, 20, 9.0) is False
    assert prefers_exact(10, 100_000, 20, 0.0) is False
