"""`density_routing`: dense groups go to `extractive`, sparse ones to `abstractive`."""

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from app.consolidation.ops.abstractive import Abstractive
from app.consolidation.ops.extractive import Extractive
from app.consolidation.ops.facts import fact_density
from app.consolidation.types import Entry, OpContext, OpResult


@dataclass(frozen=True, slots=True)
class DensityRouting:
    """Each entry votes dense when its fact density (fact tokens per token, see
    `facts`) is at least `dense_threshold`. A group with at least half dense votes is
    dense (a tie goes to `extractive`, which needs no LLM and loses nothing it
    recognises as a fact) and is routed to `extractive`; otherwise to `abstractive`.

    The mode records the choice ("dense:extractive" or "sparse:abstractive") and the
    detail the vote ("3/5 dense").
    """

    dense_threshold: float = 0.15
    extractive: Extractive = field(default_factory=Extractive)
    abstractive: Abstractive = field(default_factory=Abstractive)

    @property
    def requires_llm(self) -> bool:
        return True

    def is_dense(self, entries: Sequence[Entry]) -> tuple[bool, int]:
        """(dense?, dense votes)."""
        votes = sum(1 for e in entries if fact_density(e.content) >= self.dense_threshold)
        return 2 * votes >= len(entries), votes

    async def consolidate(
        self, to_remove: Sequence[Entry], category: str, context: OpContext
    ) -> OpResult:
        dense, votes = self.is_dense(to_remove)
        if dense:
            result = await self.extractive.consolidate(to_remove, category, context)
            mode = "dense:extractive"
        else:
            result = await self.abstractive.consolidate(to_remove, category, context)
            mode = "sparse:abstractive"
        vote = f"{votes}/{len(to_remove)} dense"
        detail = f"{vote}; {result.detail}" if result.detail else vote
        return replace(result, mode=mode, detail=detail)
