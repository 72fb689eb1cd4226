"""Builds the ordered list of pure stages from configuration and runs a context through it.

Candidate retrieval (the one stage that needs the database) and the query
embedding (I/O) happen in the service before `SearchPipeline.run`; everything
after them is here, in this fixed order: relevance floor -> fusion -> scoring ->
date match -> summary coverage -> summary down-weight -> collapse of duplicates -> cut
to top_k.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.search.stages.base import Stage
from app.search.stages.collapse_duplicates import CollapseDuplicates, DuplicateKey
from app.search.stages.cut import CutToTopK
from app.search.stages.date_match import DateMatch
from app.search.stages.fusion import ReciprocalRankFusion
from app.search.stages.relevance_floor import RelevanceFloor
from app.search.stages.scoring import ImportanceRecencyScoring
from app.search.stages.summary_coverage import SummaryCoverage
from app.search.stages.summary_downweight import SummaryDownweight
from app.search.types import SearchContext


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    """Every weight of the pure stages; the service builds it from Settings, whose
    values it runs with (rrf_k 2 and text weight 0.5, chosen by bench/retrieval_eval.py's
    sweep against PostgreSQL's own ranking: README, Search). The defaults here are the
    first sweep's, which the unit tests' orderings are written against.

    That first sweep was bench/retrieval_baselines.py (RRF of
    Okapi BM25 and MiniLM over the generated conversations): equal-weight RRF
    with k=60 over 50-deep lists fell below dense retrieval alone, because
    middling ranks in both lists outscored a first place in one. k=10 with the
    text list at 0.75 over lists about top_k deep was within a point of the
    best setting for each index text tried.

    Importance and recency only reorder near-ties: at k=10 the gap between
    first and second place in one list is about 0.05 of the fused score, more
    than the whole recency term (0.01) and half the importance range (0.02).
    A recency weight of 0.05 already cost recall on conversational questions.
    """

    rrf_k: float = 10.0
    vector_weight: float = 1.0
    text_weight: float = 0.75
    identifier_text_weight: float | None = None
    importance_weight: float = 0.02
    recency_weight: float = 0.01
    recency_half_life_days: float = 30.0
    date_weight: float = 0.3
    summary_coverage_weight: float = 1.0
    summary_coverage_depth: int = 2
    summary_downweight_factor: float = 0.5
    summary_boost_factor: float = 1.0
    # -1 keeps every candidate (see RelevanceFloor).
    min_similarity: float = -1.0
    # What makes two candidates one result (app/search/duplicate_key.py); None: nothing
    # is collapsed.
    duplicate_key: DuplicateKey | None = None


def build_stages(config: PipelineConfig) -> tuple[Stage, ...]:
    return (
        RelevanceFloor(min_similarity=config.min_similarity),
        ReciprocalRankFusion(
            k=config.rrf_k, vector_weight=config.vector_weight, text_weight=config.text_weight,
            identifier_text_weight=config.identifier_text_weight,
        ),
        ImportanceRecencyScoring(
            importance_weight=config.importance_weight,
            recency_weight=config.recency_weight,
            recency_half_life_days=config.recency_half_life_days,
        ),
        DateMatch(weight=config.date_weight),
        SummaryCoverage(weight=config.summary_coverage_weight,
                        depth=config.summary_coverage_depth),
        SummaryDownweight(
            factor=config.summary_downweight_factor, boost=config.summary_boost_factor
        ),
        CollapseDuplicates(key=config.duplicate_key),
        CutToTopK(),
    )


class SearchPipeline:
    """Runs stages in order; each gets the context the previous one returned."""

    __slots__ = ("_stages",)

    def __init__(self, stages: Sequence[Stage]) -> None:
        names = [s.name for s in stages]
        if len(set(names)) != len(names):
            # Explanations are keyed by stage name; a duplicate would overwrite one.
            raise ValueError(f"stage names must be unique, got {names}")
        self._stages = tuple(stages)

    @classmethod
    def from_config(cls, config: PipelineConfig) -> SearchPipeline:
        return cls(build_stages(config))

    @property
    def stages(self) -> tuple[Stage, ...]:
        return self._stages

    def run(self, ctx: SearchContext) -> SearchContext:
        for stage in self._stages:
            ctx = stage(ctx)
        return ctx
