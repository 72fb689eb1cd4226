"""The Embedder protocol and the registry that builds one from settings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from app.settings import EMBEDDING_DIMENSIONS, Settings

Vector = list[float]


@runtime_checkable
class Embedder(Protocol):
    name: str
    dimensions: int
    # The model whose vectors this embedder gives: stored vectors compare with a query's
    # only when both come from it (app/embedding_space). The same model behind two
    # embedders (the local one, or a server of it behind the OpenAI-compatible API)
    # is one space.
    vector_space: str

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        """One vector per text, in order, unit length, `dimensions` wide."""
        ...

    async def embed_query(self, text: str) -> Vector:
        """A search query's vector, the one `embed` gives the text. A search waits on it,
        so an embedder that queues its work serves it before writes'."""
        ...

    async def aclose(self) -> None: ...


async def load_embedder(embedder: Embedder) -> None:
    """Make it ready to embed: the local model loads its weights (not part of the
    protocol: the other embedders have nothing to load)."""
    load = getattr(embedder, "load", None)
    if load is not None:
        await load()


async def probe_embedder(embedder: Embedder) -> None:
    """At the service's start: an embedder that calls out says now if it cannot (the
    OpenAI-compatible one embeds a text; not part of the protocol, the others have no
    endpoint). `reembed` probes its model itself."""
    probe = getattr(embedder, "probe", None)
    if probe is not None:
        await probe()


def build_embedder(settings: Settings) -> Embedder:
    if settings.embedder == "hash":
        from app.providers.hash_embedder import HashEmbedder

        return HashEmbedder(EMBEDDING_DIMENSIONS)
    if settings.embedder == "openai":
        from app.providers.openai_embedder import OpenAIEmbedder

        return OpenAIEmbedder(
            base_url=settings.openai_base_url,
            model=settings.openai_embedding_model,
            api_key=(
                settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
            ),
            key_header=settings.openai_api_key_header,
            dimensions=EMBEDDING_DIMENSIONS,
            timeout=settings.openai_timeout_seconds,
            max_retries=settings.openai_max_retries,
            batch_size=settings.embedder_batch_size,
        )
    from app.providers.local_embedder import LocalEmbedder

    return LocalEmbedder(
        batch_size=settings.embedder_batch_size,
        threads=settings.embedder_threads,
        pass_chars=settings.embedder_pass_chars,
        query_lane=settings.embedder_query_lane,
        runtime=settings.embedder_runtime,
        cache_dir=settings.model_cache_dir or settings.data_dir / "models",
    )
