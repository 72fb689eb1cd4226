"""Decides whether a query asks for a summary ("summary") or for something specific ("regular").

The rules look for a *request to summarise*, not for summary words: "what is
the summary judgment standard" or "where is the recap tool documented?" use
the words in another sense and stay `regular`. Every rule is a regular
expression over normalised text (NFKC, lower case, straight quotes, every
spelling of tl;dr folded to "tldr", whitespace collapsed), tried at the start
of each clause (clauses split at . ! ? ; : , and dashes), so "Thanks! Now
summarise our chat" is found while a summary noun deep inside a question is not.

The rules, by name (see `_RULES`):

- `summarise_verb`: an imperative summarise / recap / sum up / tl;dr,
  optionally after a polite lead-in ("hey, could you please ...",
  "I'd like you to ...", "let's ..."). Ambiguous words (recap, sum up) must be
  followed by what such a request takes (the, our, what, yesterday, of, end of
  clause ...) or by a short topic closing the clause ("recap Project Falcon",
  "tl;dr falcon please"; no auxiliary or negation in it), so "recap tool is
  broken" or "sum up the invoice totals" do not count.
- `catch_up`: catch me up, fill me in, bring/get me up to speed, brief me.
- `request_noun`: a request verb + a summary noun: "give me a quick recap of",
  "can I get an overview", "I'd love the tl;dr". The noun must end the clause
  or be followed by of / for / on / about / from / please ..., which is what
  separates "a summary of X" from "summary judgment" or "summary statistics".
- `noun_phrase`: the whole clause is a summary noun phrase: "summary of
  yesterday", "quick recap please", "key points of our conversation". No
  leading "the", so a statement like "the summary of X was wrong" is not one.
- `topic_noun`: a short topic, then a summary noun, ending the clause: "Project
  Falcon summary", "the Q3 overview"; not after a question word or a subject
  pronoun, and no determiner after its first word ("I read the recap").
- `what_is_summary`: "what's the gist", "what were the key points of our
  conversation", "what is the summary of the Q3 report" (same noun guard).
- `discussion_recall`: "what did we discuss / talk about / cover", "what were
  we talking about / discussing", "what did Alice and Bob discuss", "what was discussed on
  DATE". Only *discussion* verbs: "what did we decide" asks for one fact.
- `review_conversation`: go over / walk me through / remind me of what we
  discussed or our conversation, meeting, call, session.
- `recall_discussion`: tell me / do you remember / can you recall what we discussed
  (only that object: "do you remember my meeting time" asks for one fact).
- `what_was_conversation_about`: "what was our last session about",
  "what happened in the meeting".
- `how_would_you_summarise`: "how would you sum up ..." (but not "how do I
  summarize a column", which asks how to do something).
- `missed`: "what did I miss", alone or with "while/since ...".
- `tldr_tail`: a statement ending in "tl;dr" ("the Berlin move, tl;dr"), or
  ending in "in a nutshell" / "in brief", unless the clause is itself a
  question ("what does it mean when someone writes tl;dr").

A clause that is only a discourse opener ("in summary", "in short", "tl;dr", "to sum
up", ...) followed by a question ("In summary, what is Alice's wifi password?") asks
that question: the opener is how the asker talks, not what they ask for, and the later
clauses decide. Alone, or before a topic ("TL;DR: the move to Berlin"), it still asks
for a summary.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

from app.search.stages.query_dates import query_dates
from app.search.stages.query_identifiers import query_identifiers
from app.search.types import QueryAnalysis, QueryStyle

# --- normalisation ---------------------------------------------------------------------------

_QUOTES: Final = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"'})
_TLDR: Final = re.compile(r"\bt\.?\s?l\.?\s?[;:,\-\s]?\s?d\.?\s?r\b\.?")
_SPACES: Final = re.compile(r"\s+")
_CLAUSE_SPLIT: Final = re.compile(r"[.!?;:]+(?:\s+|$)|,\s*|\s+[-\u2013\u2014]+\s+|\n+")
_CLAUSE_TRIM: Final = " \"'()[]{}*_`<>-\u2013\u2014"


def normalize(text: str) -> str:
    t = unicodedata.normalize("NFKC", text).translate(_QUOTES).lower()
    t = _TLDR.sub("tldr", t)
    return _SPACES.sub(" ", t).strip()


def _clauses(normalized: str) -> list[str]:
    parts = (p.strip(_CLAUSE_TRIM) for p in _CLAUSE_SPLIT.split(normalized))
    return [p for p in parts if p]


# --- vocabulary ------------------------------------------------------------------------------

_INTERJ_WORDS = ("hey", "hi", "hello", "ok", "okay", "so", "well", "alright", "all right",
                 "right", "now", "and", "also", "then", "thanks", "thank you", "great", "cool",
                 "quick question", "one more thing", "btw", "anyway", "actually")
_ADVERB_WORDS = ("please", "pls", "plz", "kindly", "just", "quickly", "briefly", "now", "again")
_INTERJ = rf"(?:(?:{'|'.join(_INTERJ_WORDS)})\s+)*"
_ADVERB = rf"(?:(?:{'|'.join(_ADVERB_WORDS)})\s+)*"
# Interjections and adverbs in any order, each word once: written as INTERJ* ADVERB*
# (and a second ADVERB* when no modal came between), a run of a word two of those stars
# take ("now now now ...") could be split between them in ~n^3 ways, and the engine tried
# each before failing (a 4 KB query held the event loop 105 s; an exploratory probe).
_OPENING = rf"(?:(?:{'|'.join(dict.fromkeys(_INTERJ_WORDS + _ADVERB_WORDS))})\s+)*"
_MODAL = (
    r"(?:(?:can|could|would|will)\s+(?:you|u)\s+|"
    r"(?:i|we)\s*(?:'d|would)?\s+(?:like|love|want|need|wanna)\s+(?:you\s+)?to\s+|"
    r"(?:i|we)\s+need\s+(?:you\s+)?to\s+|help\s+(?:me|us)\s+|let'?s\s+|let\s+us\s+)"
)
# A polite or indirect opening of a request; anchored at the clause start.
_LEAD = rf"^{_OPENING}(?:{_MODAL}{_ADVERB})?"

_DET = r"(?:(?:a|an|the|some|my|our|your|this|that)\s+)?"
_ADJ = (
    r"(?:(?:quick|brief|short|shorter|concise|high[- ]level|general|overall|rough|full|"
    r"complete|detailed|one[- ](?:line|sentence|paragraph)|bullet(?:ed|[- ]point)?|condensed|"
    r"little|small|fast|simple|basic|final|executive|written|running|weekly|daily|monthly|"
    r"updated|proper|clear|[a-z]+'s)\s+){0,3}"
)
_NOUN = (
    r"(?:summary|summaries|recap|recaps|overview|rundown|run[- ]down|synopsis|gist|tldr|"
    r"digest|roundup|round[- ]up|debrief|summation|recapitulation|highlights|takeaways|"
    r"(?:short|quick|condensed|abridged)\s+version|cliff'?s?\s*notes|"
    r"(?:key|main|major|important|big|top)\s+(?:points|takeaways|topics|themes|ideas|"
    r"highlights|moments|decisions|things))"
)
_AFTER_NOUN = (
    r"(?=\s*$|\s+(?:of|for|on|about|from|regarding|re|covering|between|so far|please|pls|"
    r"to date|until|up to)\b)"
)
# A request verb may also say how it wants the summary: "a recap in bullet points".
_AFTER_REQUESTED_NOUN = (
    r"(?=\s*$|\s+(?:of|for|on|about|from|regarding|re|covering|between|so far|please|pls|"
    r"to date|until|up to|in|with|during|since|after|that|we)\b)"
)
_OBJECT_START = (
    r"(?=\s*$|\s+(?:of|for|on|about|from|regarding|re|covering|between|please|pls|the|a|an|"
    r"our|my|your|his|her|their|this|that|these|those|what|everything|it|all|me|us|today|"
    r"yesterday|tonight|last|earlier|recent|previous|so far|[a-z]+'s)\b)"
)
# Words that make a clause a statement or a question about the thing, not a request to
# summarise it: "recap tool is broken", "the Falcon summary was wrong".
_NOT_A_TOPIC = (
    r"(?:is|are|was|were|be|been|being|am|do|does|did|has|have|had|can|could|will|would|"
    r"should|shall|may|might|must|not|[a-z]+n't|isnt|arent|wasnt|doesnt|didnt|wont|cant)\b"
)
_TOPIC_WORD = rf"(?!{_NOT_A_TOPIC})[a-z0-9][\w'&.+-]*"
_PRONOUN = r"(?:i|we|you|he|she|they|it|someone|somebody|nobody|everyone)"
_DETERMINER = r"(?:the|a|an|this|that|these|those|my|our|your|his|her|their|its)"
# A short topic closing the clause, as an object: "recap Project Falcon", "tl;dr falcon
# please", "sum up project falcon for me".
_SHORT_TOPIC = (
    rf"(?=\s+{_TOPIC_WORD}(?:\s+{_TOPIC_WORD}){{0,3}}"
    r"(?:\s+(?:please|pls|for\s+(?:me|us)))?\s*$)"
)
_ARITHMETIC = (
    r"(?!\s+(?:the\s+|these\s+|those\s+|all\s+(?:the\s+)?)?(?:[a-z0-9]+\s+)?"
    r"(?:numbers|totals?|amounts?|values|"
    r"costs?|columns?|rows|figures|expenses|prices|scores|hours|digits|points)\b)"
)
_SUBJECT = (
    r"(?:we|you\s+and\s+(?:i|me)|i\s+and\s+you|me\s+and\s+you|"
    r"[a-z]+\s+and\s+(?:i|me|[a-z]+))"
)
_DISCUSS = (
    r"(?:discuss|talk\s+(?:about|over|through)|chat\s+about|cover|go\s+(?:over|through)|"
    r"speak\s+(?:about|of)|touch\s+on)"
)
_DISCUSSED = (
    r"(?:discussed|talked\s+(?:about|over|through)|chatted\s+about|covered|"
    r"went\s+(?:over|through)|gone\s+(?:over|through)|spoke\s+(?:about|of)|"
    r"spoken\s+(?:about|of)|touched\s+on|been\s+(?:discussing|talking\s+about|"
    r"chatting\s+about|covering))"
)
_CONVO_NOUN = (
    r"(?:conversations?|discussions?|chats?|talks?|sessions?|calls?|meetings?|exchanges?|"
    r"threads?|messages|catch-?ups?|catch up|stand-?ups?|syncs?)\b"
)
_CONVO_DET = (
    r"(?:(?:the|our|my|this|that|these|those|today's|yesterday's|last\s+week's|[a-z]+'s)\s+)?"
    r"(?:(?:last|previous|recent|earlier|latest|first|whole|entire|full|most\s+recent|other)\s+)*"
    r"(?:[a-z]+\s+)?"
)
_WHAT_WE_DISCUSSED = (
    rf"(?:what|everything|all(?:\s+that)?|the\s+(?:stuff|things|topics)(?:\s+that)?)\s+"
    rf"{_SUBJECT}\s+(?:have\s+|had\s+)?(?:just\s+|already\s+)?{_DISCUSSED}"
)
_CONVO_OBJECT = rf"(?:{_WHAT_WE_DISCUSSED}|{_CONVO_DET}{_CONVO_NOUN})"
_QUESTION_START = (
    r"^(?:what|how|why|who|whom|where|when|which|does|do|did|is|are|was|can|could|should)\b"
)

# --- rules -----------------------------------------------------------------------------------

_RULES: Final[tuple[tuple[str, re.Pattern[str]], ...]] = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        (
            "summarise_verb",
            rf"{_LEAD}(?:summari[sz]e\b|(?:recap|recapitulate|tldr)\b"
            rf"(?:{_OBJECT_START}|{_SHORT_TOPIC})|"
            rf"sum\s+(?:(?:(?:it|this|that|things|everything)(?:\s+all)?|"
            rf"all\s+(?:of\s+)?(?:it|this|that))\s+)?up\b"
            rf"{_ARITHMETIC}(?:{_OBJECT_START}|{_SHORT_TOPIC})|"
            rf"(?:condense|boil\s+down)\s+{_CONVO_OBJECT})",
        ),
        (
            "catch_up",
            rf"{_LEAD}(?:catch\s+(?:me|us)\s+up|fill\s+(?:me|us)\s+in|"
            rf"(?:bring|get)\s+(?:me|us)\s+up\s+to\s+speed|(?:de)?brief\s+(?:me|us))\b",
        ),
        (
            "request_noun",
            rf"{_LEAD}(?:(?:i|we)\s*(?:'d|would)?\s+|(?:can|could|may)\s+(?:i|we)\s+|"
            rf"let\s+(?:me|us)\s+)?"
            rf"(?:give|get|show|send|write|make|provide|produce|prepare|create|draft|generate|"
            rf"share|do|put\s+together|pull\s+together|compile|need|want|like|love|have|see|"
            rf"could\s+use)\s+(?:me\s+|us\s+)?{_DET}{_ADJ}{_NOUN}{_AFTER_REQUESTED_NOUN}",
        ),
        ("noun_phrase",
         rf"^{_OPENING}(?:(?:a|an|any)\s+)?{_ADJ}{_NOUN}{_AFTER_NOUN}"),
        (
            # "Project Falcon summary", "the Q3 overview": a topic, then the noun, ending
            # the clause. Not a sentence about one: no subject pronoun first, and no
            # determiner after the first word ("I read the recap", "Bob sent a summary").
            "topic_noun",
            rf"^{_INTERJ}(?!{_QUESTION_START[1:]}|{_PRONOUN}\b){_TOPIC_WORD}\s+"
            rf"(?:(?!{_DETERMINER}\b){_TOPIC_WORD}\s+){{0,3}}{_NOUN}\s*(?:please|pls)?$",
        ),
        (
            "what_is_summary",
            rf"^{_INTERJ}what(?:'s|s|\s+is|\s+was|\s+are|\s+were|\s+would\s+be)\s+"
            rf"{_DET}{_ADJ}{_NOUN}{_AFTER_NOUN}",
        ),
        (
            "discussion_recall",
            rf"^{_INTERJ}(?:what|which\s+(?:topics|things|subjects)|"
            rf"what\s+(?:topics|things|subjects|stuff|else))\s+"
            rf"(?:(?:did|do|have|had)\s+{_SUBJECT}\s+"
            rf"(?:just\s+|already\s+|recently\s+|previously\s+|last\s+|all\s+|ever\s+)?"
            rf"(?:{_DISCUSS}|{_DISCUSSED})\b|"
            rf"(?:were|are)\s+{_SUBJECT}\s+(?:just\s+)?"
            rf"(?:(?:talking|chatting)\s+about|discussing|covering|going\s+over)\b|"
            rf"(?:was|were|has\s+been|have\s+been|had\s+been|got)\s+"
            rf"(?:discussed|talked\s+about|covered|gone\s+over)\b)",
        ),
        (
            "review_conversation",
            rf"{_LEAD}(?:(?:go|run|walk\s+(?:me|us)|take\s+(?:me|us)|talk\s+(?:me|us))\s+"
            rf"(?:back\s+)?(?:over|through)|review|revisit|recount|outline|list|"
            rf"remind\s+(?:me|us)(?:\s+(?:of|about))?)\s+{_CONVO_OBJECT}",
        ),
        (
            # Only before what was discussed: "do you remember my meeting time" or "tell
            # me about the meeting tomorrow" ask for one fact.
            "recall_discussion",
            rf"{_LEAD}(?:tell\s+(?:me|us)|(?:do|did|can|could)\s+(?:you|u)\s+(?:still\s+)?"
            rf"(?:remember|recall)|remember|recall)\s+{_WHAT_WE_DISCUSSED}",
        ),
        (
            "what_was_conversation_about",
            rf"^{_INTERJ}what\s+(?:(?:was|were)\s+{_CONVO_DET}{_CONVO_NOUN}.*\babout\s*$|"
            rf"happened\s+(?:in|during|at)\s+{_CONVO_DET}{_CONVO_NOUN})",
        ),
        (
            "how_would_you_summarise",
            rf"^{_INTERJ}how\s+would\s+(?:you|u)\s+(?:summari[sz]e|sum\s+up|recap|"
            rf"describe\s+{_CONVO_OBJECT})",
        ),
        (
            "missed",
            r"^what\s+(?:did|have)\s+(?:i|we)\s+miss(?:ed)?\s*(?:$|while\b|since\b|"
            r"when\s+i\s+was\b)",
        ),
    )
)
# A whole clause that may only open what follows (see the module docstring).
_OPENER: Final = re.compile(
    r"^(?:(?:so|and|ok|okay|well|anyway)\s+)?(?:in\s+(?:summary|short|brief|sum|a\s+nutshell|"
    r"conclusion|a\s+word)|to\s+(?:sum\s+(?:it\s+)?up|summari[sz]e|recap|conclude)|"
    r"summing\s+up|tldr|overall|bottom\s+line|long\s+story\s+short)$")
_TAIL: Final = re.compile(r"(?:\btldr|\bin\s+a\s+nutshell|\bin\s+brief)\s*(?:please|pls)?$")
_QUESTION: Final = re.compile(_QUESTION_START)


# The rules read a clause's first words only: a request to summarise says so at its start
# and ends soon after, and each rule's work is then bounded whatever a 4 KB query repeats.
# A clause cut short ends in an ellipsis, so no rule takes it for ended where it was not.
_CLAUSE_WORDS: Final = 48


def _opening_words(clause: str) -> str:
    words = clause.split(" ", _CLAUSE_WORDS)
    return clause if len(words) <= _CLAUSE_WORDS else " ".join(words[:_CLAUSE_WORDS]) + " \u2026"


def matching_rule(text: str) -> str | None:
    """The name of the first rule that finds a summarisation request in `text`, or None."""
    normalized = normalize(text)
    clauses = _clauses(normalized)
    for i, clause in enumerate(clauses):
        if _OPENER.search(clause) and _asks_after(clauses[i + 1:], normalized):
            continue
        opening = _opening_words(clause)
        for name, pattern in _RULES:
            if pattern.search(opening):
                return name
        if _TAIL.search(clause) and not _QUESTION.search(clause):
            return "tldr_tail"
    return None


def _asks_after(later: list[str], normalized: str) -> bool:
    """A question follows: a later clause starts as one, or the text ends with "?"."""
    return bool(later) and (normalized.endswith("?")
                            or any(_QUESTION.search(clause) for clause in later))


def classify_query_style(text: str) -> QueryStyle:
    return "summary" if matching_rule(text) is not None else "regular"


def analyze_query(text: str, embedding: tuple[float, ...] | None = None) -> QueryAnalysis:
    """The query analysis stage minus the embedding call, which the service makes (it is I/O).

    The days (and identifiers) are read from the text's compatibility normal form, as the
    classifier reads its words: a date in full-width digits and letters, as a CJK input
    method types it, is a date. Given that form, the classifier's own normalising finds
    nothing left to do."""
    compatible = unicodedata.normalize("NFKC", text)
    return QueryAnalysis(text=text, style=classify_query_style(compatible),
                         embedding=embedding, dates=query_dates(compatible),
                         identifiers=query_identifiers(compatible))
