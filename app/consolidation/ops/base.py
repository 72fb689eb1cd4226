"""The `Op` protocol and the error an op raises when it cannot produce a summary."""

from collections.abc import Sequence
from typing import Protocol

from app.consolidation.types import Entry, OpContext, OpResult
from app.providers.llm import LLMClient


class Op(Protocol):
    """Turns one group's `to_remove` into one summary text. Ops never write anything.

    `requires_llm` says whether the op cannot work without `OpContext.llm`, so a
    request that needs one can be refused before anything runs.
    """

    @property
    def requires_llm(self) -> bool: ...

    async def consolidate(
        self, to_remove: Sequence[Entry], category: str, context: OpContext
    ) -> OpResult: ...


class OpError(Exception):
    """An op could not summarise its group; the group is left exactly as it was.

    `code` is stable (op_nothing_fits, llm_not_configured, llm_empty_answer, ...).
    """

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


def require_llm(context: OpContext) -> LLMClient:
    if context.llm is None:
        raise OpError("llm_not_configured", "this op needs an LLM and none is configured")
    return context.llm
