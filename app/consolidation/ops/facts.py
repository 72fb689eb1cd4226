"""A deterministic heuristic for "this text carries facts": names, numbers, dates.

A token is a fact token when it has a digit (amounts, times, dates, versions, ids),
contains "@" (an address), is capitalised, or is a relative date, number, weekday or
month word in lower case (today, three, friday, ...), as people type in chat. A
capitalised first word is only a name when it is not a common sentence opener ("The",
"We", "After", ...), since every sentence starts with a capital.

The heuristic leans towards "fact": extractive summaries then keep a sentence too many
rather than drop one that mattered.
"""

import re

# The ideographic and full-width marks end a sentence with no blank after them (Chinese,
# Japanese), after the run of them (a full-width "?!") and the closing quote or bracket
# that may follow; a full-width full stop before a digit is a decimal point. A Latin
# mark needs a blank after it, so a decimal point or "e.g." mid-word is no break.
_CJK_END = "\u3002\uff01\uff1f\uff0e"  # ideographic full stop; full-width ! ? .
_CJK_CLOSE = "\u300d\u300f\uff09\u3015\u3011\u201d\u2019\"'"  # corner, paren, quotes
_SENTENCE_BREAK = re.compile(
    rf"(?<=[.!?])\s+|(?<=[{_CJK_END}])(?![{_CJK_CLOSE}{_CJK_END}])(?<!\uff0e(?=\d))\s*"
    rf"|(?<=[{_CJK_END}][{_CJK_CLOSE}])(?![{_CJK_CLOSE}])\s*|\n+")
_CJK_ENDED = re.compile(rf"[{_CJK_END}{_CJK_CLOSE}]\Z")
_DIGIT_OR_AT = re.compile(r"[\d@]")
_TOKEN = re.compile(r"\w+(?:['\u2019.:@/-]\w+)*")

_RELATIVE_DATES = frozenset(
    {"today", "tomorrow", "yesterday", "tonight", "weekend", "midnight", "noon"}
)
# Lower-case words that name a number or a day: "the budget is three hundred dollars",
# "the appointment is on friday" lost their sentence to the first one of their memory
# (an exploratory probe). "one" opens too many sentences, "may" is a verb more often.
_LOWER_FACT_WORDS = _RELATIVE_DATES | frozenset({
    "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty",
    "ninety", "hundred", "thousand", "million", "billion", "dozen",
    "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday",
    "january", "february", "march", "april", "june", "july", "august", "september",
    "october", "november", "december",
})

# Words that begin sentences without naming anything. Lower case.
# fmt: off
_OPENERS = frozenset(
    {
        "a", "an", "the", "this", "that", "these", "those", "there", "here", "it", "its",
        "i", "i'm", "i've", "i'd", "i'll", "me", "my", "mine", "we", "we're", "we've", "our",
        "us", "you", "you're", "your", "he", "he's", "his", "him", "she", "she's", "her",
        "they", "they're", "their", "them", "one", "some", "any", "all", "each", "every",
        "no", "not", "none", "nothing", "something", "everything", "someone", "and", "but",
        "or", "so", "yet", "if", "when", "while", "whenever", "after", "before", "because",
        "since", "although", "though", "as", "at", "by", "for", "from", "in", "into", "of",
        "on", "onto", "to", "with", "without", "about", "over", "under", "also", "then",
        "now", "just", "still", "maybe", "perhaps", "please", "yes", "ok", "okay", "well",
        "what", "which", "who", "whom", "whose", "how", "why", "where", "let", "lets",
        "let's", "do", "does", "did", "is", "are", "was", "were", "be", "been", "being",
        "have", "has", "had", "can", "could", "will", "would", "should", "shall", "may",
        "might", "must", "user", "assistant", "agent",
    }
)
# fmt: on
_PRONOUN_I = frozenset({"I", "I'm", "I've", "I'd", "I'll", "OK"})


def split_sentences(text: str) -> list[str]:
    """Sentences and lines of `text`, stripped; a decimal point is not a break."""
    return [s.strip() for s in _SENTENCE_BREAK.split(text) if s.strip()]


def join_sentences(sentences: list[str]) -> str:
    """Sentences as one line: a blank after a Latin sentence, none after a Chinese or
    Japanese one, which is written without."""
    out = ""
    for sentence in sentences:
        out += sentence if not out or _CJK_ENDED.search(out) else " " + sentence
    return out


def fact_tokens(sentence: str) -> tuple[int, int]:
    """(fact tokens, all tokens) of one sentence."""
    tokens = _TOKEN.findall(sentence)
    facts = sum(1 for i, token in enumerate(tokens) if _is_fact_token(token, i == 0))
    return facts, len(tokens)


def carries_fact(sentence: str) -> bool:
    """Whether to keep `sentence` in an extractive summary. A word written in a script
    without capitals (Chinese, Japanese, Korean, Arabic, Hebrew, Thai, Devanagari, ...)
    cannot show a name by its case, so, leaning towards "fact", it counts as one: before,
    such a memory kept only its first sentence."""
    if _DIGIT_OR_AT.search(sentence):
        return True  # the common case, without tokenising
    return any(_is_fact_token(token, i == 0) or _caseless(token)
               for i, token in enumerate(_TOKEN.findall(sentence)))


def _caseless(token: str) -> bool:
    """A word with a letter that has no upper or lower case: a Chinese or Japanese run
    is one word, Latin names in it included ("私はPythonが好きです"). Georgian too: its
    letters are lower case to Unicode (since 11.0, which added capitals that everyday
    text does not use), so no name in it ever showed, and each memory kept only its
    first sentence."""
    return any(ch.isalpha() and (not (ch.isupper() or ch.islower()) or _georgian(ch))
               for ch in token)


def _georgian(ch: str) -> bool:
    return "\u10d0" <= ch <= "\u10ff" or "\u2d00" <= ch <= "\u2d2f"


def _is_fact_token(token: str, first: bool) -> bool:
    if _DIGIT_OR_AT.search(token):
        return True
    if not token[0].isupper():
        return token.casefold() in _LOWER_FACT_WORDS
    token = token.replace("\u2019", "'")  # typographic apostrophes, as in "We\u2019re"
    if token in _PRONOUN_I:
        return False
    return not (first and token.casefold() in _OPENERS)


def fact_density(text: str) -> float:
    """Fact tokens per token over the whole text; 0 for a text with no tokens."""
    facts = total = 0
    for sentence in split_sentences(text):
        f, t = fact_tokens(sentence)
        facts += f
        total += t
    return facts / total if total else 0.0
