"""Builds the search pipeline and the retrieval limits from Settings."""

from __future__ import annotations

from app.search.duplicate_key import duplicate_key
from app.search.pipeline import PipelineConfig, SearchPipeline
from app.search.repository import RetrievalLimits
from app.settings import Settings


def build_pipeline(settings: Settings) -> SearchPipeline:
    return SearchPipeline.from_config(PipelineConfig(
        rrf_k=settings.search_rrf_k,
        vector_weight=settings.search_vector_weight,
        text_weight=settings.search_text_weight,
        identifier_text_weight=settings.search_identifier_text_weight,
        importance_weight=settings.search_importance_weight,
        recency_weight=settings.search_recency_weight,
        recency_half_life_days=settings.search_recency_half_life_days,
        date_weight=settings.search_date_weight,
        summary_coverage_weight=settings.search_summary_coverage_weight,
        summary_coverage_depth=settings.search_summary_coverage_depth,
        summary_downweight_factor=settings.summary_downweight_factor,
        summary_boost_factor=settings.summary_boost_factor,
        min_similarity=settings.min_similarity,
        duplicate_key=duplicate_key if settings.search_collapse_duplicates else None,
    ))


def build_limits(settings: Settings) -> RetrievalLimits:
    return RetrievalLimits(
        vector_candidates=settings.search_vector_candidates,
        hnsw_candidates=settings.search_hnsw_candidates,
        text_candidates=settings.search_text_candidates,
        exact_below=settings.search_exact_below,
        exact_cost_ratio=settings.search_exact_cost_ratio,
        text_match_cap=settings.search_text_match_cap,
        text_max_df=settings.search_text_max_df,
        text_common_share=settings.search_text_common_share,
        text_keyless_share=settings.search_text_keyless_share,
        bm25_k1=settings.search_bm25_k1,
        bm25_b=settings.search_bm25_b,
    )
