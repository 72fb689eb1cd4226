"""`similarity_cluster`: group entries whose embeddings are close, near-duplicates first.

The algorithm is leader clustering. Entries are visited in keep order (importance,
then recency, then id); each entry not yet taken becomes a leader and takes every
untaken entry within `max_distance` (cosine) of itself. The leader is the entry kept,
so "keep the highest-importance member" holds by construction, and every member is
within `max_distance` of what stays. Unlike single linkage it cannot chain A~B~C into
one group when A and C are far apart; unlike full complete linkage it needs no n x n
matrix in memory. Similarities are computed a block of leaders at a time with one
matrix product, so the cost is about n^2 * dim / 2 multiply-adds, done by BLAS.
"""

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.consolidation.selectors.base import check_group_threshold, chronological, keep_priority
from app.consolidation.types import Entry, Group

# float32 rounding puts an exact duplicate at a distance of about 1e-7, not 0.
_TOLERANCE = 1e-6


@dataclass(frozen=True, slots=True)
class SimilarityCluster:
    """Groups of entries within `max_distance` cosine distance of their kept entry.

    Entries without an embedding (or with a zero one) are never grouped. With
    `by_category` (the default) only entries of one category are grouped together;
    without it a group takes its kept entry's category. Entries whose embeddings have
    different widths are never compared.
    """

    max_distance: float = 0.15
    group_threshold: int = 3
    by_category: bool = True
    block_size: int = 256

    def __post_init__(self) -> None:
        check_group_threshold(self.group_threshold)
        if not 0.0 <= self.max_distance <= 2.0:
            raise ValueError(f"max_distance must be within [0, 2], got {self.max_distance}")
        if self.block_size < 1:
            raise ValueError("block_size must be >= 1")

    def select(self, entries: Sequence[Entry]) -> list[Group]:
        partitions: dict[tuple[str, int], list[Entry]] = defaultdict(list)
        for entry in entries:
            if entry.embedding is None or not entry.embedding:
                continue
            category = entry.category if self.by_category else ""
            partitions[(category, len(entry.embedding))].append(entry)
        groups: list[Group] = []
        for key in sorted(partitions):
            for cluster in self._clusters(partitions[key]):
                if len(cluster) < self.group_threshold:
                    continue
                kept, rest = cluster[0], sorted(cluster[1:], key=chronological)
                groups.append(Group(category=kept.category, kept=kept, to_remove=tuple(rest)))
        # Stable: within a category, groups stay in leader (keep priority) order.
        groups.sort(key=lambda g: g.category)
        return groups

    def _clusters(self, members: list[Entry]) -> list[list[Entry]]:
        """Leader clusters of one partition, each leader first."""
        ordered = sorted(members, key=keep_priority, reverse=True)
        matrix = np.asarray([e.embedding for e in ordered], dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1)
        usable = np.isfinite(norms) & (norms > 0)
        ordered = [e for e, ok in zip(ordered, usable, strict=True) if ok]
        unit = matrix[usable] / norms[usable][:, None]
        n = len(ordered)
        threshold = 1.0 - self.max_distance - _TOLERANCE
        taken = np.zeros(n, dtype=bool)
        clusters: list[list[Entry]] = []
        for start in range(0, n, self.block_size):
            stop = min(n, start + self.block_size)
            # Everything before `start` is already taken, so only later columns matter.
            sims = unit[start:stop] @ unit[start:].T
            for leader in range(start, stop):
                if taken[leader]:
                    continue
                row = sims[leader - start, leader - start :]
                members_idx = np.flatnonzero((row >= threshold) & ~taken[leader:]) + leader
                taken[members_idx] = True
                taken[leader] = True
                others = [ordered[int(i)] for i in members_idx if int(i) != leader]
                clusters.append([ordered[leader], *others])
        return clusters
