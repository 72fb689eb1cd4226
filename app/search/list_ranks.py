"""The places of candidates in the vector and the text list, from their scores.

Rows with equal scores share a place, the mean of the places they take (two rows tied
for first are both 1.5): two copies of one fact then get equal fused scores, and the
final cut's tie-break (newer first) decides between them. A place by position handed
the copy the database listed first (the older: ids are time-ordered) a fused score up to
twice the other's. The mean, not the best of the places, keeps the sum of what a list
gives its rows: BM25 ties many short rows matching one word, and giving each the best
place cost 2.1 points of regular recall@10 in bench/retrieval_eval.py (0.805 -> 0.784;
the mean kept 0.805).

The vector list from the HNSW index is approximate: it can miss a row nearer than rows
it returned. A row the text list found has its similarity computed anyway, and when it
is at least as near as the list's farthest row it is placed in the list where an exact
scan would have put it: a unique identifier's row, found by the text list, otherwise
ranked below rows that share nothing with the query but a vague likeness.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Mapping
from typing import TypeVar

Key = TypeVar("Key", bound=Hashable)


def shared_places(scores: Mapping[Key, float]) -> dict[Key, float]:
    """1-based places, highest score first; equal scores share the mean of their places
    (a whole number where that is one)."""
    ascending = sorted(scores.values())
    n = len(ascending)
    places: dict[Key, float] = {}
    for key, score in scores.items():
        below, through = bisect_left(ascending, score), bisect_right(ascending, score)
        place = n - through + (through - below + 1) / 2
        places[key] = int(place) if place.is_integer() else place
    return places


def with_rows_missed(listed: Mapping[Key, float], found: Mapping[Key, float]
                     ) -> dict[Key, float]:
    """The vector list's similarities, with each row of `found` (not in the list) that is
    at least as similar as the list's least similar row."""
    if not listed:
        return dict(listed)
    farthest = min(listed.values())
    return {**listed, **{key: s for key, s in found.items()
                         if key not in listed and s >= farthest}}
