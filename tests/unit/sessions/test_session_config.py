"""The sessions' registry: which summariser and policies the settings assemble."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest

from app.sessions.config import build_summariser, fold_policy, health_policy
from app.sessions.folding import FoldPolicy
from app.sessions.health import HealthPolicy
from app.sessions.summariser import ExtractiveSummariser, LLMSummariser
from app.settings import Settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("ENGRAM_"):
            monkeypatch.delenv(name)


class AnyLLM:
    async def complete(self, system: str, user: str) -> str:
        return "summary"


def load(**kwargs: object) -> Settings:
    return Settings(_env_file=None, **kwargs)  # type: ignore[call-arg]


def test_auto_uses_the_llm_when_one_is_configured_and_extractive_otherwise() -> None:
    llm = AnyLLM()
    assert isinstance(build_summariser(load(), None), ExtractiveSummariser)
    chosen = build_summariser(load(), llm)
    assert isinstance(chosen, LLMSummariser)
    assert chosen.llm is llm
    assert isinstance(build_summariser(load(session_summariser="extractive"), llm),
                      ExtractiveSummariser)


def test_the_policies_come_from_the_settings() -> None:
    settings = load(session_fold_threshold=8, session_recent_turns=3, session_backlog_max=4,
                    session_degrade_after=5, session_recover_after=6,
                    session_retry_seconds=0.5, session_probe_seconds=9)
    assert fold_policy(settings) == FoldPolicy(threshold=8, recent=3, backlog_max=4)
    assert health_policy(settings) == HealthPolicy(
        degrade_after=5, recover_after=6, retry_delay=timedelta(seconds=0.5),
        probe_interval=timedelta(seconds=9))
