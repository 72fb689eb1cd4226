"""The composite, the request configs and the registry: named strategies end to end."""

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, get_args

import pytest
from pydantic import TypeAdapter, ValidationError

from app.consolidation.composite import Composite, GroupOutcome
from app.consolidation.config import OpConfig, SelectorConfig, SimilarityClusterConfig
from app.consolidation.ops import Concatenate, DensityRouting, LLMSynthesis, OpError
from app.consolidation.registry import OPS, SELECTORS, STRATEGIES, build_composition
from app.consolidation.selectors import HighestRelevance, SimilarityCluster
from app.consolidation.types import NO_SCOPE, Entry, OpContext, OpResult, Scope
from tests.fakes.llm_server import FakeLLM, llm_error

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def entry(n: int, category: str, content: str, importance: float | None = 0.5) -> Entry:
    return Entry(
        id=uuid.UUID(int=n),
        content=content,
        category=category,
        importance=importance,
        created_at=T0 + timedelta(minutes=n),
    )


def uid(*ns: int) -> tuple[uuid.UUID, ...]:
    return tuple(uuid.UUID(int=n) for n in ns)


def summary(outcome: GroupOutcome) -> tuple[str, int | None, tuple[int, ...], str, str | None]:
    """(category, kept, represented, text, mode) of a successful outcome."""
    assert outcome.result is not None, outcome.error
    kept = outcome.group.kept.id.int if outcome.group.kept else None
    represented = tuple(i.int for i in outcome.result.represented_ids)
    return (outcome.group.category, kept, represented, outcome.result.summary, outcome.result.mode)


ENTRIES = [
    entry(1, "trips", "Alice flies to Lisbon on 12 June.", 0.4),
    entry(2, "trips", "Hotel booked at Casa Azul for 3 nights.", 0.9),  # kept
    entry(3, "trips", "The flight number is TP 1234.", 0.2),
    entry(4, "mood", "The user felt tired after the long week.", 0.5),
    entry(5, "mood", "It was a slow and quiet day.", None),
    entry(6, "mood", "They seemed happier in the evening.", 0.8),  # kept
    entry(7, "mood", "Nothing much happened today at all.", 0.1),
    entry(8, "food", "Alice loves sushi.", 0.5),  # 2 < threshold: untouched
    entry(9, "food", "Bob is vegetarian.", 0.5),
]


# named strategies, golden ---------------------------------------------------------------


async def test_simple_strategy_golden() -> None:
    composition = build_composition("simple")

    outcomes = await composition.composite.run(ENTRIES, OpContext())

    assert not composition.requires_llm
    assert [summary(o) for o in outcomes] == [
        (
            "mood",
            6,
            (4, 5, 7),
            "- The user felt tired after the long week.\n"
            "- It was a slow and quiet day.\n"
            "- Nothing much happened today at all.",
            "concatenate",
        ),
        (
            "trips",
            2,
            (1, 3),
            "- Alice flies to Lisbon on 12 June.\n- The flight number is TP 1234.",
            "concatenate",
        ),
    ]


async def test_llm_strategy_golden() -> None:
    composition = build_composition("llm")
    llm = FakeLLM()

    outcomes = await composition.composite.run(ENTRIES, OpContext(llm=llm))

    assert composition.requires_llm
    assert [summary(o) for o in outcomes] == [
        (
            "mood",
            6,
            (4, 5, 7),
            "Summary: The user felt tired after the long week. It was a slow and quiet day. "
            "Nothing much happened today at all.",
            "llm_synthesis",
        ),
        (
            "trips",
            2,
            (1, 3),
            "Summary: Alice flies to Lisbon on 12 June. The flight number is TP 1234.",
            "llm_synthesis",
        ),
    ]
    assert len(llm.calls) == 2


async def test_llm_strategy_falls_back_per_group() -> None:
    composition = build_composition("llm")
    # Both groups' calls time out: each group is concatenated on its own.
    llm = FakeLLM.scripted([llm_error("llm_timeout"), llm_error("llm_timeout")])

    outcomes = await composition.composite.run(ENTRIES, OpContext(llm=llm))

    assert [(summary(o)[4], o.result and o.result.detail) for o in outcomes] == [
        ("fallback:concatenate", "llm_timeout"),
        ("fallback:concatenate", "llm_timeout"),
    ]
    assert summary(outcomes[1])[3] == (
        "- Alice flies to Lisbon on 12 June.\n- The flight number is TP 1234."
    )


async def test_dual_mode_strategy_golden() -> None:
    composition = build_composition("dual_mode")

    outcomes = await composition.composite.run(ENTRIES, OpContext(llm=FakeLLM()))

    assert composition.requires_llm
    assert [summary(o) for o in outcomes] == [
        (
            "mood",
            6,
            (4, 5, 7),
            "- Summary: The user felt tired after the long week.\n"
            "- Summary: It was a slow and quiet day.\n"
            "- Summary: Nothing much happened today at all.",
            "sparse:abstractive",
        ),
        (
            "trips",
            2,
            (1, 3),
            "- Alice flies to Lisbon on 12 June.\n- The flight number is TP 1234.",
            "dense:extractive",
        ),
    ]
    assert [o.result.detail for o in outcomes if o.result] == ["1/3 dense", "2/2 dense"]


async def test_explicit_selector_and_op_override_the_strategy() -> None:
    composition = build_composition(
        "llm",
        selector=TypeAdapter(SelectorConfig).validate_python({"name": "highest_relevance"}),
        op=TypeAdapter(OpConfig).validate_python({"name": "extractive", "max_chars": 500}),
        group_threshold=2,
    )

    outcomes = await composition.composite.run(ENTRIES, OpContext())

    assert not composition.requires_llm
    assert composition.selector_config.group_threshold == 2
    assert [summary(o)[:3] for o in outcomes] == [
        ("food", 9, (8,)),
        ("mood", 6, (4, 5, 7)),
        ("trips", 2, (1, 3)),
    ]
    assert summary(outcomes[0])[3:] == ("- Alice loves sushi.", "extractive")


def test_selector_config_threshold_wins_over_the_request_threshold() -> None:
    config = SimilarityClusterConfig(
        name="similarity_cluster", max_distance=0.05, group_threshold=5
    )

    composition = build_composition("simple", selector=config, group_threshold=2)

    selector = composition.composite.selector
    assert isinstance(selector, SimilarityCluster)
    assert (selector.group_threshold, selector.max_distance) == (5, 0.05)
    assert composition.selector_config == config


def test_strategies_are_the_documented_compositions() -> None:
    built = {name: build_composition(name).composite for name in STRATEGIES}

    assert {name: (type(c.selector), type(c.op)) for name, c in built.items()} == {
        "simple": (HighestRelevance, Concatenate),
        "llm": (HighestRelevance, LLMSynthesis),
        "dual_mode": (HighestRelevance, DensityRouting),
    }


def test_registry_names_match_the_config_discriminators() -> None:
    def names(union: Any) -> set[str]:
        members = get_args(get_args(union)[0])
        return {get_args(m.model_fields["name"].annotation)[0] for m in members}

    assert set(SELECTORS) == names(SelectorConfig)
    assert set(OPS) == names(OpConfig)


@pytest.mark.parametrize(
    ("name", "requires_llm"),
    [
        ("concatenate", False),
        ("extractive", False),
        ("abstractive", True),
        ("llm_synthesis", True),
        ("density_routing", True),
    ],
)
def test_requires_llm_per_op(name: str, requires_llm: bool) -> None:
    op = TypeAdapter(OpConfig).validate_python({"name": name})

    assert build_composition(op=op).requires_llm is requires_llm


# configs: a bad one names its field -----------------------------------------------------


@pytest.mark.parametrize(
    ("adapter", "payload", "location"),
    [
        (
            OpConfig,
            {"name": "llm_synthesis", "max_prompt_chars": 10},
            ("llm_synthesis", "max_prompt_chars"),
        ),
        (OpConfig, {"name": "concatenate", "max_chars": 100_000}, ("concatenate", "max_chars")),
        (OpConfig, {"name": "concatenate", "bogus": 1}, ("concatenate", "bogus")),
        (OpConfig, {"name": "telepathy"}, ()),
        (OpConfig, {"max_chars": 10}, ()),
        (
            SelectorConfig,
            {"name": "similarity_cluster", "max_distance": 1.5},
            ("similarity_cluster", "max_distance"),
        ),
        (
            SelectorConfig,
            {"name": "similarity_cluster", "max_distance": float("nan")},
            ("similarity_cluster", "max_distance"),
        ),
        (
            SelectorConfig,
            {"name": "highest_relevance", "group_threshold": 1},
            ("highest_relevance", "group_threshold"),
        ),
    ],
)
def test_bad_configs_are_refused_naming_the_field(
    adapter: Any, payload: dict[str, Any], location: tuple[str, ...]
) -> None:
    with pytest.raises(ValidationError) as caught:
        TypeAdapter(adapter).validate_python(payload)
    assert caught.value.errors()[0]["loc"] == location


def test_configs_parse_with_defaults() -> None:
    op = TypeAdapter(OpConfig).validate_json('{"name": "llm_synthesis"}')

    assert op.model_dump() == {
        "name": "llm_synthesis",
        "max_prompt_chars": 12000,
        "max_chars": 4000,
        "fallback_max_chars": 4000,
    }


# composite ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SlowFirstOp:
    """Finishes groups in reverse order, to show outcomes keep plan order anyway."""

    @property
    def requires_llm(self) -> bool:
        return False

    async def consolidate(
        self, to_remove: Sequence[Entry], category: str, context: OpContext
    ) -> OpResult:
        await asyncio.sleep({"food": 0.03, "mood": 0.02, "trips": 0.0}[category])
        return OpResult(category, tuple(e.id for e in to_remove), "slow")


@dataclass(frozen=True)
class RogueOp:
    """Claims the kept entry, or fails, by category."""

    @property
    def requires_llm(self) -> bool:
        return False

    async def consolidate(
        self, to_remove: Sequence[Entry], category: str, context: OpContext
    ) -> OpResult:
        if category == "food":
            raise OpError("op_nothing_fits", "nothing")
        if category == "mood":
            return OpResult("x", uid(6), "rogue")  # 6 is the kept entry
        return OpResult("x" * 50, tuple(e.id for e in to_remove), "rogue")


async def test_outcomes_keep_plan_order_and_report_each_as_it_finishes() -> None:
    composite = Composite(HighestRelevance(group_threshold=2), SlowFirstOp(), max_concurrency=3)
    finished: list[int] = []

    async def on_outcome(index: int, outcome: GroupOutcome) -> None:
        finished.append(index)

    outcomes = await composite.run(ENTRIES, OpContext(), on_outcome)

    assert [o.result.summary for o in outcomes if o.result] == ["food", "mood", "trips"]
    assert finished == [2, 1, 0]


async def test_groups_run_concurrently_under_the_bound() -> None:
    entries = [entry(n, f"c{n % 6}", f"note {n}") for n in range(1, 37)]
    llm = FakeLLM(delay=0.02)
    composite = Composite(HighestRelevance(), LLMSynthesis(), max_concurrency=4)

    outcomes = await composite.run(entries, OpContext(llm=llm))

    assert len(outcomes) == 6
    assert all(o.ok for o in outcomes)
    assert llm.max_in_flight == 4


async def test_failing_or_invalid_groups_are_left_alone_and_the_rest_go_on() -> None:
    composite = Composite(HighestRelevance(group_threshold=2), RogueOp())

    outcomes = await composite.run(ENTRIES, OpContext(max_summary_chars=40))

    assert [(o.group.category, o.error) for o in outcomes] == [
        ("food", "op_nothing_fits"),
        ("mood", "op_invalid_result"),
        ("trips", "op_invalid_result"),
    ]
    assert outcomes[1].error_detail == "the op represented an entry outside the group's to_remove"
    assert outcomes[2].error_detail == "the summary is longer than 40 characters"


async def test_an_llm_error_escaping_an_op_is_captured_per_group() -> None:
    composite = Composite(HighestRelevance(), DensityRouting())
    llm = FakeLLM.scripted([llm_error("llm_connection_error")] * 3)

    outcomes = await composite.run(ENTRIES, OpContext(llm=llm))

    assert [(o.group.category, o.error) for o in outcomes] == [
        ("mood", "llm_connection_error"),
        ("trips", None),
    ]


# scopes --------------------------------------------------------------------------------

ALICE_WORK = Scope(user_id="alice", namespace="work")
ALICE_HOME = Scope(user_id="alice", namespace="home")
BOB = Scope(user_id="bob")


def scoped(scope: Scope, *ns: int) -> list[Entry]:
    return [replace(entry(n, "notes", f"note {n}"), scope=scope) for n in ns]


@pytest.mark.parametrize("selector", [
    HighestRelevance(group_threshold=2),
    SimilarityCluster(group_threshold=2, max_distance=0.0),
])
def test_a_group_never_spans_two_scopes(selector: Any) -> None:
    """One category, four scopes interleaved: a group per scope that has enough entries,
    each with its scope; a scope with too few entries is left whole, however many the
    category holds across scopes."""
    entries = [*scoped(BOB, 1, 5), *scoped(ALICE_WORK, 2, 6, 9), *scoped(ALICE_HOME, 3, 7),
               *scoped(NO_SCOPE, 4, 8), *scoped(Scope(user_id="carol"), 10)]
    entries = [replace(e, embedding=(1.0, 0.0)) for e in entries]
    entries.sort(key=lambda e: e.id)

    groups = Composite(selector, Concatenate()).plan(entries)

    members = [(g.scope, sorted(e.id.int for e in (*g.to_remove, *filter(None, [g.kept]))))
               for g in groups]
    # No scope first, then by user, agent, session, namespace (None before any value).
    assert members == [(NO_SCOPE, [4, 8]), (ALICE_HOME, [3, 7]), (ALICE_WORK, [2, 6, 9]),
                       (BOB, [1, 5])]
    for group in groups:
        assert {e.scope for e in group.to_remove} == {group.scope}


def test_a_run_whose_scopes_each_hold_too_few_entries_plans_nothing() -> None:
    entries = [*scoped(Scope(user_id="dave"), 1, 2), *scoped(Scope(user_id="erin"), 3, 4)]

    assert Composite(HighestRelevance(group_threshold=3), Concatenate()).plan(entries) == []


@pytest.mark.parametrize("selector", [
    HighestRelevance(group_threshold=2),
    SimilarityCluster(group_threshold=2, max_distance=0.0),
])
def test_no_selector_keeps_a_summary_of_its_groups_own_members(selector: Any) -> None:
    """Both selectors would keep the summary (the most important); the plan keeps the
    fact it does not stand for and folds it."""
    facts = [replace(entry(n, "notes", f"note {n}"), embedding=(1.0, 0.0)) for n in (1, 2, 3)]
    summary = replace(entry(9, "notes", "notes 1 and 2"), embedding=(1.0, 0.0),
                      importance=1.0, fact_role="summary",
                      summary_of=(facts[0].id, facts[1].id))

    (group,) = Composite(selector, Concatenate()).plan([*facts, summary])

    assert group.kept == facts[2]
    assert [e.id for e in group.to_remove] == [facts[0].id, facts[1].id, summary.id]


def test_composite_refuses_a_zero_bound() -> None:
    with pytest.raises(ValueError, match="max_concurrency"):
        Composite(HighestRelevance(), Concatenate(), max_concurrency=0)


def test_the_discriminator_is_required_in_the_schema() -> None:
    schema = TypeAdapter(OpConfig).json_schema()

    assert all("name" in s["required"] for s in schema["$defs"].values())
    assert schema["discriminator"]["propertyName"] == "name"
