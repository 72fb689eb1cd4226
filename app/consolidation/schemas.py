"""Request and response bodies of the consolidation endpoints."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypeAliasType

from app.consolidation.config import GroupThreshold, OpConfig, SelectorConfig
from app.consolidation.registry import ConsolidationStrategy
from app.validation import (
    INTEGER_ONLY,
    AwareDatetime,
    AwareDatetimeBefore,
    CategoryList,
    Importance,
    JsonBool,
    MetadataMatch,
    ScopeId,
    TagList,
)

# Named, so the OpenAPI document has one schema for it and generated clients one enum.
ConsolidationMode = TypeAliasType("ConsolidationMode", Literal["archive", "synthesize_only"])
ConsolidationStatus = TypeAliasType(
    "ConsolidationStatus", Literal["succeeded", "failed", "running", "planned"])
ConsolidationTrigger = TypeAliasType("ConsolidationTrigger", Literal["api", "auto"])
ConsolidationGroupOutcome = TypeAliasType(
    "ConsolidationGroupOutcome", Literal["planned", "pending", "written", "skipped", "failed"])

OLDER_THAN_MAX = 100 * 365 * 24 * 3600


class ConsolidationRequest(BaseModel):
    """What to fold and how. Scope fields and criteria choose the candidates (all must
    match); a request with neither is refused, since it would fold the whole tenant."""

    model_config = ConfigDict(extra="forbid")

    user_id: ScopeId | None = None
    agent_id: ScopeId | None = None
    session_id: ScopeId | None = None
    namespace: ScopeId | None = None
    tags: TagList | None = Field(default=None, description="All must match.")
    categories: CategoryList | None = None
    metadata: MetadataMatch | None = None
    # int64 declared: its bound is past a 32-bit integer's, and a generated Java client
    # typed it Integer and failed to read any run that named a larger value.
    older_than_seconds: Annotated[int, Field(ge=1, le=OLDER_THAN_MAX,
                                             json_schema_extra={"format": "int64"}),
                                  INTEGER_ONLY] | None = Field(
        default=None,
        description="Only memories created at least this long ago.",
    )
    created_after: AwareDatetime | None = Field(
        default=None, description="Only memories created after this moment.")
    created_before: AwareDatetimeBefore | None = Field(
        default=None, description="Only memories created before this moment.")
    max_importance: Importance | None = Field(
        default=None, description="Only memories with importance at most this."
    )
    strategy: ConsolidationStrategy = Field(
        default="simple",
        description="simple = highest_relevance + concatenate; llm = highest_relevance + "
        "llm_synthesis; dual_mode = highest_relevance + density_routing.",
    )
    selector: SelectorConfig | None = Field(
        default=None, description="Explicit selector; overrides the strategy's."
    )
    op: OpConfig | None = Field(default=None, description="Explicit op; overrides the strategy's.")
    mode: ConsolidationMode = Field(
        default="archive",
        description="archive moves folded sources out of the active set (restorable with "
        "revert); synthesize_only keeps them active and only adds the summary.",
    )
    group_threshold: GroupThreshold = Field(
        default=3, description="The smallest group that is consolidated."
    )
    include_summaries: JsonBool = Field(
        default=False, description="Prior summaries are candidates only when true."
    )
    dry_run: JsonBool = Field(default=False, description="Report the plan; change nothing.")
    run_async: JsonBool = Field(
        default=False, alias="async",
        description="Answer 202 at once and run in the background; GET shows progress.",
    )

    def has_scope(self) -> bool:
        return any(v is not None for v in (self.user_id, self.agent_id, self.session_id,
                                           self.namespace))

    def has_criteria(self) -> bool:
        return bool(
            self.tags or self.categories or self.metadata
            or self.older_than_seconds is not None
            or self.created_after is not None or self.created_before is not None
            or (self.max_importance is not None and self.max_importance < 1.0)
        )


class ConsolidationComposition(BaseModel):
    """The selector and op a run resolved its strategy and overrides to."""

    strategy: ConsolidationStrategy
    selector: SelectorConfig
    op: OpConfig


class ConsolidationGroupScope(BaseModel):
    user_id: str | None
    agent_id: str | None
    session_id: str | None
    namespace: str | None


class ConsolidationGroup(BaseModel):
    category: str
    scope: ConsolidationGroupScope | None = Field(
        default=None,
        description="The user, agent, session and namespace every source of the group has "
        "(null where none has one), and its summary is written in: a group never spans "
        "two scopes. Null in runs recorded before this was kept.",
    )
    kept_id: uuid.UUID | None
    summary_id: uuid.UUID | None = Field(description="The summary written; null until then.")
    removed_ids: list[uuid.UUID] = Field(
        description="Sources moved out of the active set (archive mode), with any live "
        "summary of them whose every source is then archived by a run (a synthesize_only "
        "summary the new one supersedes); in a dry run, those that would be: exactly, for "
        "an op that needs no LLM (it is run); for an LLM op, every source of the group, of "
        "which the run may fold fewer."
    )
    folded_ids: list[uuid.UUID] = Field(
        default_factory=list,
        description="Sources the summary represents (in any mode; in archive mode with "
        "the summaries it supersedes); the rest of the group, left out by a size cap, "
        "stays for the next run.",
    )
    mode: str | None = Field(description="What produced the summary, e.g. "
                             "'concatenate', 'fallback:concatenate', 'dense:extractive'.")
    outcome: ConsolidationGroupOutcome = "pending"
    error: str | None = None
    detail: str | None = None


class ConsolidationProgress(BaseModel):
    groups_done: int
    groups_total: int | None = Field(description="Null until the plan is made.")


class ConsolidationTimings(BaseModel):
    candidates_ms: float | None = None
    plan_ms: float | None = None
    execute_ms: float | None = Field(default=None, description="Ops and writes, overlapped.")
    write_ms: float | None = Field(default=None, description="Time inside group transactions.")
    total_ms: float | None = None


class ConsolidationResult(BaseModel):
    id: uuid.UUID
    status: ConsolidationStatus = Field(
        description="running also covers a queued async run (started_at is then null), "
        "which holds no scope until a worker starts it."
    )
    groups: list[ConsolidationGroup]
    consolidated: int = Field(description="Source memories folded into summaries.")
    created: int = Field(description="Summaries written.")
    deleted: int = Field(description="Sources removed (archived); 0 in synthesize_only.")
    request: ConsolidationRequest
    composition: ConsolidationComposition
    progress: ConsolidationProgress
    candidates: int = Field(
        description="Memories the candidate query returned: matches that could fold, "
        "those with at least group_threshold matches in their scope (and category, unless "
        "the selector groups across categories).")
    remainder: int = Field(
        description="Such memories the scan limit left out; the next run takes them."
    )
    dry_run: bool
    trigger: ConsolidationTrigger
    timings: ConsolidationTimings
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    reverted_at: datetime | None = None
    error: str | None
    request_id: str | None = Field(
        default=None,
        description="The `X-Request-ID` the run was started under: the request's that "
                    "started it; for an automatic run, its job's (`<id of the write that "
                    "queued it>.job-<n>`). The run's log lines carry it. Null for runs "
                    "recorded before the service kept it.")


class ConsolidationPage(BaseModel):
    items: list[ConsolidationResult]
    next_cursor: str | None = Field(
        description="Pass as `cursor` to read the next page; null on the last page."
    )
