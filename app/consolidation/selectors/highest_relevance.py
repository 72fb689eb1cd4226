"""`highest_relevance`: one group per category, keep the most important entry."""

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from app.consolidation.selectors.base import check_group_threshold, chronological, keep_priority
from app.consolidation.types import Entry, Group


@dataclass(frozen=True, slots=True)
class HighestRelevance:
    """Group by category; skip groups smaller than `group_threshold`; keep the entry
    with the highest importance (missing counts as 0, the most recent wins a tie) and
    mark the rest for consolidation."""

    group_threshold: int = 3

    def __post_init__(self) -> None:
        check_group_threshold(self.group_threshold)

    def select(self, entries: Sequence[Entry]) -> list[Group]:
        by_category: dict[str, list[Entry]] = defaultdict(list)
        for entry in entries:
            by_category[entry.category].append(entry)
        groups: list[Group] = []
        for category in sorted(by_category):
            members = by_category[category]
            if len(members) < self.group_threshold:
                continue
            kept = max(members, key=keep_priority)
            rest = sorted((e for e in members if e is not kept), key=chronological)
            if rest:
                groups.append(Group(category=category, kept=kept, to_remove=tuple(rest)))
        return groups
