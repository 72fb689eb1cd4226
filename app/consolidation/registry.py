"""The registry: names to selector and op classes, named strategies, and the builder
that turns a request's strategy and configs into a ready `Composite`."""

from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal, assert_never

from typing_extensions import TypeAliasType

from app.consolidation.composite import Composite
from app.consolidation.config import (
    AbstractiveConfig,
    ConcatenateConfig,
    DensityRoutingConfig,
    ExtractiveConfig,
    HighestRelevanceConfig,
    LLMSynthesisConfig,
    OpConfig,
    SelectorConfig,
    SimilarityClusterConfig,
)
from app.consolidation.ops.abstractive import Abstractive
from app.consolidation.ops.base import Op
from app.consolidation.ops.concatenate import Concatenate
from app.consolidation.ops.density_routing import DensityRouting
from app.consolidation.ops.extractive import Extractive
from app.consolidation.ops.llm_synthesis import LLMSynthesis
from app.consolidation.selectors.base import Selector
from app.consolidation.selectors.highest_relevance import HighestRelevance
from app.consolidation.selectors.similarity_cluster import SimilarityCluster
from app.consolidation.types import Partitioning

# Named, so the OpenAPI document has one schema for it and generated clients one enum.
ConsolidationStrategy = TypeAliasType(
    "ConsolidationStrategy", Literal["simple", "llm", "dual_mode"])

SELECTORS: Final = MappingProxyType[str, type[Selector]](
    {"highest_relevance": HighestRelevance, "similarity_cluster": SimilarityCluster}
)
OPS: Final = MappingProxyType[str, type[Op]](
    {
        "concatenate": Concatenate,
        "extractive": Extractive,
        "abstractive": Abstractive,
        "llm_synthesis": LLMSynthesis,
        "density_routing": DensityRouting,
    }
)
STRATEGIES: Final = MappingProxyType[ConsolidationStrategy, tuple[SelectorConfig, OpConfig]](
    {
        "simple": (
            HighestRelevanceConfig(name="highest_relevance"),
            ConcatenateConfig(name="concatenate"),
        ),
        "llm": (
            HighestRelevanceConfig(name="highest_relevance"),
            LLMSynthesisConfig(name="llm_synthesis"),
        ),
        "dual_mode": (
            HighestRelevanceConfig(name="highest_relevance"),
            DensityRoutingConfig(name="density_routing"),
        ),
    }
)


@dataclass(frozen=True, slots=True)
class Composition:
    """What a run will do: the resolved configs (worth recording with the run) and the
    composite built from them."""

    strategy: ConsolidationStrategy
    selector_config: SelectorConfig
    op_config: OpConfig
    composite: Composite

    @property
    def requires_llm(self) -> bool:
        return self.composite.requires_llm

    @property
    def partitioning(self) -> Partitioning:
        """What any group of the selector needs: its threshold of entries in one scope,
        and in one category unless it groups across them."""
        config = self.selector_config
        threshold = config.group_threshold
        assert threshold is not None  # resolved by build_composition
        match config:
            case HighestRelevanceConfig():
                return Partitioning(threshold, by_category=True)
            case SimilarityClusterConfig():
                return Partitioning(threshold, by_category=config.by_category)
            case _:
                assert_never(config)


def build_composition(
    strategy: ConsolidationStrategy = "simple",
    *,
    selector: SelectorConfig | None = None,
    op: OpConfig | None = None,
    group_threshold: int = 3,
    max_concurrency: int = 4,
) -> Composition:
    """The strategy's selector and op, each replaced by the explicit config when given.

    A selector config's own `group_threshold` wins over the request's; the resolved
    config carries the threshold actually used.
    """
    default_selector, default_op = STRATEGIES[strategy]
    selector_config = resolve_group_threshold(selector or default_selector, group_threshold)
    op_config = op or default_op
    composite = Composite(
        build_selector(selector_config, group_threshold),
        build_op(op_config),
        max_concurrency=max_concurrency,
    )
    return Composition(strategy, selector_config, op_config, composite)


def resolve_group_threshold(config: SelectorConfig, group_threshold: int) -> SelectorConfig:
    if config.group_threshold is not None:
        return config
    return config.model_copy(update={"group_threshold": group_threshold})


def build_selector(config: SelectorConfig, group_threshold: int) -> Selector:
    threshold = config.group_threshold or group_threshold
    match config:
        case HighestRelevanceConfig():
            return HighestRelevance(group_threshold=threshold)
        case SimilarityClusterConfig():
            return SimilarityCluster(
                max_distance=config.max_distance,
                group_threshold=threshold,
                by_category=config.by_category,
            )
        case _:
            assert_never(config)


def build_op(config: OpConfig) -> Op:
    match config:
        case ConcatenateConfig():
            return Concatenate(max_chars=config.max_chars)
        case ExtractiveConfig():
            return Extractive(max_chars=config.max_chars)
        case AbstractiveConfig():
            return Abstractive(max_chars=config.max_chars, max_concurrency=config.max_concurrency)
        case LLMSynthesisConfig():
            return LLMSynthesis(
                max_prompt_chars=config.max_prompt_chars,
                max_chars=config.max_chars,
                fallback_max_chars=config.fallback_max_chars,
            )
        case DensityRoutingConfig():
            return DensityRouting(
                dense_threshold=config.dense_threshold,
                extractive=Extractive(max_chars=config.max_chars),
                abstractive=Abstractive(
                    max_chars=config.max_chars, max_concurrency=config.max_concurrency
                ),
            )
        case _:
            assert_never(config)
