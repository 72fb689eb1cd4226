"""Ops: turn one group's entries into one summary text; pure, they write nothing."""

from app.consolidation.ops.abstractive import Abstractive
from app.consolidation.ops.base import Op, OpError
from app.consolidation.ops.concatenate import Concatenate
from app.consolidation.ops.density_routing import DensityRouting
from app.consolidation.ops.extractive import Extractive
from app.consolidation.ops.llm_synthesis import LLMSynthesis

__all__ = [
    "Abstractive",
    "Concatenate",
    "DensityRouting",
    "Extractive",
    "LLMSynthesis",
    "Op",
    "OpError",
]
