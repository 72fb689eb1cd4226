"""The pure stages composed: configuration to stage list, and concrete orderings end to end."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, replace

import pytest

from app.search.pipeline import PipelineConfig, SearchPipeline, build_stages
from app.search.stages.query_style import analyze_query
from app.search.types import Candidate, SearchContext

from .builders import make_candidate, make_context, order

# The orderings below are worked out by hand for these weights, so they are
# pinned here rather than taken from the (tunable) defaults.
CONFIG = PipelineConfig(
    rrf_k=60,
    vector_weight=1.0,
    text_weight=1.0,
    importance_weight=0.02,
    recency_weight=0.01,
    recency_half_life_days=30,
)


def _corpus() -> tuple[Candidate, ...]:
    # The summary sits near everything: first by vector, second by text. The
    # fact that answers the question is the mirror image, so fusion ties them
    # and only the stages after it decide.
    return (
        make_candidate(1, vector_rank=2, text_rank=1, age_days=10),
        make_candidate(2, vector_rank=1, text_rank=2, age_days=1, fact_role="summary"),
        make_candidate(3, vector_rank=3, age_days=0),
        make_candidate(4, text_rank=3, age_days=400, importance=0.9),
    )


def test_defaults_favour_the_vector_list_with_a_small_k() -> None:
    config = PipelineConfig()
    assert (config.rrf_k, config.vector_weight, config.text_weight) == (10.0, 1.0, 0.75)
    assert (config.importance_weight, config.recency_weight) == (0.02, 0.01)
    assert (config.summary_downweight_factor, config.summary_boost_factor) == (0.5, 1.0)


def test_default_pipeline_still_puts_the_fact_first_for_a_regular_query() -> None:
    out = SearchPipeline.from_config(PipelineConfig()).run(make_context(*_corpus()))
    # fused: fact (1/12 + 0.75/11) / (1.75/11) = 0.952381; summary 0.964286, then halved
    assert order(out) == [1, 3, 2, 4]
    summary_first = SearchPipeline.from_config(PipelineConfig()).run(
        make_context(*_corpus(), style="summary")
    )
    assert order(summary_first) == [2, 1, 3, 4]


def test_stages_run_in_the_documented_order() -> None:
    names = [s.name for s in build_stages(PipelineConfig())]
    assert names == ["relevance_floor", "fusion", "scoring", "date_match", "summary_coverage",
                     "summary_downweight", "collapse_duplicates", "cut"]


def test_config_reaches_each_stage() -> None:
    config = PipelineConfig(
        rrf_k=10,
        vector_weight=0.5,
        text_weight=2.0,
        importance_weight=0.3,
        recency_weight=0.4,
        recency_half_life_days=7,
        date_weight=0.2,
        summary_coverage_weight=0.75,
        summary_coverage_depth=3,
        summary_downweight_factor=0.25,
        summary_boost_factor=1.5,
        min_similarity=0.25,
        duplicate_key=_same_payload,
    )
    floor, fusion, scoring, date_match, coverage, downweight, collapse, _ = build_stages(config)
    assert floor.min_similarity == 0.25  # type: ignore[attr-defined]
    assert (fusion.k, fusion.vector_weight, fusion.text_weight) == (10, 0.5, 2.0)  # type: ignore[attr-defined]
    assert (scoring.importance_weight, scoring.recency_weight) == (0.3, 0.4)  # type: ignore[attr-defined]
    assert scoring.recency_half_life_days == 7  # type: ignore[attr-defined]
    assert date_match.weight == 0.2  # type: ignore[attr-defined]
    assert (coverage.weight, coverage.depth) == (0.75, 3)  # type: ignore[attr-defined]
    assert (downweight.factor, downweight.boost) == (0.25, 1.5)  # type: ignore[attr-defined]
    assert collapse.key is _same_payload  # type: ignore[attr-defined]


def _same_payload(c: Candidate) -> Hashable:
    return str(c.payload)


def test_regular_query_puts_the_fact_above_the_summary_that_covers_it() -> None:
    out = SearchPipeline.from_config(CONFIG).run(make_context(*_corpus()))
    # The summary keeps second place only because the rest are weaker still.
    assert order(out) == [1, 2, 3, 4]
    fact, summary, _, _ = out.candidates
    # fused (1/61 + 1/62) / (2/61) = 0.991935, + 0.02 * 0.5, + 0.01 * 0.5 ** (10 / 30)
    assert fact.score == pytest.approx(0.991935 + 0.01 + 0.01 * 0.793701, abs=1e-6)
    # the same fused score, newer, then halved
    assert summary.score == pytest.approx((0.991935 + 0.01 + 0.01 * 0.977160) / 2, abs=1e-6)


def test_summary_query_puts_the_summary_first() -> None:
    out = SearchPipeline.from_config(CONFIG).run(make_context(*_corpus(), style="summary"))
    assert order(out) == [2, 1, 3, 4]
    assert out.candidates[0].explanation["summary_downweight"]["applied"] is False


def test_include_summaries_false_and_top_k_together() -> None:
    out = SearchPipeline.from_config(CONFIG).run(
        make_context(*_corpus(), include_summaries=False, top_k=2)
    )
    assert order(out) == [1, 3]


def test_explain_collects_every_stage_and_the_final_score_matches() -> None:
    out = SearchPipeline.from_config(CONFIG).run(make_context(*_corpus()))
    for c in out.candidates:
        assert list(c.explanation) == ["relevance_floor", "fusion", "scoring", "date_match",
                                       "summary_coverage", "summary_downweight", "cut"]
        assert c.explanation["summary_downweight"]["score"] == pytest.approx(c.score)
    assert out.candidates[1].explanation["summary_downweight"]["applied"] is True


def test_without_explain_results_carry_no_explanation_and_the_same_order() -> None:
    pipeline = SearchPipeline.from_config(CONFIG)
    quiet = pipeline.run(make_context(*_corpus(), explain=False))
    loud = pipeline.run(make_context(*_corpus(), explain=True))
    assert order(quiet) == order(loud)
    assert [c.score for c in quiet.candidates] == pytest.approx([c.score for c in loud.candidates])
    assert all(c.explanation == {} for c in quiet.candidates)


def test_query_analysis_decides_the_down_weight() -> None:
    ctx = replace(make_context(*_corpus()), query=analyze_query("recap our chat about the trip"))
    out = SearchPipeline.from_config(CONFIG).run(ctx)
    assert order(out)[0] == 2


def test_no_candidates_is_an_empty_result_not_an_error() -> None:
    assert SearchPipeline.from_config(CONFIG).run(make_context()).candidates == ()


@dataclass(frozen=True)
class _Tag:
    """A stand-in stage that records that it ran, to check ordering."""

    label: str

    @property
    def name(self) -> str:
        return self.label

    def __call__(self, ctx: SearchContext, /) -> SearchContext:
        return ctx.with_candidates(
            tuple(c.rescored(c.score * 10 + 1, self.name, {"ran": True}) for c in ctx.candidates)
        )


def test_custom_stage_lists_run_in_the_given_order() -> None:
    out = SearchPipeline([_Tag("a"), _Tag("b")]).run(make_context(make_candidate(1)))
    assert out.candidates[0].score == 11.0
    assert list(out.candidates[0].explanation) == ["a", "b"]


def test_duplicate_stage_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unique"):
        SearchPipeline([_Tag("a"), _Tag("a")])
