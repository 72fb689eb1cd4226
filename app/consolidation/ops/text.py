"""Text helpers ops share: bullets, packing whole lines under a limit, cleaning LLM text."""

import re

_SPACES = re.compile(r"[ \t]+")
# A reasoning model served behind an OpenAI-compatible endpoint (DeepSeek-R1, Qwen3, ...)
# may open its answer with its reasoning in a tag; cut off by the token limit, the tag
# never closes and the whole answer is reasoning.
_REASONING = re.compile(r"\A\s*<(think|thinking|reasoning)>.*?(?:</\1\s*>|\Z)",
                        re.DOTALL | re.IGNORECASE)


def bullet(text: str) -> str:
    """A markdown bullet; continuation lines are indented so the list stays a list."""
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    return "- " + "\n  ".join(lines)


class LinePacker:
    """Collects whole lines while they fit in `limit` characters, newline-joined.

    A line that does not fit is refused whole, never cut: what a summary contains of
    an entry is then either all of it or nothing, so "represented" stays honest.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lines: list[str] = []
        self._size = 0

    def try_add(self, line: str) -> bool:
        extra = len(line) + (1 if self._lines else 0)
        if self._size + extra > self.limit:
            return False
        self._lines.append(line)
        self._size += extra
        return True

    def text(self) -> str:
        return "\n".join(self._lines)


def clean_llm_text(text: str) -> str:
    """LLM output made storable (no NUL, no lone surrogates: PostgreSQL refuses both) and
    without the reasoning it opens with, which is no part of a summary."""
    while (reasoning := _REASONING.match(text)) is not None:
        text = text[reasoning.end():]
    kept = "".join(ch for ch in text if ch != "\x00" and not 0xD800 <= ord(ch) <= 0xDFFF)
    return kept.strip()


def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, at a word boundary when one is near."""
    if len(text) <= limit:
        return text
    if limit <= 1:
        return text[:limit]
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


def normalise_sentence(sentence: str) -> str:
    """A key under which two spellings of one sentence compare equal."""
    return _SPACES.sub(" ", sentence).strip().casefold()
