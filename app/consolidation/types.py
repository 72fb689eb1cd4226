"""The values the consolidation engine passes around: entries in, groups, op results."""

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from app.providers.llm import LLMClient

MEMORY_CONTENT_MAX_CHARS = 32768
"""A summary becomes a memory, so it can never be longer than a memory's content."""


class Scope(NamedTuple):
    """Where a memory lives within its tenant (None: nowhere in that column).

    A group never spans two scopes, and its summary is written in the one its sources
    share: a summary of one user's memories and another's would belong to neither, and
    their facts would leave both users' searches and listings with nothing in their
    place (likewise an agent's, a session's, a namespace's)."""

    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    namespace: str | None = None


NO_SCOPE = Scope()


@dataclass(frozen=True, slots=True)
class Entry:
    """One candidate memory, as much of it as selectors and ops need."""

    id: uuid.UUID
    content: str
    category: str
    importance: float | None
    created_at: datetime
    embedding: tuple[float, ...] | None = None
    tags: tuple[str, ...] = ()
    fact_role: str = "fact"
    metadata: Mapping[str, Any] = field(default_factory=dict)
    scope: Scope = NO_SCOPE
    expires_at: datetime | None = None
    # What a summary stands for, through summaries of summaries (empty for a fact).
    summary_of: tuple[uuid.UUID, ...] = ()


@dataclass(frozen=True, slots=True)
class Group:
    """Entries a selector put together: `kept` stays as it is, `to_remove` is folded.

    `kept` is None for a selector that folds a whole group. `scope` is every member's
    (the composite sets it: selectors see one scope's entries at a time).
    """

    category: str
    kept: Entry | None
    to_remove: tuple[Entry, ...]
    scope: Scope = NO_SCOPE


@dataclass(frozen=True, slots=True)
class OpResult:
    """One summary text and the ids of the entries it really represents.

    Only `represented_ids` may be removed: an op that could use part of a group (a size
    cap) leaves the rest for the next run. `mode` names what produced the text, for
    example "concatenate", "fallback:concatenate" or "dense:extractive"; `detail`
    says why, when there is something to say (the LLM error code behind a fallback).
    """

    summary: str
    represented_ids: tuple[uuid.UUID, ...]
    mode: str | None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class OpContext:
    """What ops may use besides the group: the LLM, if one is configured, and limits."""

    llm: LLMClient | None = None
    max_summary_chars: int = MEMORY_CONTENT_MAX_CHARS


@dataclass(frozen=True, slots=True)
class Partitioning:
    """What a group needs at the least, whatever the selector: `min_size` entries of one
    scope (and one category, when `by_category`). Matches in a smaller partition can
    never fold, so the window skips them: else, once enough of them were the oldest,
    every run read the same window and folded nothing again."""

    min_size: int
    by_category: bool
