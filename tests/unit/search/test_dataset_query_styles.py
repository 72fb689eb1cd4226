"""The retrieval dataset's questions get the query style their kind implies.

Summary-kind questions must be classified `summary` (or the down-weight would
bury the session summaries they ask for); every other question is `regular`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.search.stages.query_style import classify_query_style, matching_rule

DATASET = Path(__file__).resolve().parents[3] / "bench" / "data" / "conversations.json"


def _questions() -> list[dict[str, str]]:
    return list(json.loads(DATASET.read_text(encoding="utf-8"))["questions"])


def test_dataset_has_every_kind() -> None:
    kinds = {q["kind"] for q in _questions()}
    assert kinds == {"single_fact", "paraphrase", "multi_hop", "temporal", "summary"}


@pytest.mark.parametrize("kind", ["single_fact", "paraphrase", "multi_hop", "temporal"])
def test_regular_questions_are_regular(kind: str) -> None:
    wrong = [
        (q["text"], matching_rule(q["text"]))
        for q in _questions()
        if q["kind"] == kind and classify_query_style(q["text"]) != "regular"
    ]
    assert wrong == []


def test_summary_questions_are_summary_style() -> None:
    wrong = [
        q["text"]
        for q in _questions()
        if q["kind"] == "summary" and classify_query_style(q["text"]) != "summary"
    ]
    assert wrong == []
