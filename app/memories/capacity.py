"""The cap on each user's active memories (`ENGRAM_MAX_MEMORIES_PER_USER`, a tenant's own
through `python -m app tenants limit --memories-per-user`).

A write that takes a user past the cap archives, in the write's own transaction, as many
of the user's other memories as it is over: first those already expired (no reader sees
them, but they count until the purge deletes them), then the least important, the oldest
first among equals. Archived, not deleted: they leave search and the listing (which
brings them back with `include_archived=true`), keep their history, and `GET
/v1/memories/{id}` still answers them; `consolidation_id` stays null, which tells them
from what a consolidation archived. The memories the write itself stored are never
evicted, so a batch holding more memories of one user than the cap is refused whole.

Only writes through the memory endpoints count and evict. A consolidation's summary never
does (its run just folded memories away, and an eviction could drop the very summary it
wrote), nor a run's revert, a restore or an import; they can leave a user over the cap
until its next write. Writes of one user are serialised from the eviction to their commit (a
transaction-level advisory lock per user, taken in user order), so two at once never
both see room for one. Memories without a user are not capped.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from app.errors import ValidationFailed
from app.memories.repository import MemoryRepository
from app.memories.schemas import MemoryCreate
from app.service.metrics import MEMORIES_EVICTED

log = logging.getLogger("engram.memories")


class CapacityBound:
    def __init__(self, repository: MemoryRepository, per_user: int) -> None:
        self.repository = repository
        self.per_user = per_user  # 0: no cap

    def check(self, items: Sequence[MemoryCreate]) -> None:
        """Refuse (422) a write that holds more memories of one user than the cap: it
        could only be stored by archiving part of itself. Before anything is embedded."""
        if self.per_user <= 0:
            return
        counts = Counter(item.user_id for item in items if item.user_id is not None)
        over = sorted((user, n) for user, n in counts.items() if n > self.per_user)
        if over:
            user, n = over[0]
            raise ValidationFailed.on(
                "items", f"holds {n} memories of user {user!r}, more than the "
                f"{self.per_user} active memories a user may have; write them in parts, "
                "or fewer")

    async def after_write(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Evict what the rows just inserted took past the cap, user by user."""
        users = sorted({row["user_id"] for row in rows if row["user_id"] is not None})
        if self.per_user <= 0 or not users:
            return
        written = [row["id"] for row in rows]
        evicted = 0
        for user in users:  # in order: two writes of the same users lock them alike
            evicted += await self.repository.evict_past_cap(user, self.per_user, written)
        if evicted:
            MEMORIES_EVICTED.inc(evicted)
            log.info("archived %d memories of tenant %s past the cap of %d per user",
                     evicted, self.repository.tenant_id, self.per_user)
