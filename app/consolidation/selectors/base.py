"""The `Selector` protocol and the orderings every selector shares."""

import uuid
from collections.abc import Sequence
from dataclasses import replace
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


def kept_apart_from_its_sources(group: Group) -> Group:
    """`group`, unless what it keeps would stay live beside the new summary of the same
    memories: a summary standing for some of its own members, or a member that a summary
    it folds stands for (its text is in that summary, and so in the new one). Then the
    first member in keep order that is neither is kept, or none when every member is one,
    and the group folds the rest.

    Every selector obeys this, whatever it keeps. The kept entry stays as it is, so either
    would give every search for those memories two answers. Folded, the new summary stands
    for it instead, as when a run archives what a live summary covers. A group whose kept
    entry is neither is left as it is.
    """
    kept = group.kept
    if kept is None:
        return group
    members = (kept, *group.to_remove)
    ids = {e.id for e in members}
    covered = {i for e in members for i in e.summary_of if i != e.id and i in ids}

    def keepable(entry: Entry) -> bool:
        return entry.id not in covered and covered.isdisjoint(entry.summary_of)

    if keepable(kept):
        return group
    eligible = [e for e in group.to_remove if keepable(e)]
    keep = max(eligible, key=keep_priority) if eligible else None
    rest = sorted((e for e in members if e is not keep), key=chronological)
    return replace(group, kept=keep, to_remove=tuple(rest))


def check_group_threshold(group_threshold: int) -> None:
    if group_threshold < 1:
        raise ValueError(f"group_threshold must be >= 1, got {group_threshold}")
