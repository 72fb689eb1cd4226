"""Text helpers ops share: bullets, packing whole lines under a limit, cleaning LLM text."""

import re
import unicodedata

# A reasoning model served behind an OpenAI-compatible endpoint (DeepSeek-R1, Qwen3, ...)
# may open its answer with its reasoning in a tag; cut off by the token limit, the tag
# never closes and the whole answer is reasoning.
_REASONING = re.compile(r"\A\s*<(think|thinking|reasoning)>.*?(?:</\1\s*>|\Z)",
                        re.DOTALL | re.IGNORECASE)
# DeepSeek-R1's chat template puts the opening "<think>" in the prompt, so the answer
# starts inside the reasoning and only its end tag shows (vLLM, llama.cpp and Ollama
# pass it on as is), ending its line. One mid-line is the summary's own text (a memory
# about a parser of such tags), and nothing before it is cut.
_REASONING_END = re.compile(r"</(think|thinking|reasoning)\s*>[ \t]*(?:\r?\n|\Z)",
                            re.IGNORECASE)
_REASONING_START = re.compile(r"<(think|thinking|reasoning)>", re.IGNORECASE)


_LINE_END = re.compile(r"\r\n|\r|\n")


def bullet(text: str) -> str:
    """A markdown bullet; continuation lines are indented so the list stays a list. Lines
    end at CR and LF only: str.splitlines() also breaks at U+2028, NEL, VT and FF, which
    text may hold mid-sentence and which a summary's line-based readers do not end a line
    at, so a memory's text came back cut into indented pieces."""
    lines = [line.rstrip() for line in _LINE_END.split(text.strip()) if line.strip()]
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
    opened = False
    while (reasoning := _REASONING.match(text)) is not None:
        text, opened = text[reasoning.end():], True
    end = None if opened else _REASONING_END.search(text)
    if end is not None and _REASONING_START.search(text, 0, end.start()) is None:
        text = text[end.end():]
    kept = "".join(ch for ch in text if ch != "\x00" and not 0xD800 <= ord(ch) <= 0xDFFF)
    return kept.strip()


def _joins_previous(ch: str) -> bool:
    """Whether `ch` is shown as part of the character before it: a combining mark (an
    accent of decomposed text, a vowel sign), a joiner, a variation selector, an emoji's
    skin tone, the tag characters of a flag, or the vowel or final consonant of a Hangul
    syllable written as its letters (Korean text from a Mac's file names), or Thai's and
    Lao's SARA AM, a vowel of its syllable though not classed as a mark (น้ำ was cut
    before it)."""
    return (unicodedata.category(ch) in ("Mn", "Mc", "Me") or ch in "\u200d\u0e33\u0eb3"
            or "\u1160" <= ch <= "\u11ff" or "\ud7b0" <= ch <= "\ud7ff"
            or "\ufe00" <= ch <= "\ufe0f" or "\U0001f3fb" <= ch <= "\U0001f3ff"
            or "\U000e0020" <= ch <= "\U000e007f" or "\U000e0100" <= ch <= "\U000e01ef")


def _regional(ch: str) -> bool:
    return "\U0001f1e6" <= ch <= "\U0001f1ff"


def shown_boundary(text: str, end: int) -> int:
    """The last place at or before `end` that cuts no character as shown in two: not
    before a mark or within an emoji sequence, not after a joiner or a virama (a
    conjunct of Indic scripts), not between a flag's two letters. Cut by code point, a
    summary ended on a family emoji's dangling joiner, an "é" without its accent (another
    French word) or half a flag (an exploratory probe). 0 when the whole of text[:end]
    is one such character."""
    while 0 < end < len(text) and (_joins_previous(text[end]) or text[end - 1] == "\u200d"
                                   or text[end - 1:end + 1] == "\r\n"
                                   or unicodedata.combining(text[end - 1]) == 9):
        end -= 1
    if 0 < end < len(text) and _regional(text[end]):
        run = 0
        while run < end and _regional(text[end - 1 - run]):
            run += 1
        end -= run % 2
    return end


def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, at a word boundary when one is near,
    never inside a character as shown (`shown_boundary`)."""
    if len(text) <= limit:
        return text
    if limit <= 1:
        return text[:limit]
    # A single shown character longer than the limit (a run of stacked marks) is cut.
    cut = text[: shown_boundary(text, limit - 1) or limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


_HAS_DIGIT = re.compile(r"\d")


def normalise_sentence(sentence: str) -> str:
    """A key under which two spellings of one sentence compare equal: letter case, any
    run of white space (a no-break space too) and composed or decomposed accents, as
    search's collapse of duplicates reads them (three spellings of "Zoë moved to
    Paris." had stayed three lines of one summary). The case of a word holding a digit
    counts: "AbC9xQ" and "abc9xq" are two tokens, and the newer was folded away as the
    older's copy (an exploratory probe)."""
    return " ".join(word if _HAS_DIGIT.search(word) else word.casefold()
                    for word in unicodedata.normalize("NFC", sentence).split())
