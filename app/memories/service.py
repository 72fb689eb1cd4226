"""The rules for memories: embed before writing, batch all-or-nothing, re-embed on change."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from app.cursors import cut_page, decode_cursor, decode_number_cursor, listing
from app.errors import NotFound, ValidationFailed
from app.idempotency.repository import erase_answers, named_memories
from app.ids import uuid7
from app.memories.capacity import CapacityBound
from app.memories.repository import Gone, MemoryFilter, MemoryReader, MemoryRepository
from app.memories.schemas import (
    Memory,
    MemoryCreate,
    MemoryHistory,
    MemoryPage,
    MemoryUpdate,
    MemoryVersion,
)
from app.memories.summary_labels import Labels, still_said
from app.models import SCOPE_COLUMNS
from app.providers.embedder import Embedder

log = logging.getLogger("engram.memories")

# A memory's fields a summary of it carries too (what its sources share).
_LABELS = frozenset({"tags", "metadata_", "category"})

DELETE_GUARD = ("name a scope (user_id, agent_id, session_id, namespace), tags, categories "
                "or metadata: without one the delete would remove every memory of the tenant")


def _row_for(item: MemoryCreate, embedding: list[float], now: datetime) -> dict[str, Any]:
    return {
        "id": uuid7(),
        "content": item.content,
        "user_id": item.user_id,
        "agent_id": item.agent_id,
        "session_id": item.session_id,
        "namespace": item.namespace,
        "category": item.category,
        "tags": item.tags,
        "importance": item.importance,
        "metadata_": item.metadata,
        "source": item.source,
        "fact_role": "fact",
        "summary_of": [],
        # A time ahead of the service's clock (a client's drift, within FUTURE_SKEW) is
        # taken as now: kept, it came before the updated_at of the same write.
        "created_at": min(item.created_at, now) if item.created_at else now,
        "updated_at": now,
        "expires_at": item.expires_at,
        "own_expires_at": item.expires_at,
        "archived_at": None,
        "consolidation_id": None,
        "embedding": embedding,
    }


def _memory_from_row(row: dict[str, Any]) -> Memory:
    return Memory.model_validate({k: v for k, v in row.items() if k != "embedding"})


AfterWrite = Callable[[Sequence[dict[str, Any]]], Awaitable[None]]
"""Called with the rows just inserted, in the same transaction (automatic consolidation)."""


class MemoryService:
    def __init__(self, repository: MemoryRepository, embedder: Embedder,
                 after_write: AfterWrite | None = None,
                 capacity: CapacityBound | None = None,
                 history_kept: int | None = None) -> None:
        self.repository = repository
        self.embedder = embedder
        self.after_write = after_write
        self.capacity = capacity
        self.history_kept = history_kept
        """ENGRAM_HISTORY_MAX_VERSIONS, which the history trigger applies (migration 0020)."""

    async def create_many(self, items: Sequence[MemoryCreate]) -> list[Memory]:
        """Embeds every item in one batched call, then writes them in one statement; a
        user past its cap loses its least valuable others in the same transaction."""
        return await self.write(await self.prepare(items))

    async def prepare(self, items: Sequence[MemoryCreate]) -> list[dict[str, Any]]:
        """The rows of `items`, checked and embedded, without touching the database (so
        no connection waits on the model)."""
        if self.capacity is not None:
            self.capacity.check(items)
        vectors = await self.embedder.embed([item.content for item in items])
        now = datetime.now(UTC)
        return [_row_for(item, vec, now) for item, vec in zip(items, vectors, strict=True)]

    async def write(self, rows: list[dict[str, Any]]) -> list[Memory]:
        """Store rows `prepare` made, in one statement, and apply the user's cap."""
        await self.repository.insert_many(rows)
        if self.capacity is not None:
            await self.capacity.after_write(rows)
        if self.after_write is not None:
            await self.after_write(rows)
        return [_memory_from_row(row) for row in rows]

    async def update(self, memory_id: uuid.UUID, change: MemoryUpdate) -> Memory:
        values = change.model_dump(exclude_unset=True)
        if not values:
            raise ValidationFailed.on("body", "name at least one field to change")
        if "metadata" in values:
            values["metadata_"] = values.pop("metadata")
        if "content" in values:
            # Embedded before the row is touched, so no lock is held while the model runs.
            (values["embedding"],) = await self.embedder.embed([values["content"]])
        if values.keys() & {"expires_at", "content", *_LABELS}:
            # It moves the memory's summaries' expiry, or dissolves them, besides changing
            # the memory: the family held first, as a delete holds it (the other order
            # deadlocked). And before a summary's own expiry is checked against its
            # sources': read first, a source's expiry set at once slipped between the
            # check and the write, and the summary outlived it.
            await self.repository.lock_families([memory_id])
        if "expires_at" in values:
            await self._refuse_outliving_sources(memory_id, values["expires_at"])
            values["own_expires_at"] = values["expires_at"]
        if "content" in values:
            await self._dissolve_if_rewritten(memory_id, values["content"])
        if values.keys() & _LABELS:
            await self._dissolve_if_relabelled(memory_id, values)
        changed = await self.repository.update(memory_id, values)
        if changed is None:
            raise NotFound(f"memory {memory_id} does not exist")
        row, version = changed
        if "expires_at" in values:
            await self.repository.follow_expiry(memory_id)
        if self.history_kept is not None and version >= self.history_kept + 2:
            # The trigger has dropped the first state, which a keyed create's stored
            # answer quotes: it would have been the last place the replaced text stood.
            await self._erase_answers([memory_id])
        return Memory.model_validate(row)

    async def _dissolve_if_rewritten(self, memory_id: uuid.UUID, content: str) -> None:
        """A summary holds its sources' text as it was: one whose source is rewritten
        would go on answering with the old text (a corrected fact, or a secret replaced),
        so it goes, and what it had archived comes back, the memory among them, for a
        later run to summarise as it now reads."""
        found = await self.repository.content_for_update(memory_id)
        if found is None or found[0] == content or not found[1]:
            return
        dissolved = await self.repository.dissolve_summaries(memory_id)
        if dissolved:
            log.info("deleted %d summaries of tenant %s built from a rewritten memory, and "
                     "brought back what they had archived", dissolved,
                     self.repository.tenant_id)

    async def _dissolve_if_relabelled(self, memory_id: uuid.UUID,
                                      values: dict[str, Any]) -> None:
        """A summary carries the tags and metadata its sources share, and their category:
        one that says of the memory what its change makes untrue (a tag it lost, say
        `public`) would answer a filter on it with the memory's text, so it goes as for
        a rewrite, and what it had archived comes back for a later run to summarise
        with the labels they now have. A label only added leaves it as it is."""
        before = await self.repository.labels_of(memory_id)
        if before is None:
            return
        after = Labels(tuple(values.get("tags", before.tags)),
                       values.get("category", before.category),
                       values.get("metadata_", before.metadata))
        untrue = [summary_id for summary_id, labels
                  in await self.repository.labels_of_summaries_built_from(memory_id)
                  if not still_said(labels, before, after)]
        if not untrue:
            return
        # Only those, and what is built from them: a summary whose labels stay true of the
        # memory still says nothing false of it.
        dissolved = await self.repository.dissolve(untrue)
        log.info("deleted %d summaries of tenant %s whose labels a change of memory %s "
                 "made untrue, and brought back what they had archived", dissolved,
                 self.repository.tenant_id, memory_id)

    async def _refuse_outliving_sources(self, memory_id: uuid.UUID,
                                        expires_at: datetime | None) -> None:
        """A summary holds its sources' text: it may not be set to outlive the first of
        them to expire (as consolidation sets it, and a source's later expiry caps it)."""
        first = await self.repository.sources_first_expiry(memory_id)
        if first is not None and (expires_at is None or expires_at > first):
            raise ValidationFailed.on(
                "expires_at", "a summary expires no later than the first of its sources "
                f"to expire ({first.isoformat()}), whose text it holds")

    async def delete(self, memory_id: uuid.UUID) -> None:
        await self.repository.lock_families([memory_id])
        gone = await self.repository.delete(memory_id)
        if gone is None:
            raise NotFound(f"memory {memory_id} does not exist")
        await self._release([gone])
        await self._erase_answers([memory_id])

    async def _erase_answers(self, ids: Iterable[uuid.UUID]) -> None:
        """The stored answers of keyed creates that quote these memories (their text as
        created): a retry with the key served an erased memory back (a day-2 probe)."""
        await erase_answers(self.repository.session, self.repository.tenant_id,
                            named_memories(ids))

    async def _release(self, gone: Sequence[Gone]) -> int:
        """Summaries that hold a deleted memory's text go with it, and what a summary that
        went had archived comes back (MemoryRepository.release); how many summaries went
        with them."""
        dissolved = await self.repository.release(gone)
        if dissolved:
            log.info("deleted %d summaries of tenant %s built from deleted memories, and "
                     "brought back what they had archived", dissolved,
                     self.repository.tenant_id)
        return dissolved

    async def delete_history(self, memory_id: uuid.UUID) -> int:
        """Erase a memory's earlier states (a secret an agent stored and a change
        replaced must not linger there); how many."""
        erased = await self.repository.delete_versions(memory_id)
        if erased is None:
            raise NotFound(f"memory {memory_id} does not exist")
        # The create's answer holds the first state.
        await self._erase_answers([memory_id])
        return erased

    async def delete_matching(self, filters: MemoryFilter) -> int:
        """Delete every memory of a scope or criterion, archived and expired ones too (a
        user's request to be forgotten leaves none behind); how many."""
        if not any(getattr(filters, column) is not None for column in SCOPE_COLUMNS) \
                and not filters.tags and not filters.categories and not filters.metadata:
            raise ValidationFailed.on("query", DELETE_GUARD)
        deleted = await self.repository.delete_matching(replace(filters, include_archived=True))
        # What was erased is named by which filters it matched, not by their values: an
        # erasure's log line kept the user's id, tags and categories it erased (an
        # exploratory probe; the metadata's values were already left out).
        log.info("deleted %d memories of tenant %s matching %s", len(deleted),
                 self.repository.tenant_id, ", ".join(filters.given()))
        dissolved = await self._release(deleted)
        await self._erase_answers(gone.id for gone in deleted)
        scope = {c: v for c in SCOPE_COLUMNS if (v := getattr(filters, c)) is not None}
        narrowed = (filters.tags, filters.categories, filters.fact_role, filters.metadata,
                    filters.created_after, filters.created_before)
        if scope and not any(narrowed):
            # The whole scope went: nothing should name it, its write counts included.
            await self.repository.forget_write_counts(scope)
        return len(deleted) + dissolved


class MemoryReads:
    """Reading memories: one by id, or a page of a filtered listing."""

    def __init__(self, reader: MemoryReader) -> None:
        self.reader = reader

    async def get(self, memory_id: uuid.UUID) -> Memory:
        row = await self.reader.get(memory_id)
        if row is None:
            raise NotFound(f"memory {memory_id} does not exist")
        return Memory.model_validate(row)

    async def history(self, memory_id: uuid.UUID, *, limit: int,
                      cursor: str | None) -> MemoryHistory:
        of = listing("history", self.reader.tenant_id, memory_id)
        before = decode_number_cursor(cursor, of) if cursor else None
        rows = await self.reader.versions(memory_id, limit=limit + 1, before=before)
        if rows is None:
            raise NotFound(f"memory {memory_id} does not exist")
        page, next_cursor = cut_page(rows, limit,
                                     lambda r: (r["replaced_at"], str(r["version"])), of)
        return MemoryHistory(items=[MemoryVersion.model_validate(r) for r in page],
                             next_cursor=next_cursor)

    async def list(self, filters: MemoryFilter, *, limit: int, cursor: str | None) -> MemoryPage:
        of = listing("memories", self.reader.tenant_id, filters)
        after = decode_cursor(cursor, of) if cursor else None
        rows, next_cursor = cut_page(await self.reader.page(filters, limit=limit + 1, after=after),
                                     limit, lambda r: (r["created_at"], r["id"]), of)
        return MemoryPage(items=[Memory.model_validate(r) for r in rows], next_cursor=next_cursor)
