"""The `Selector` protocol and the orderings every selector shares."""

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from app.consolidation.types import Entry, Group


class Selector(Protocol):
    """Reads entries and returns groups; never writes, never calls out. The composite
    hands it one scope's entries at a time, so it need not look at scopes.

    Output order is deterministic (groups by category, `to_remove` oldest first) so
    plans and golden tests are stable whatever order the database returned.
    """

    def select(self, entries: Sequence[Entry]) -> list[Group]: ...


def keep_priority(entry: Entry) -> tuple[float, datetime, uuid.UUID]:
    """Higher is kept first: importance (missing counts as 0), then the most recent.

    The id settles a full tie, so the choice never depends on input order.
    """
    importance = entry.importance if entry.importance is not None else 0.0
    return (importance, entry.created_at, entry.id)


def chronological(entry: Entry) -> tuple[datetime, uuid.UUID]:
    return (entry.created_at, entry.id)


def check_group_threshold(group_threshold: int) -> None:
    if group_threshold < 1:
        raise ValueError(f"group_threshold must be >= 1, got {group_threshold}")
