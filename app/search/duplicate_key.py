"""When two retrieved memories are the same one for a search's results
(app/search/stages/collapse_duplicates.py): the same text in the same owner's hands.

The text is compared as a reader would: case, runs of blanks, the punctuation around it
and Unicode's compatibility forms (full-width letters, ligatures) do not count, every
other character does, so a changed word, number or date keeps a memory apart. The owner
is the user, agent and namespace, not the session: a fact stated again in a later
session is the same fact, while two users' identical words are two people's. A summary
is never the duplicate of a fact.
"""

from __future__ import annotations

import string
import unicodedata
from collections.abc import Hashable
from operator import itemgetter
from typing import cast

from app.memories.repository import ANSWER_KEYS
from app.search.repository import RetrievedRow
from app.search.types import Candidate

_OWNED_TEXT = itemgetter(*(ANSWER_KEYS.index(k)
                           for k in ("content", "user_id", "agent_id", "namespace")))
# ASCII's and the common CJK sentence marks; inner punctuation ("3.5", "don't") stays.
_AROUND = " " + string.punctuation + "\u3001\u3002\uff01\uff1f\u2026\u201c\u201d\u2018\u2019"


def normalized_text(content: str) -> str:
    text = unicodedata.normalize("NFKC", content).casefold()
    if "  " in text or not text.isprintable():
        # Runs of blanks, tabs and line breaks (NFKC has made the other spaces " ").
        text = " ".join(text.split())
    return text.strip(_AROUND)


def duplicate_key(candidate: Candidate) -> Hashable:
    row = cast(RetrievedRow, candidate.payload)
    content, user_id, agent_id, namespace = _OWNED_TEXT(row.columns)
    return (row.fact_role, user_id, agent_id, namespace, normalized_text(content))
