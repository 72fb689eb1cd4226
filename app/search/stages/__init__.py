"""The pure stages of the search pipeline, one module each; none touches the database."""

from app.search.stages.base import Stage
from app.search.stages.cut import CutToTopK
from app.search.stages.fusion import ReciprocalRankFusion
from app.search.stages.query_style import analyze_query, classify_query_style, matching_rule
from app.search.stages.scoring import ImportanceRecencyScoring
from app.search.stages.summary_downweight import SummaryDownweight

__all__ = [
    "CutToTopK",
    "ImportanceRecencyScoring",
    "ReciprocalRankFusion",
    "Stage",
    "SummaryDownweight",
    "analyze_query",
    "classify_query_style",
    "matching_rule",
]
