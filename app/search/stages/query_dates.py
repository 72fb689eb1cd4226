"""Finds the calendar days a query names ("on 8 May 2023", "May 8, 2023", "2023-05-08").

Only whole dates, day, month and year: "in May" or "last Tuesday" name no one day, and a
day without a year would have to guess which. Month names in full or abbreviated, any
case, with or without an ordinal suffix or "of"; a date that does not exist (31 April)
is no date.
"""

from __future__ import annotations

import contextlib
import re
from datetime import date

_MONTHS = {
    name: number
    for number, names in enumerate((
        ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"),
        ("may",), ("june", "jun"), ("july", "jul"), ("august", "aug"),
        ("september", "sep", "sept"), ("october", "oct"), ("november", "nov"),
        ("december", "dec"),
    ), 1)
    for name in names
}
_MONTH = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(\d{4})"

_DAY_MONTH_YEAR = re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", re.IGNORECASE)
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.IGNORECASE)
# Also the date of an ISO timestamp ("2023-05-08T10:00"), whose "T" is no word boundary.
_ISO = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})(?:\b|(?=T\d))")


def _month(name: str) -> int | None:
    # Unicode's case-insensitive matching also takes letters whose lower case is no ASCII
    # letter for one (a long s for "s", a dotted capital I for "i"): those name no month here.
    return _MONTHS.get(name.lower())


def query_dates(text: str) -> tuple[date, ...]:
    """The days `text` names, in the order it names them, each once."""
    found: list[tuple[int, date]] = []

    def add(position: int, year: str, month: int | None, day: str) -> None:
        if month is None:
            return
        with contextlib.suppress(ValueError):  # a day the month does not have
            found.append((position, date(int(year), month, int(day))))

    for m in _DAY_MONTH_YEAR.finditer(text):
        add(m.start(), m.group(3), _month(m.group(2)), m.group(1))
    for m in _MONTH_DAY_YEAR.finditer(text):
        add(m.start(), m.group(3), _month(m.group(1)), m.group(2))
    for m in _ISO.finditer(text):
        add(m.start(), m.group(1), int(m.group(2)), m.group(3))
    return tuple(dict.fromkeys(d for _, d in sorted(found)))
