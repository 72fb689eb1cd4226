"""What a start or a re-embedding does, given the recorded vector space: pure rules.

Vectors of two models do not compare: a query embedded by one model ranks another's
vectors at random. So a service whose embedder is not the one the stored vectors came
from refuses to start, and `python -m app reembed` moves them to the configured one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Literal

REEMBED_COMMAND = "python -m app reembed"


@dataclass(frozen=True)
class StoredSpace:
    """The recorded row: the model of the stored vectors, and a re-embedding under way
    (the model it moves to, the last memory id done)."""

    model: str
    target_model: str | None = None
    target_after: uuid.UUID | None = None


@dataclass(frozen=True)
class StartDecision:
    # record: nothing recorded yet, record the configured model; keep: it matches;
    # adopt: no memory holds a vector, so the configured model becomes the recorded one;
    # refuse: the stored vectors are of another model, or of two.
    action: Literal["record", "keep", "adopt", "refuse"]
    reason: str = ""


def on_start(stored: StoredSpace | None, configured: str, has_memories: bool) -> StartDecision:
    if stored is None:
        # The first start since the space was recorded at all (migration 0021): the
        # vectors are taken to be the configured embedder's, as they were assumed before.
        return StartDecision("record")
    if not has_memories:
        return StartDecision("keep" if stored == StoredSpace(configured) else "adopt")
    if stored.target_model is not None:
        return StartDecision("refuse", (
            f"a re-embedding of the stored memories from {_named(stored.model)} to "
            f"{stored.target_model} was left unfinished, so their vectors are of two models. "
            f"Run `{REEMBED_COMMAND}`: it re-embeds them with the configured embedder's "
            f"model ({configured}), going on where it stopped when that is "
            f"{stored.target_model}"))
    if stored.model != configured:
        return StartDecision("refuse", (
            f"the stored memories' vectors come from {stored.model}, but the configured "
            f"embedder gives {configured}; a search would compare vectors of two models. "
            f"Run `{REEMBED_COMMAND}` to re-embed them with {configured}, or configure the "
            f"embedder of {stored.model} again"))
    return StartDecision("keep")


def _named(model: str) -> str:
    # A pass begun before any start recorded a model leaves the model empty.
    return model or "an unrecorded model"


@dataclass(frozen=True)
class ReembedStart:
    """Where a re-embedding to a model begins: nothing to do, or after which id (None:
    from the first)."""

    needed: bool
    after: uuid.UUID | None = None

    @property
    def resumed(self) -> bool:
        return self.after is not None


def reembed_start(stored: StoredSpace | None, target: str) -> ReembedStart:
    if stored is not None and stored.target_model == target:
        return ReembedStart(True, stored.target_after)
    if stored is not None and stored.target_model is None and stored.model == target:
        return ReembedStart(False)
    # Nothing recorded (the model is not known), another model, or an unfinished pass to
    # another model: every memory, from the first.
    return ReembedStart(True)
