"""The session rules' policies and summariser, assembled from settings."""

from __future__ import annotations

from datetime import timedelta

from app.providers.llm import LLMClient
from app.sessions.folding import FoldPolicy
from app.sessions.health import HealthPolicy
from app.sessions.summariser import ExtractiveSummariser, LLMSummariser, Summariser
from app.settings import Settings


def fold_policy(settings: Settings) -> FoldPolicy:
    return FoldPolicy(threshold=settings.session_fold_threshold,
                      recent=settings.session_recent_turns,
                      backlog_max=settings.session_backlog_max)


def health_policy(settings: Settings) -> HealthPolicy:
    return HealthPolicy(degrade_after=settings.session_degrade_after,
                        recover_after=settings.session_recover_after,
                        retry_delay=timedelta(seconds=settings.session_retry_seconds),
                        probe_interval=timedelta(seconds=settings.session_probe_seconds))


def retention(settings: Settings) -> timedelta | None:
    """How long a session may stay idle before the maintenance round deletes it; None
    when sessions are kept."""
    days = settings.session_retention_days
    return timedelta(days=days) if days > 0 else None


def build_summariser(settings: Settings, llm: LLMClient | None) -> Summariser:
    if settings.session_summariser == "extractive" or llm is None:
        # "llm" without a client cannot happen: the settings refuse it without a URL.
        return ExtractiveSummariser()
    return LLMSummariser(llm)
