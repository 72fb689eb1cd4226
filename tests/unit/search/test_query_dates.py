"""The calendar days a query names, alone: a table of phrasings, and what names no day."""

from __future__ import annotations

from datetime import date

import pytest

from app.search.stages.query_dates import query_dates
from app.search.stages.query_style import analyze_query

MAY_8 = date(2023, 5, 8)


@pytest.mark.parametrize(("text", "days"), [
    ("What did Arjun tell Tom about his lessons on 8 May 2023?", (MAY_8,)),
    ("What did Arjun tell Tom about his dog on May 8, 2023?", (MAY_8,)),
    ("what happened on may 8 2023", (MAY_8,)),
    ("Summarize what we discussed on 8th May 2023.", (MAY_8,)),
    ("the 8th of May, 2023", (MAY_8,)),
    ("on May 8th, 2023", (MAY_8,)),
    ("on 08 May 2023", (MAY_8,)),
    ("notes from 2023-05-08", (MAY_8,)),
    # Found by an exploratory probe: a timestamp's date was not found.
    ("what happened at 2023-05-08T10:00?", (MAY_8,)),
    ("2023-05-08T10:00:00Z", (MAY_8,)),
    ("build 2023-05-08Tx", ()),
    ("notes from 2023-5-8", (MAY_8,)),
    ("on Sept. 3, 2023", (date(2023, 9, 3),)),
    ("on 3 Sep 2023", (date(2023, 9, 3),)),
    ("on 1 DECEMBER 2024", (date(2024, 12, 1),)),
    ("on 29 February 2024", (date(2024, 2, 29),)),
    ("between 1 March 2023 and March 5, 2023", (date(2023, 3, 1), date(2023, 3, 5))),
    ("on 2023-05-08, that is 8 May 2023", (MAY_8,)),
    # No one day named.
    ("What did Arjun say in May 2023?", ()),
    ("what did we talk about on May 8?", ()),
    ("what did we talk about last Tuesday?", ()),
    ("I may have 3 cats by 2025", ()),
    ("on 31 April 2023", ()),
    ("on 29 February 2023", ()),
    ("on 2023-13-01", ()),
    ("the May 2023 report, item 8", ()),
    ("", ()),
    # Letters Unicode's case folding matches to an ASCII one (long s, dotless and dotted
    # i, the Kelvin sign) name no month: they had answered a search 500.
    ("what happened on 8 \u017fep 2023", ()),
    ("on 8 Apr\u0131l 2023", ()),
    ("on 5 Apr\u0130l 2023", ()),
    ("Augu\u017ft 3, 2024", ()),
    ("on 8 \u212a 2023 and 8 May 2023", (MAY_8,)),
])
def test_query_dates(text: str, days: tuple[date, ...]) -> None:
    assert query_dates(text) == days


def test_the_query_analysis_carries_the_days() -> None:
    assert analyze_query("What did Tom say on 8 May 2023?").dates == (MAY_8,)
    assert analyze_query("What did Tom say?").dates == ()


def test_the_query_analysis_reads_a_full_width_date() -> None:
    """A re-probe: a date typed through a CJK input method, digits and letters full-width,
    was no date."""
    wide = "".join(chr(ord(ch) + 0xFEE0) if ch != " " else " " for ch in "8 May 2023")
    assert analyze_query(f"What did Tom say on {wide}?").dates == (MAY_8,)
