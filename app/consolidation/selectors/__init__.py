"""Selectors: given candidate entries, decide which go together and which one is kept."""

from app.consolidation.selectors.base import Selector
from app.consolidation.selectors.highest_relevance import HighestRelevance
from app.consolidation.selectors.similarity_cluster import SimilarityCluster

__all__ = ["HighestRelevance", "Selector", "SimilarityCluster"]
