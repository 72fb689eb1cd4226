"""Request and response bodies of the memory endpoints."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator
from typing_extensions import TypeAliasType

from app.validation import (
    AwareDatetime,
    Category,
    Content,
    Importance,
    Metadata,
    ScopeId,
    Source,
    TagList,
)

# One named enum in the document, for the answer's field and the listing's filter alike.
FactRole = TypeAliasType("FactRole", Literal["fact", "summary"])

BATCH_MAX = 1000

FUTURE_SKEW = timedelta(minutes=5)
"""How far ahead of the service's clock a `created_at` may be: a client's clock's drift."""


class MemoryCreate(BaseModel):
    """A memory to store. Scope fields place it; `created_at` may be set when importing."""

    model_config = ConfigDict(extra="forbid")

    content: Content
    user_id: ScopeId | None = None
    agent_id: ScopeId | None = None
    session_id: ScopeId | None = None
    namespace: ScopeId | None = None
    category: Category = "general"
    # The default declared too: a generator reads a field with none as defaulting to
    # null, and a client built from it sent "tags": null (422).
    tags: TagList = Field(default_factory=list, json_schema_extra={"default": []})
    importance: Importance = 0.5
    metadata: Metadata = Field(default_factory=dict, json_schema_extra={"default": {}})
    source: Source = "api"
    created_at: AwareDatetime | None = Field(
        default=None, description="When it was learnt, when importing history; now when "
        "absent. At most 5 minutes ahead of the service's clock (422), and then taken as "
        "now.")
    expires_at: AwareDatetime | None = Field(
        default=None, description="When it stops being served. One already past is "
        "stored expired: no read finds it (an import of history need not sift them).")

    @field_validator("source")
    @classmethod
    def _source_not_reserved(cls, value: str) -> str:
        if value == "summary":
            raise ValueError("'summary' is reserved for consolidation output")
        return value

    @field_validator("created_at")
    @classmethod
    def _not_in_the_future(cls, value: datetime | None) -> datetime | None:
        """A memory created in the future would head every newest-first listing, and take
        the full recency bonus in search, until that day. (One stored already expired is
        taken: an import of history need not sift out what expired meanwhile.) Checked
        here, not in the service, so a 422 names it beside every other bad field (a probe:
        an item's bad importance hid another's future created_at until it was fixed)."""
        if value is not None and value > datetime.now(UTC) + FUTURE_SKEW:
            raise ValueError("is in the future: a memory's creation time is when it was "
                             "learnt, now (omit it) or earlier when importing")
        return value


class MemoryBatchCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[MemoryCreate] = Field(min_length=1, max_length=BATCH_MAX)


NOT_NULLABLE_ON_UPDATE = ("content", "category", "tags", "importance", "metadata")


def _update_schema(schema: dict[str, Any]) -> None:
    """What a PATCH takes, as its validators enforce it: at least one field, and null only
    for `expires_at` (the others are optional, so pydantic would declare them nullable and
    a generated client would send null for "unchanged")."""
    schema["minProperties"] = 1
    for name in NOT_NULLABLE_ON_UPDATE:
        prop = schema["properties"][name]
        variants = [v for v in prop.pop("anyOf") if v.get("type") != "null"]
        (only,) = variants
        prop.update(only)


class MemoryUpdate(BaseModel):
    """Fields to change; absent fields stay. `expires_at: null` clears the expiry."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_update_schema)

    content: Content | None = None
    category: Category | None = None
    tags: TagList | None = None
    importance: Importance | None = None
    metadata: Metadata | None = None
    expires_at: AwareDatetime | None = None

    @field_validator(*NOT_NULLABLE_ON_UPDATE, mode="before")
    @classmethod
    def _required_not_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("cannot be null; omit the field to leave it unchanged")
        return value


class Memory(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: uuid.UUID
    content: str
    user_id: str | None
    agent_id: str | None
    session_id: str | None
    namespace: str | None
    category: str
    tags: list[str]
    importance: float
    metadata: dict[str, Any] = Field(validation_alias=AliasChoices("metadata_", "metadata"))
    source: str
    fact_role: FactRole
    summary_of: list[uuid.UUID]
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    archived_at: datetime | None
    consolidation_id: uuid.UUID | None


class MemoryBatch(BaseModel):
    items: list[Memory]


class MemoryPage(BaseModel):
    items: list[Memory]
    next_cursor: str | None = Field(
        description="Pass as `cursor` to read the next page; null on the last page."
    )


class MemoryDeletion(BaseModel):
    deleted: int = Field(description="Memories deleted: facts and summaries, archived and "
                                     "expired ones included, and the summaries built from "
                                     "them that went with them.")


class MemoryVersion(BaseModel):
    """A state the memory had before a change replaced it."""

    version: int = Field(description="1 is the memory as first stored; each change to its "
                                     "content, category, tags, importance, metadata or "
                                     "expiry adds the state it replaced. A memory keeps "
                                     "its newest states only (ENGRAM_HISTORY_MAX_VERSIONS), "
                                     "but the numbers count every change, kept, erased or "
                                     "purged: a number always names the same state.")
    content: str
    category: str
    tags: list[str]
    importance: float
    metadata: dict[str, Any]
    expires_at: datetime | None
    valid_from: datetime = Field(description="When the memory took this state.")
    replaced_at: datetime = Field(description="When a change replaced it.")


class MemoryHistory(BaseModel):
    items: list[MemoryVersion] = Field(description="Earlier states, newest first; the "
                                                   "current one is the memory itself.")
    next_cursor: str | None = Field(
        description="Pass as `cursor` to read the next page; null on the last page."
    )


class MemoryHistoryDeletion(BaseModel):
    deleted: int = Field(description="Earlier states erased; the memory itself is unchanged.")
