"""`abstractive`: an LLM summary of each entry, as a bullet list."""

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from app.consolidation.ops.base import OpError, require_llm
from app.consolidation.ops.prompts import ENTRY_SYSTEM, entry_prompt
from app.consolidation.ops.text import LinePacker, bullet, clean_llm_text
from app.consolidation.selectors.base import chronological
from app.consolidation.types import Entry, OpContext, OpResult
from app.providers.llm import LLMClient, LLMError


@dataclass(frozen=True, slots=True)
class Abstractive:
    """One LLM call per entry (at most `max_concurrency` at once), one bullet each,
    oldest first, packed whole under `max_chars`.

    An entry whose call fails, answers nothing or answers more than fits as a bullet is
    not represented and stays for the next run; when no entry gets a summary the op
    fails with the first error.
    """

    max_chars: int = 4000
    max_concurrency: int = 4

    @property
    def requires_llm(self) -> bool:
        return True

    async def consolidate(
        self, to_remove: Sequence[Entry], category: str, context: OpContext
    ) -> OpResult:
        llm = require_llm(context)
        limit = min(self.max_chars, context.max_summary_chars)
        ordered = sorted(to_remove, key=chronological)
        gate = asyncio.Semaphore(self.max_concurrency)
        async with asyncio.TaskGroup() as tasks:
            pending = [
                tasks.create_task(_summarise(llm, gate, category, e.content, limit))
                for e in ordered
            ]
        packer = LinePacker(limit)
        represented = []
        failures: list[OpError | LLMError] = []
        for entry, task in zip(ordered, pending, strict=True):
            answer = task.result()
            if not isinstance(answer, str):
                failures.append(answer)
            elif packer.try_add(bullet(answer)):
                represented.append(entry.id)
        if not represented:
            if failures:
                raise failures[0]
            raise OpError("op_nothing_fits", f"no entry summary fits in {limit} characters")
        detail = f"{len(failures)} entries not summarised: {failures[0].code}" if failures else None
        return OpResult(
            summary=packer.text(),
            represented_ids=tuple(represented),
            mode="abstractive",
            detail=detail,
        )


async def _summarise(
    llm: LLMClient, gate: asyncio.Semaphore, category: str, content: str, limit: int
) -> str | LLMError | OpError:
    async with gate:
        try:
            answer = await llm.complete(ENTRY_SYSTEM, entry_prompt(category, content))
        except LLMError as exc:
            return exc
        except TimeoutError:
            return LLMError("the LLM did not answer in time", code="llm_timeout", status=504)
    text = clean_llm_text(answer)
    if not text:
        return OpError("llm_empty_answer", "the LLM answered an empty summary")
    # Room for the "- " of the bullet. Cut, the summary would lose what the entry held
    # past the limit while its source was archived (until 2026-12-04 it did).
    if len(text) > limit - 2:
        return OpError("llm_answer_too_long",
                       f"the LLM answered {len(text)} characters for one entry, "
                       f"at most {limit - 2} fit")
    return text
