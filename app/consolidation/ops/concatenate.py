"""`concatenate`: the group as a bullet list, oldest first, under a length limit."""

from collections.abc import Sequence
from dataclasses import dataclass

from app.consolidation.ops.base import OpError
from app.consolidation.ops.text import LinePacker, bullet
from app.consolidation.selectors.base import chronological
from app.consolidation.types import Entry, OpContext, OpResult


@dataclass(frozen=True, slots=True)
class Concatenate:
    """One bullet per entry, oldest first, at most `max_chars` characters.

    Truncation happens at entry boundaries: an entry is in the summary whole or not at
    all, and only whole entries are represented. An entry that does not fit is skipped
    and later, shorter ones may still fit (first fit); skipped entries stay for the
    next run. An entry longer than the limit on its own is never folded by this op.
    """

    max_chars: int = 4000

    @property
    def requires_llm(self) -> bool:
        return False

    async def consolidate(
        self, to_remove: Sequence[Entry], category: str, context: OpContext
    ) -> OpResult:
        return concatenate(to_remove, min(self.max_chars, context.max_summary_chars))


def concatenate(entries: Sequence[Entry], limit: int, mode: str = "concatenate") -> OpResult:
    """The concatenation itself, synchronous so fallbacks can reuse it."""
    packer = LinePacker(limit)
    represented = [
        e.id for e in sorted(entries, key=chronological) if packer.try_add(bullet(e.content))
    ]
    if not represented:
        raise OpError("op_nothing_fits", f"no entry fits in {limit} characters")
    return OpResult(summary=packer.text(), represented_ids=tuple(represented), mode=mode)
