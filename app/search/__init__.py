"""Search: the hybrid retrieval pipeline (pure stages here; the service adds retrieval)."""

from app.search.pipeline import PipelineConfig, SearchPipeline, build_stages
from app.search.types import Candidate, QueryAnalysis, QueryStyle, SearchContext

__all__ = [
    "Candidate",
    "PipelineConfig",
    "QueryAnalysis",
    "QueryStyle",
    "SearchContext",
    "SearchPipeline",
    "build_stages",
]
