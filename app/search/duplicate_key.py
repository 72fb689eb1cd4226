"""When two retrieved memories are the same one for a search's results
(app/search/stages/collapse_duplicates.py): the same text in the same owner's hands.

The text is compared as a reader would: case, runs of blanks, the marks that end or
quote a sentence and composed against decomposed accents do not count; every other
character does, so a changed word, number, sign or date keeps a memory apart ("O+" and
"O-", "C++" and "C", "20%" and "20", "10⁶" and "106" were one result while the
punctuation around a text and Unicode's compatibility forms were ignored: a re-probe). The
owner is the user, agent and namespace, not the session: a fact stated again in a later
session is the same fact, while two users' identical words are two people's. The category
counts as consolidation's groups count it ("Paid 50 dollars." for rent and for the gym
are two payments), and a summary is never the duplicate of a fact.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Hashable
from operator import itemgetter
from typing import cast

from app.memories.repository import ANSWER_KEYS
from app.search.repository import RetrievedRow
from app.search.types import Candidate

_OWNED_TEXT = itemgetter(*(ANSWER_KEYS.index(k) for k in (
    "content", "user_id", "agent_id", "namespace", "category")))
# What ends or quotes a sentence, in ASCII and the common CJK marks; a sign ("+", "-",
# "%", "#"), a bracket or a slash is part of what the text says.
_AROUND = " .,;:!?\"'`\u2026\u201c\u201d\u2018\u2019\u3001\u3002\uff01\uff1f\uff0c"


def normalized_text(content: str) -> str:
    """`content` as a reader compares it; the whole of it when nothing else is left
    (":)" and ":(" are not one text)."""
    text = unicodedata.normalize("NFC", content).lower()
    if "  " in text or not text.isprintable():
        # Runs of blanks, tabs and line breaks.
        text = " ".join(text.split())
    return text.strip(_AROUND) or text


def duplicate_key(candidate: Candidate) -> Hashable:
    row = cast(RetrievedRow, candidate.payload)
    content, user_id, agent_id, namespace, category = _OWNED_TEXT(row.columns)
    return (row.fact_role, user_id, agent_id, namespace, category, normalized_text(content))
