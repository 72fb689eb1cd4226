"""The shape every search stage has: a named callable from context to context."""

from __future__ import annotations

from typing import Protocol

from app.search.types import SearchContext


class Stage(Protocol):
    """One step of the pipeline.

    `name` is the key the stage writes its scores under in each candidate's
    explanation, so it must be unique within a pipeline.
    """

    @property
    def name(self) -> str: ...

    def __call__(self, ctx: SearchContext, /) -> SearchContext: ...
