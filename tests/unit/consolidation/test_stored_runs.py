"""Reading runs' stored JSON across versions (app/consolidation/stored.py): fields a
newer version added are set aside to show a run and refuse to run it; anything else that
no longer reads is an error. And every run as this version stores it (a sample of each
kind, tests/fixtures/stored_consolidation_runs.json) must stay readable: a change to the
run models that breaks this needs a migration that rewrites the stored runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from app.consolidation.schemas import ConsolidationComposition, ConsolidationRequest
from app.consolidation.service import to_result
from app.consolidation.stored import (
    NewerRun,
    composition_to_show,
    read_lenient,
    request_to_run,
    request_to_show,
)
from app.models import ConsolidationRun

SAMPLES = Path(__file__).parents[2] / "fixtures" / "stored_consolidation_runs.json"


def samples() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(SAMPLES.read_text())
    return rows


def stored_request(**overrides: Any) -> dict[str, Any]:
    """A request as a run stores it: every field, defaults included, by alias."""
    request = ConsolidationRequest.model_validate({"user_id": "u1", **overrides})
    stored: dict[str, Any] = request.model_dump(mode="json", by_alias=True)
    return stored


def stored_composition() -> dict[str, Any]:
    """The simple strategy's, as the first sample run stored it."""
    composition: dict[str, Any] = samples()[0]["composition"]
    assert composition["strategy"] == "simple"
    return composition


def test_a_request_of_this_version_reads_back_as_it_was() -> None:
    stored = stored_request(tags=["a"], mode="synthesize_only")

    assert request_to_run(stored) == ConsolidationRequest.model_validate(stored)
    assert read_lenient(ConsolidationRequest, stored).unknown == []


def test_a_field_a_newer_version_added_is_left_out_to_show_and_refused_to_run() -> None:
    stored = {**stored_request(), "future_filter": {"x": 1}}

    shown = request_to_show(stored)
    with pytest.raises(NewerRun) as newer:
        request_to_run(stored)

    assert shown == ConsolidationRequest(user_id="u1")
    assert newer.value.fields == ["future_filter"]
    assert str(newer.value) == "future_filter"


def test_a_new_field_inside_a_tagged_selector_or_op_is_found_by_its_path() -> None:
    stored = stored_request(selector={"name": "similarity_cluster"}, op={"name": "extractive"})
    stored["selector"]["future_knob"] = 3
    stored["op"]["future_style"] = "terse"

    read = read_lenient(ConsolidationRequest, stored)

    assert sorted(read.unknown) == ["op.future_style", "selector.future_knob"]
    assert read.value == ConsolidationRequest.model_validate(
        stored_request(selector={"name": "similarity_cluster"}, op={"name": "extractive"}))
    # The stored JSON itself is left as it was.
    assert stored["selector"]["future_knob"] == 3


def test_a_composition_with_a_newer_field_is_shown_without_it() -> None:
    stored = stored_composition()
    stored["selector"]["future_knob"] = 3
    stored["future_part"] = {"name": "x"}

    shown = composition_to_show(stored)

    assert shown == ConsolidationComposition.model_validate(stored_composition())


@pytest.mark.parametrize("mismatch", [
    {"group_threshold": "lots"},  # a type narrowed
    {"strategy": "retired"},  # a value removed
    {"selector": {"name": "retired_selector"}},  # a tagged variant removed (or added)
    {"future_filter": 1, "group_threshold": "lots"},  # new and broken together
])
def test_anything_else_that_no_longer_reads_is_an_error(mismatch: dict[str, Any]) -> None:
    stored = {**stored_request(), **mismatch}

    with pytest.raises(ValidationError):
        request_to_show(stored)
    with pytest.raises(ValidationError):
        request_to_run(stored)


def test_the_samples_cover_each_kind_of_run() -> None:
    rows = samples()
    requests = [row["request"] for row in rows]

    assert {row["composition"]["selector"]["name"] for row in rows} == {
        "highest_relevance", "similarity_cluster"}
    assert {row["composition"]["op"]["name"] for row in rows} == {
        "concatenate", "llm_synthesis", "density_routing", "abstractive", "extractive"}
    assert {row["status"] for row in rows} == {"succeeded", "planned", "failed"}
    assert {(g["outcome"], g["error"]) for row in rows for g in row["groups"]} == {
        ("written", None), ("planned", None), ("failed", "write_failed")}
    assert any(g["mode"] == "fallback:concatenate" for row in rows for g in row["groups"])
    # Groups as recorded before their scope was (shown with none), and since.
    assert {"scope" in g for row in rows for g in row["groups"]} == {True, False}
    assert any(row["reverted_at"] is not None for row in rows)
    assert any(r["async"] for r in requests)
    assert any(r["metadata"] and r["created_after"] and r["tags"] for r in requests)


@pytest.mark.parametrize("index", range(len(samples())))
def test_every_sample_of_a_stored_run_reads_with_this_versions_models(index: int) -> None:
    row = samples()[index]

    shown = to_result(ConsolidationRun(**row))

    assert str(shown.id) == row["id"]
    assert shown.request == request_to_run(row["request"])
    assert read_lenient(ConsolidationRequest, row["request"]).unknown == []
    assert read_lenient(ConsolidationComposition, row["composition"]).unknown == []
    assert len(shown.groups) == len(row["groups"])
    for group, stored in zip(shown.groups, row["groups"], strict=True):
        assert (group.scope.model_dump() if group.scope else None) == stored.get("scope")
