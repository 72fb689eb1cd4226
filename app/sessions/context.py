"""What an agent puts in its prompt, per context strategy: pure functions of a session's
state and its newest turns.

Tokens are estimated (there is no one tokenizer for every agent's model) at four ASCII
characters each, and one for any other character: a CJK character is a token or more to
the usual tokenizers, an emoji two or three, so four of them a token undercounted such
text three- or fourfold and a context overran the prompt it was sized for; other scripts
are overcounted instead, which only shows fewer turns. The estimate is stored with each
turn and reported with the context.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from app.consolidation.ops.text import clip
from app.sessions.folding import FoldPolicy, fold_is_near, turns_until_fold
from app.sessions.types import SessionState, SessionStrategy, TurnView

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    if text.isascii():
        return max(1, -(-len(text) // CHARS_PER_TOKEN))
    ascii_chars = len(text.encode("ascii", "ignore"))
    return max(1, -(-ascii_chars // CHARS_PER_TOKEN) + len(text) - ascii_chars)


def chars_for(tokens: int, sample: str) -> int:
    """About how many characters of text like `sample` make `tokens` estimated tokens."""
    if not sample:
        return tokens * CHARS_PER_TOKEN
    return max(1, tokens * len(sample) // estimate_tokens(sample))


def within_tokens(text: str, tokens: int) -> str:
    """`text`, clipped as `clip` clips, to at most `tokens` estimated tokens."""
    if estimate_tokens(text) <= tokens:
        return text
    low, high = 0, len(text)  # the longest clip that fits lies in [low, high]
    while low < high:
        middle = (low + high + 1) // 2
        if estimate_tokens(clip(text, middle)) <= tokens:
            low = middle
        else:
            high = middle - 1
    return clip(text, low)


def summary_tokens(max_chars: int) -> int:
    """The tokens a summary of at most `max_chars` characters may take: those that many
    characters of English make. A summary in a script of a token a character (Chinese,
    Japanese) took up to 4x that, more than the default budget, and left the context no
    recent turn."""
    return -(-max_chars // CHARS_PER_TOKEN)  # as estimate_tokens counts them


def chars_wanted(sample: str, max_chars: int) -> int:
    """The characters of text like `sample` (a session's summary and turns) to ask a
    summariser for: as many as make `summary_tokens(max_chars)`, at most `max_chars`. Only
    a guide where the sample mixes scripts (an English summary, then Chinese turns)."""
    return min(max_chars, chars_for(summary_tokens(max_chars), sample))


def newest_lines_within(text: str, max_chars: int, tokens: int) -> str | None:
    """The newest whole lines of `text` in at most `max_chars` characters and `tokens`
    estimated tokens, its first lines left out first: a summary's lines run oldest to
    newest, and its end is what the turns just folded made (a cut at the end lost them).
    None when its newest line alone is past either: no cut of it is safe to save."""
    def fits(kept: str) -> bool:
        return len(kept) <= max_chars and estimate_tokens(kept) <= tokens

    if fits(text):
        return text
    lines = text.split("\n")
    # The fewest first lines to leave out (all of them: none fits): leaving lines out
    # never adds characters or tokens.
    low, high = 1, len(lines)
    while low < high:
        middle = (low + high) // 2
        if fits("\n".join(lines[middle:])):
            high = middle
        else:
            low = middle + 1
    kept = "\n".join(lines[low:]).lstrip("\n")
    return kept if kept.strip() and fits(kept) else None


@dataclass(frozen=True, slots=True)
class ContextParts:
    mode: SessionStrategy  # the strategy in force (truncation while the summariser is down)
    summary: str | None
    turns: tuple[TurnView, ...]  # oldest first
    omitted: int  # turns the strategy would show that did not fit the budget
    tokens: int


def newest_within(turns: Sequence[TurnView], budget: int) -> tuple[TurnView, ...]:
    """The newest turns whose tokens add up to at most `budget`, oldest first; a turn that
    does not fit ends the run, so the context never has a hole in it."""
    kept: list[TurnView] = []
    used = 0
    for turn in reversed(turns):
        if used + turn.tokens > budget:
            break
        kept.append(turn)
        used += turn.tokens
    return tuple(reversed(kept))


class ContextStrategy(Protocol):
    @property
    def name(self) -> SessionStrategy: ...

    def reads_after(self, session: SessionState) -> int | None:
        """The seq after which turns are wanted; None when no turn is."""

    def build(self, session: SessionState, turns: Sequence[TurnView],
              budget: int) -> ContextParts:
        """`turns`: the newest turns after `reads_after`, oldest first (maybe capped)."""


@dataclass(frozen=True, slots=True)
class NoContext:
    name: SessionStrategy = "none"

    def reads_after(self, session: SessionState) -> int | None:
        return None

    def build(self, session: SessionState, turns: Sequence[TurnView],
              budget: int) -> ContextParts:
        return ContextParts(self.name, None, (), 0, 0)


@dataclass(frozen=True, slots=True)
class Truncation:
    name: SessionStrategy = "truncation"

    def reads_after(self, session: SessionState) -> int | None:
        return 0

    def build(self, session: SessionState, turns: Sequence[TurnView],
              budget: int) -> ContextParts:
        kept = newest_within(turns, budget)
        return ContextParts(self.name, None, kept, session.turns - len(kept),
                            sum(t.tokens for t in kept))


@dataclass(frozen=True, slots=True)
class RollingSummary:
    """The summary of everything folded, then the turns past the cursor that fit what the
    summary leaves of the budget. The summary is never cut: its length is bounded by
    ENGRAM_SESSION_SUMMARY_MAX_CHARS instead."""

    name: SessionStrategy = "rolling_summary"

    def reads_after(self, session: SessionState) -> int | None:
        return session.cursor

    def build(self, session: SessionState, turns: Sequence[TurnView],
              budget: int) -> ContextParts:
        summary_tokens = estimate_tokens(session.summary) if session.summary else 0
        kept = newest_within(turns, max(0, budget - summary_tokens))
        return ContextParts(self.name, session.summary, kept,
                            session.turns - session.cursor - len(kept),
                            summary_tokens + sum(t.tokens for t in kept))


STRATEGIES: dict[SessionStrategy, ContextStrategy] = {
    s.name: s for s in (NoContext(), Truncation(), RollingSummary())
}


def strategy_in_force(session: SessionState) -> ContextStrategy:
    """The session's strategy, except that a rolling summary whose summariser is degraded
    falls back to truncation until it recovers."""
    if session.strategy == "rolling_summary" and not session.health.summarising:
        return STRATEGIES["truncation"]
    return STRATEGIES[session.strategy]


def fold_warning(session: SessionState, policy: FoldPolicy) -> str | None:
    """For a rolling summary near its next fold: tell the agent to store what matters."""
    if session.strategy != "rolling_summary" or not fold_is_near(
            session.turns, session.cursor, policy):
        return None
    store = "store anything critical from them as a memory (POST /v1/memories) first."
    if session.health.state == "degraded":
        # Nothing is summarised now: the context is truncated, and folds wait, the oldest
        # leaving it unsummarised past the backlog's bound.
        return ("The summariser of this session is failing: its oldest turns wait to be "
                "summarised, and may leave the context unsummarised; " + store)
    left = turns_until_fold(session.turns, session.cursor, policy)
    when = "now" if left == 0 else f"in {left} turn{'s' if left != 1 else ''}"
    return f"The oldest turns of this session will be summarised {when}; {store}"
