"""Keeps one memory of each set of duplicates among the results.

Agents store the same fact again and again ("the user prefers dark mode", once a
session); every copy has the same vector and the same words, so the copies tie in both
lists and fill the results side by side, pushing out the next distinct memory. This
stage walks the candidates in the final order and drops each one whose key (given by
whoever builds the pipeline: the pipeline does not look inside a candidate's payload) an
earlier one already has, so the first of a set (the best score; on a tie the newest)
stands for it, and the cut then takes the next distinct memory in the dropped one's place.

Keys are computed only until `top_k` distinct candidates are found (with `explain`, for
every candidate, so each result names all its copies), and only those are passed on: the
rest come after them in the cut's own order, so none of them could make it (and the cut
then orders `top_k` candidates, not every one retrieved). The context says how many
copies were left out (`collapsed`): when that leaves fewer than `top_k`, the service
retrieves deeper (app/search/service.py).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace

from app.search.stages.cut import order_key
from app.search.types import Candidate, SearchContext

DuplicateKey = Callable[[Candidate], Hashable]


@dataclass(frozen=True, slots=True)
class CollapseDuplicates:
    # None: every candidate is its own (the stage changes nothing).
    key: DuplicateKey | None = None

    @property
    def name(self) -> str:
        return "collapse_duplicates"

    def __call__(self, ctx: SearchContext, /) -> SearchContext:
        if self.key is None:
            return ctx
        ordered = sorted(ctx.candidates, key=order_key)
        kept: list[Candidate] = []
        first_of: dict[Hashable, int] = {}
        dropped: dict[int, list[Candidate]] = {}
        read = 0
        for c in ordered:
            if len(kept) == ctx.top_k:
                break
            read += 1
            key = self.key(c)
            place = first_of.get(key)
            if place is None:
                first_of[key] = len(kept)
                kept.append(c)
            else:
                dropped.setdefault(place, []).append(c)
        collapsed = sum(len(copies) for copies in dropped.values())
        if ctx.explain:
            # Named in full, the copies past the cut too: explaining is worth reading every
            # candidate (without it one memory with 79 copies said 0 at top_k 1 and 79 at 5).
            for c in ordered[read:]:
                place = first_of.get(self.key(c))
                if place is not None:
                    dropped.setdefault(place, []).append(c)
            kept = [self._explained(c, dropped.get(i, [])) for i, c in enumerate(kept)]
        return replace(ctx, candidates=tuple(kept), collapsed=collapsed)

    def _explained(self, c: Candidate, copies: list[Candidate]) -> Candidate:
        return c.rescored(c.score, self.name, {
            "duplicates": len(copies),
            # Scalars only in an explanation: the ids as one comma-separated string.
            "duplicate_ids": ",".join(str(d.memory_id) for d in copies) or None,
        })
