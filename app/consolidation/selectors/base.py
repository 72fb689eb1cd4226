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
    """`group`, unless it keeps a summary standing for some of its own members: then the
    first other member in keep order that is not one is kept, and the summary is folded.

    Every selector obeys this, whatever it keeps. The kept entry stays as it is, so the
    summary would stay live beside the new summary of the same memories: two answers to
    every search for them. Folded, the new summary stands for it instead, as when a run
    archives what a live summary covers. A group with no such member is left as it is.
    """
    kept = group.kept
    if kept is None or not _summarises_one_of(kept, group):
        return group
    eligible = [e for e in group.to_remove if not _summarises_one_of(e, group)]
    if not eligible:
        return group
    keep = max(eligible, key=keep_priority)
    rest = sorted((e for e in (kept, *group.to_remove) if e is not keep), key=chronological)
    return replace(group, kept=keep, to_remove=tuple(rest))


def _summarises_one_of(entry: Entry, group: Group) -> bool:
    if not entry.summary_of:
        return False
    members = {e.id for e in group.to_remove}
    if group.kept is not None:
        members.add(group.kept.id)
    members.discard(entry.id)
    return not members.isdisjoint(entry.summary_of)


def check_group_threshold(group_threshold: int) -> None:
    if group_threshold < 1:
        raise ValueError(f"group_threshold must be >= 1, got {group_threshold}")
