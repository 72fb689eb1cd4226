"""The one Settings class: every knob of the service, read from ENGRAM_* variables."""

from __future__ import annotations

import ipaddress
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

EMBEDDING_DIMENSIONS = 384
"""The width of the `embedding` column; every embedder must produce it."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="ENGRAM_", env_file=".env", extra="ignore", frozen=True
    )

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    data_dir: Path = Path(".engram")
    database_url: str | None = None
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    access_log: bool = False

    # Database pool. Two cores serve HTTP, the model and PostgreSQL, so a small
    # pool is enough; more connections only queue inside PostgreSQL.
    db_pool_size: int = Field(default=10, ge=1, le=200)
    db_max_overflow: int = Field(default=10, ge=0, le=200)
    # Embedded PostgreSQL sizing; None means "derive from this machine's memory".
    embedded_shared_buffers_mb: int | None = Field(default=None, ge=16)
    embedded_maintenance_work_mem_mb: int | None = Field(default=None, ge=16)

    embedder: Literal["local", "openai", "hash"] = "local"
    embedder_batch_size: int = Field(default=64, ge=1, le=2048)
    embedder_threads: int = Field(default=1, ge=1, le=64)
    openai_base_url: str = "https://api.openai.com/v1"
    openai_api_key: SecretStr | None = None
    openai_embedding_model: str = "text-embedding-3-small"
    openai_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    openai_max_retries: int = Field(default=2, ge=0, le=10)

    auth_enabled: bool = False

    idempotency_ttl_hours: int = Field(default=24, ge=24, le=24 * 30)

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("postgresql://", "postgresql+asyncpg://", "postgres://")):
            raise ValueError("must be a postgresql:// URL")
        return value

    @field_validator("openai_base_url")
    @classmethod
    def _check_base_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _check_embedder(self) -> Settings:
        # Local OpenAI-compatible servers often need no key; the public one does.
        if (self.embedder == "openai" and self.openai_api_key is None
                and "api.openai.com" in self.openai_base_url):
            raise ValueError(
                "ENGRAM_OPENAI_API_KEY is required when ENGRAM_EMBEDDER=openai "
                "points at api.openai.com"
            )
        return self

    @cached_property
    def async_database_url(self) -> str | None:
        """The URL in the form SQLAlchemy's asyncpg dialect wants."""
        if self.database_url is None:
            return None
        url = self.database_url
        for prefix in ("postgresql://", "postgres://"):
            if url.startswith(prefix):
                return "postgresql+asyncpg://" + url[len(prefix) :]
        return url

    def host_is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def startup_problem(self) -> str | None:
        """A reason the service must not start with these settings, if any."""
        if not self.auth_enabled and not self.host_is_loopback():
            return (
                f"refusing to start: authentication is disabled (ENGRAM_AUTH_ENABLED=false) "
                f"and ENGRAM_HOST={self.host} is not a loopback address, so anyone who can "
                "reach it would act as the default tenant; set ENGRAM_AUTH_ENABLED=true and "
                "create a key with `python -m app keys create --tenant NAME`"
            )
        return None


def format_settings_error(exc: Exception) -> str:
    """One line naming the bad setting, for start-up failures."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors():
            name = ".".join(str(p) for p in err["loc"])
            env = f"ENGRAM_{name.upper()}" if name else "settings"
            parts.append(f"{env}: {err['msg']}")
        return "invalid setting " + "; ".join(parts)
    return f"invalid settings: {exc}"
