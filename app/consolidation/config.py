"""Request configs for selectors and ops: discriminated unions keyed by `name`.

`name` is required (no default) so the OpenAPI document marks the discriminator as
required, which generated clients need.

Every option has bounds and unknown keys are refused, so a bad config is a 422 naming
the field by construction, and the OpenAPI document lists every selector and op.
"""

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.consolidation.types import MEMORY_CONTENT_MAX_CHARS
from app.validation import INTEGER_ONLY, NUMBER_ONLY, JsonBool

GroupThreshold = Annotated[int, Field(ge=2, le=100_000), INTEGER_ONLY]
SummaryChars = Annotated[int, Field(ge=200, le=MEMORY_CONTENT_MAX_CHARS), INTEGER_ONLY]
Concurrency = Annotated[int, Field(ge=1, le=32), INTEGER_ONLY]


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class HighestRelevanceConfig(_Config):
    """Group by category; keep the most important (then most recent) entry."""

    name: Literal["highest_relevance"]
    group_threshold: GroupThreshold | None = Field(
        default=None, description="Overrides the request's group_threshold when set."
    )


class SimilarityClusterConfig(_Config):
    """Group entries whose embeddings lie within `max_distance` (cosine) of the kept one."""

    name: Literal["similarity_cluster"]
    max_distance: Annotated[float, Field(ge=0.0, le=1.0), NUMBER_ONLY] = 0.15
    by_category: JsonBool = Field(
        default=True, description="Only group entries of the same category."
    )
    group_threshold: GroupThreshold | None = Field(
        default=None, description="Overrides the request's group_threshold when set."
    )


class ConcatenateConfig(_Config):
    """A bullet list of whole entries, oldest first, cut at `max_chars`."""

    name: Literal["concatenate"]
    max_chars: SummaryChars = 4000


class ExtractiveConfig(_Config):
    """The fact-bearing sentences of each entry (no LLM)."""

    name: Literal["extractive"]
    max_chars: SummaryChars = 4000


class AbstractiveConfig(_Config):
    """An LLM summary of each entry, as a bullet list."""

    name: Literal["abstractive"]
    max_chars: SummaryChars = 4000
    max_concurrency: Concurrency = 4


class LLMSynthesisConfig(_Config):
    """One LLM synthesis of the entries that fit `max_prompt_chars`; concatenation on
    LLM failure."""

    name: Literal["llm_synthesis"]
    max_prompt_chars: Annotated[int, Field(ge=1000, le=400_000), INTEGER_ONLY] = 12000
    max_chars: SummaryChars = 4000
    fallback_max_chars: SummaryChars = 4000


class DensityRoutingConfig(_Config):
    """Extractive for fact-dense groups, abstractive for sparse ones, by majority vote."""

    name: Literal["density_routing"]
    dense_threshold: Annotated[float, Field(ge=0.0, le=1.0), NUMBER_ONLY] = Field(
        default=0.15, description="Fact tokens per token for a dense vote."
    )
    max_chars: SummaryChars = 4000
    max_concurrency: Concurrency = 4


SelectorConfig = Annotated[
    HighestRelevanceConfig | SimilarityClusterConfig, Field(discriminator="name")
]
OpConfig = Annotated[
    ConcatenateConfig
    | ExtractiveConfig
    | AbstractiveConfig
    | LLMSynthesisConfig
    | DensityRoutingConfig,
    Field(discriminator="name"),
]
