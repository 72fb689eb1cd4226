"""The identifiers a query names, alone."""

from __future__ import annotations

import pytest

from app.search.stages.query_identifiers import query_identifiers
from app.search.stages.query_style import analyze_query


@pytest.mark.parametrize(("query", "found"), [
    ("INV-2024-0042", ("inv-2024-0042",)),
    ("Was invoice INV-2024-0042 paid?", ("inv-2024-0042",)),
    ("what is the status of order #77777", ("#77777",)),
    ("order #123", ("#123",)),
    ("Which gate does LH1234 leave from?", ("lh1234",)),
    ("call 555-0100 or 555-0100 again", ("555-0100",)),
    ("passport number 98765432", ("98765432",)),
    ("upgrade to v2.3.1 and covid-19 notes", ("v2.3.1", "covid-19")),
])
def test_identifiers_are_found(query: str, found: tuple[str, ...]) -> None:
    assert query_identifiers(query) == found


@pytest.mark.parametrize("query", [
    "What did we discuss on 2024-05-08?",
    "meeting at 10am on the 3rd",
    "the 10:30 train",
    "in 2023 we ran 5km",
    "it costs 12.50 or 2.5k",
    "during the 1990s",
    "a 20kg bag and 100ms latency",
    "24/7 support",
    "What language is Arjun learning?",
    "the Q3 plan for 3pm",
])
def test_quantities_dates_years_and_words_are_not_identifiers(query: str) -> None:
    assert query_identifiers(query) == ()


def test_the_query_analysis_carries_them() -> None:
    assert analyze_query("Was INV-2024-0042 paid?").identifiers == ("inv-2024-0042",)
    # Full-width, as an input method types it: read in the compatibility form.
    assert analyze_query("ticket \uff21\uff22\uff23-\uff11\uff12\uff13").identifiers == (
        "abc-123",)
    assert analyze_query("what did we discuss").identifiers == ()
