"""Finds the identifiers a query names: invoice and order numbers, ticket and flight codes.

A query holding one ("INV-2024-0042", "order #77777", "LH1234", "555-0100") asks for
the memory that holds that exact string, which the full-text list finds (a rare term
ranks its row first) and the vector list does not: MiniLM embeds "INV-2024-0042" and
"INV-2024-0417" alike, so in a scope of similar rows the one named sat 14th in the
vector list and, first in the text list alone, ranked 3rd-7th (an exploratory probe).
Fusion then weighs the text list more (`ReciprocalRankFusion.identifier_text_weight`).

An identifier is a token of letters and digits, joined by - _ . / or led by #, that
holds a digit and either a letter or at least five digits, and is not a plain quantity
("10am", "3rd", "5km", "2.5"), a year, or a date or a time (the date match's).
"""

from __future__ import annotations

import re
from typing import Final

_TOKEN: Final = re.compile(r"#?[a-z0-9]+(?:[-_./][a-z0-9]+)*")
_HAS_DIGIT: Final = re.compile(r"\d")
_HAS_LETTER: Final = re.compile(r"[a-z]")
# A number with its unit or ordinal suffix, as a question says it: quantities, not names.
_QUANTITY: Final = re.compile(
    r"\d+(?:[.,]\d+)?(?:st|nd|rd|th|am|pm|h|hr|hrs|min|mins|s|ms|k|m|km|kg|g|mg|lb|lbs|"
    r"mb|gb|tb|kb|x|ml|l|mm|cm|ft|in|mph|kph|yo|d|w|y|yrs|years?|days?|pc|pcs|k?w|v)")
_DATE_OR_TIME: Final = re.compile(
    r"\d{1,4}[-./]\d{1,2}(?:[-./]\d{1,4})?|\d{1,2}[.:]\d{2}(?:[.:]\d{2})?")
_MIN_LENGTH: Final = 4
_MIN_DIGITS_ALONE: Final = 5


def query_identifiers(compatible: str) -> tuple[str, ...]:
    """The identifiers in `compatible` (a query in Unicode's compatibility normal form, as
    `analyze_query` reads it once for every rule), lower-cased, in order, each once."""
    found: dict[str, None] = {}
    for match in _TOKEN.finditer(compatible.lower()):
        token = match.group(0)
        if _is_identifier(token):
            found.setdefault(token, None)
    return tuple(found)


def _is_identifier(token: str) -> bool:
    bare = token.lstrip("#")
    if len(bare) < _MIN_LENGTH - token.startswith("#") or not _HAS_DIGIT.search(bare):
        return False
    if _QUANTITY.fullmatch(bare) or _DATE_OR_TIME.fullmatch(bare):
        return False
    if _HAS_LETTER.search(bare):
        return True
    digits = sum(ch.isdigit() for ch in bare)
    # "#123" is an order's number; a bare 4-digit run is most often a year.
    return token.startswith("#") or digits >= _MIN_DIGITS_ALONE
