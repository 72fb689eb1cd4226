"""`extractive`: keep only the sentences that carry facts (names, numbers, dates)."""

from collections.abc import Sequence
from dataclasses import dataclass

from app.consolidation.ops.base import OpError
from app.consolidation.ops.facts import carries_fact, join_sentences, split_sentences
from app.consolidation.ops.text import LinePacker, normalise_sentence
from app.consolidation.selectors.base import chronological
from app.consolidation.types import Entry, OpContext, OpResult


@dataclass(frozen=True, slots=True)
class Extractive:
    """One bullet per entry, oldest first, made of its fact-bearing sentences.

    Deterministic, no LLM. An entry with no fact-bearing sentence keeps its first
    sentence, so every folded entry leaves a trace; a summary's lines are each read so,
    as each stands for what the summary folded (read whole, a summary of notes with no
    fact word kept its first line only, and the run archived the notes its other lines
    held: an exploratory probe). A sentence already in the summary
    (same words, case and spacing aside) is not repeated, so near-duplicates collapse;
    an entry whose sentences are all already there is represented without a bullet of
    its own. Bullets are packed whole under `max_chars`, as in `concatenate`.
    """

    max_chars: int = 4000

    @property
    def requires_llm(self) -> bool:
        return False

    async def consolidate(
        self, to_remove: Sequence[Entry], category: str, context: OpContext
    ) -> OpResult:
        return extract(to_remove, min(self.max_chars, context.max_summary_chars))


def extract(entries: Sequence[Entry], limit: int) -> OpResult:
    packer = LinePacker(limit)
    seen: set[str] = set()
    represented = []
    for entry in sorted(entries, key=chronological):
        kept = [s for part in _parts(entry) for s in _facts_or_first(part)]
        new: dict[str, str] = {}  # normalised -> first spelling, in order
        for sentence in kept:
            key = normalise_sentence(sentence)
            if key not in seen:
                new.setdefault(key, sentence)
        if new and not packer.try_add("- " + join_sentences(list(new.values()))):
            continue
        seen.update(new)
        represented.append(entry.id)
    if not represented:
        raise OpError("op_nothing_fits", f"no entry's facts fit in {limit} characters")
    if not packer.text():
        raise OpError("op_nothing_fits", "the entries carry no text")
    return OpResult(summary=packer.text(), represented_ids=tuple(represented), mode="extractive")


def _parts(entry: Entry) -> list[str]:
    """What leaves a trace of its own: a fact whole, each line of a summary (without its
    bullet, which the new summary's own bullet replaces: it read "- - ...")."""
    if entry.fact_role != "summary":
        return [entry.content]
    lines = (line.strip() for line in entry.content.split("\n"))
    return [line.removeprefix("- ").strip() for line in lines if line.strip("- ")] \
        or [entry.content]


def _facts_or_first(text: str) -> list[str]:
    sentences = split_sentences(text)
    return [s for s in sentences if carries_fact(s)] or sentences[:1]
