"""Request and response bodies of `POST /v1/search`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.memories.schemas import Memory
from app.validation import (
    INTEGER_ONLY,
    AwareDatetime,
    AwareDatetimeBefore,
    Category,
    JsonBool,
    MetadataMatch,
    QueryText,
    ScopeId,
    Tag,
)


class SearchRequest(BaseModel):
    """A query and the scope it searches; unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")

    query: QueryText
    user_id: ScopeId | None = None
    agent_id: ScopeId | None = None
    session_id: ScopeId | None = None
    namespace: ScopeId | None = None
    tags: Annotated[list[Tag], Field(max_length=64)] | None = Field(
        default=None, description="All must match."
    )
    categories: Annotated[list[Category], Field(max_length=64)] | None = Field(
        default=None, description="Any may match."
    )
    created_after: AwareDatetime | None = Field(
        default=None, description="Only memories created after this moment.")
    created_before: AwareDatetimeBefore | None = Field(
        default=None, description="Only memories created before this moment.")
    metadata: MetadataMatch | None = None
    top_k: Annotated[int, Field(ge=1, le=100), INTEGER_ONLY] = 10
    include_summaries: JsonBool = True
    explain: JsonBool = Field(default=False, description="Add per-stage scores to each result.")


class SearchResult(BaseModel):
    memory: Memory
    score: float
    # Required (always sent), so a generated client's field is not optional.
    explanation: dict[str, dict[str, Any]] | None = Field(
        description="Each stage's scores when the request asked to `explain`; null otherwise.")


class SearchResponse(BaseModel):
    results: list[SearchResult]
    query_style: Literal["summary", "regular"]
