"""`llm_synthesis`: one LLM synthesis of the group, with `concatenate` as the fallback."""

from collections.abc import Sequence
from dataclasses import dataclass, replace

from app.consolidation.ops.concatenate import concatenate
from app.consolidation.ops.prompts import SYNTHESIS_SYSTEM, synthesis_header
from app.consolidation.ops.text import LinePacker, bullet, clean_llm_text
from app.consolidation.selectors.base import chronological
from app.consolidation.types import Entry, OpContext, OpResult
from app.providers.llm import LLMError

FALLBACK_MODE = "fallback:concatenate"


@dataclass(frozen=True, slots=True)
class LLMSynthesis:
    """One prompt with the group's entries as bullets, oldest first, first fit under
    `max_prompt_chars` (system prompt included). Only entries that made it into the
    prompt are represented; the rest stay for the next run.

    The prompt asks for at most `max_chars` characters. On an LLM error or timeout, an
    empty answer, an answer longer than that, no LLM configured, or no entry fitting the
    prompt, the group is concatenated instead (`fallback_max_chars`) with mode
    "fallback:concatenate" and the reason in `detail`.
    """

    max_prompt_chars: int = 12000
    max_chars: int = 4000
    fallback_max_chars: int = 4000

    @property
    def requires_llm(self) -> bool:
        return True

    async def consolidate(
        self, to_remove: Sequence[Entry], category: str, context: OpContext
    ) -> OpResult:
        limit = min(self.max_chars, context.max_summary_chars)
        included, prompt = self._prompt(to_remove, category, limit)
        if context.llm is None:
            return self._fallback(to_remove, context, "llm_not_configured")
        if not included:
            return self._fallback(to_remove, context, "prompt_cap_too_small")
        try:
            answer = await context.llm.complete(SYNTHESIS_SYSTEM, prompt)
        except LLMError as exc:
            return self._fallback(to_remove, context, exc.code)
        except TimeoutError:
            return self._fallback(to_remove, context, "llm_timeout")
        text = clean_llm_text(answer)
        if not text:
            return self._fallback(to_remove, context, "llm_empty_answer")
        if len(text) > limit:
            # Cut, the answer would lose whatever facts it held past the limit while an
            # archive run archived every source it stands for (until 2026-12-04 it did).
            return self._fallback(to_remove, context,
                                  f"llm_answer_too_long: {len(text)} characters, "
                                  f"at most {limit}")
        return OpResult(summary=text, represented_ids=tuple(e.id for e in included),
                        mode="llm_synthesis")

    def _prompt(self, to_remove: Sequence[Entry], category: str,
                limit: int) -> tuple[list[Entry], str]:
        ordered = sorted(to_remove, key=chronological)
        # The header states the count, so its width is reserved for the largest count.
        header_width = len(SYNTHESIS_SYSTEM) + len(synthesis_header(category, len(ordered),
                                                                    limit))
        packer = LinePacker(self.max_prompt_chars - header_width)
        included = [e for e in ordered if packer.try_add(bullet(e.content))]
        return included, synthesis_header(category, len(included), limit) + packer.text()

    def _fallback(self, to_remove: Sequence[Entry], context: OpContext, reason: str) -> OpResult:
        limit = min(self.fallback_max_chars, context.max_summary_chars)
        return replace(concatenate(to_remove, limit, mode=FALLBACK_MODE), detail=reason)
