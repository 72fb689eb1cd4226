"""When turns are folded into the rolling summary, and which: pure arithmetic on a
session's turn count and cursor.

A fold is due when a session's unsummarised turns (those past the cursor) reach
`threshold`; it takes the oldest `threshold - recent` of them and leaves the newest
`recent` as they are. Folds that are due but not done (the summariser is failing) are
the backlog; past `backlog_max` the oldest is dropped: its turns leave the context
without being summarised (the log keeps them) and the drop is recorded as an event.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FoldPolicy:
    threshold: int = 20
    recent: int = 10
    backlog_max: int = 10
    warn_within: int = 2

    def __post_init__(self) -> None:
        if not 0 <= self.recent < self.threshold:
            raise ValueError("recent must be at least 0 and less than threshold")
        if self.backlog_max < 1:
            raise ValueError("backlog_max must be at least 1")

    @property
    def size(self) -> int:
        """Turns one fold takes."""
        return self.threshold - self.recent


@dataclass(frozen=True, slots=True)
class Chunk:
    """Turns `first`..`last` (sequence numbers, both included)."""

    first: int
    last: int

    @property
    def turns(self) -> int:
        return self.last - self.first + 1


def unsummarised(turns: int, cursor: int) -> int:
    return turns - cursor


def backlog(turns: int, cursor: int, policy: FoldPolicy) -> int:
    """How many folds are due."""
    waiting = unsummarised(turns, cursor)
    if waiting < policy.threshold:
        return 0
    return (waiting - policy.threshold) // policy.size + 1


def next_fold(turns: int, cursor: int, policy: FoldPolicy) -> Chunk | None:
    if backlog(turns, cursor, policy) == 0:
        return None
    return Chunk(cursor + 1, cursor + policy.size)


def overflow(turns: int, cursor: int, policy: FoldPolicy) -> list[Chunk]:
    """The oldest due folds to drop so at most `backlog_max` remain, oldest first."""
    excess = backlog(turns, cursor, policy) - policy.backlog_max
    return [Chunk(cursor + i * policy.size + 1, cursor + (i + 1) * policy.size)
            for i in range(max(0, excess))]


def turns_until_fold(turns: int, cursor: int, policy: FoldPolicy) -> int:
    """Turns still to come before the next fold is due (0: it is due now)."""
    return max(0, policy.threshold - unsummarised(turns, cursor))


def fold_is_near(turns: int, cursor: int, policy: FoldPolicy) -> bool:
    """The unsummarised turns are within `warn_within` of the threshold (or past it)."""
    return unsummarised(turns, cursor) >= policy.threshold - policy.warn_within
