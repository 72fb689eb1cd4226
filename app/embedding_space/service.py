"""The check a start makes on the stored vectors' model, and the re-embedding that moves
them to another one (`python -m app reembed`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from app.embedding_space.repository import EmbeddingSpaceRepository
from app.embedding_space.rules import on_start, reembed_start
from app.providers.embedder import Embedder

log = logging.getLogger("engram.embedding_space")


class VectorSpaceMismatch(RuntimeError):
    """The stored vectors are not the configured embedder's: the service does not start."""


class ServiceRunning(RuntimeError):
    """A command that needs the service stopped (a re-embedding, a restore) was asked
    for while it runs on the database."""


class ModelUnusable(RuntimeError):
    """The new model failed to embed one text before the pass began: nothing changed."""


class PassRunning(ServiceRunning):
    """Another re-embedding or restore is running on the database."""


@asynccontextmanager
async def exclusive_pass(engine: AsyncEngine, what: str) -> AsyncIterator[None]:
    """Hold the database's one re-embedding-or-restore lock for the block, on a connection
    of its own (a crash drops it with the connection); raise PassRunning if another holds
    it. Two passes at once left the vectors of two models mixed under one recorded
    model, and a service started on them."""
    async with engine.connect() as conn:
        holder = await conn.execution_options(isolation_level="AUTOCOMMIT")
        repo = EmbeddingSpaceRepository(holder)
        if not await repo.try_lock_pass():
            raise PassRunning(f"another `reembed` or `restore` is running on this database; "
                              f"let it finish, then {what} again")
        try:
            yield
        finally:
            await repo.unlock_pass()


async def refuse_while_serving(repo: EmbeddingSpaceRepository, why: str) -> None:
    """Raise ServiceRunning, saying `why` it matters, when the service is connected."""
    running = await repo.service_connections()
    if running:
        raise ServiceRunning(f"the service is connected to this database "
                             f"({_named(running)}); stop every replica first, {why}")


def _named(connections: list[tuple[str, int]]) -> str:
    return ", ".join(f"{name} ({count})" for name, count in connections)


async def check_on_start(engine: AsyncEngine, embedder: Embedder) -> None:
    """Record the configured embedder's model, or confirm the stored vectors are its;
    raise VectorSpaceMismatch when they are another model's."""
    configured = embedder.vector_space
    async with engine.begin() as conn:
        repo = EmbeddingSpaceRepository(conn)
        stored = await repo.lock_row()
        has_memories = await repo.has_memories()
        decision = on_start(stored, configured, has_memories)
        if decision.action == "refuse":
            raise VectorSpaceMismatch(decision.reason)
        if decision.action == "record" and has_memories:
            await _check_unrecorded(repo, embedder)
        if decision.action == "adopt" and stored is not None:
            await _refuse_adopting_beside_a_replica(repo, stored.model, configured)
        if decision.action != "keep":
            await repo.record(configured)
            if stored is not None and stored.target_model is not None:
                # A pass left unfinished dropped the vector index; its memories are
                # gone since (else the start is refused), so nothing is left to embed.
                await repo.create_vector_index()
            log.info("stored vectors: %s (%s)", configured,
                     "recorded" if decision.action == "record" else "no memory held another's")


UNRECORDED_SAMPLE = 5
SAME_MODEL_SIMILARITY = 0.9
"""A model embeds a text again to within ~1e-6 of its stored vector (ONNX against torch:
2e-7); another model's vectors sit near 0 (the hash embedder's against the local model's:
0.03)."""


async def _check_unrecorded(repo: EmbeddingSpaceRepository, embedder: Embedder) -> None:
    """Vectors stored before their model was recorded (migration 0021) were taken to be
    the configured embedder's. An upgrade started with another embedder than the old
    version's recorded them as its own, and search by meaning answered at random for
    every old memory, with no word said (an upgrade probe). So some of them are embedded
    again and compared first."""
    rows = await repo.newest_contents(UNRECORDED_SAMPLE)
    if not rows:
        return
    try:
        vectors = await embedder.embed([content for _, content in rows])
    except Exception as exc:
        # Recorded unchecked, the model would be taken as the vectors' for good, and the
        # one that wrote them refused after (a re-probe, with the endpoint down): this
        # start does not go on, and the next one checks again.
        raise VectorSpaceMismatch(
            f"the stored memories' vectors were written before their model was recorded, "
            f"and checking that they are the configured embedder's "
            f"({embedder.vector_space}) needs it to embed {len(rows)} of them again, "
            f"which failed ({exc}); start again once it answers") from exc
    similarity = await repo.mean_similarity([row_id for row_id, _ in rows], vectors)
    # NaN (a zero vector stored) is no match either.
    if similarity is None or not similarity >= SAME_MODEL_SIMILARITY:
        raise VectorSpaceMismatch(
            f"the stored memories' vectors were written before their model was recorded, "
            f"and they are not the configured embedder's ({embedder.vector_space}): "
            f"embedded again, {len(rows)} of them came out at a mean similarity of "
            f"{similarity if similarity is not None else float('nan'):.2f} to what is "
            f"stored. Configure the embedder the earlier "
            f"version ran with, or run `python -m app reembed` to re-embed every memory "
            f"with this one")


ADOPT_WAIT_SECONDS = 1.0
"""How long a start waits for the other connections it sees to go: this process's own
migration connections, just closed, may still show for a moment."""


async def _refuse_adopting_beside_a_replica(repo: EmbeddingSpaceRepository, stored: str,
                                            configured: str) -> None:
    """A replica still serving writes with the recorded model, memories or not: adopted
    beside it, the two wrote vectors of two models under one record, and a search ranked
    the other's at random (an exploratory probe of two replicas). A replica starting at
    the same moment waits for this start's lock, and is not one: it checks once this one
    has committed (a re-probe: two replicas of the same new model refused each other)."""
    deadline = time.monotonic() + ADOPT_WAIT_SECONDS
    while running := await repo.service_connections(unblocked=True):
        if time.monotonic() >= deadline:
            raise VectorSpaceMismatch(
                f"the stored vectors are recorded as {stored}'s, and the service is "
                f"connected to this database ({_named(running)}), writing with it; a start with "
                f"{configured} beside it would mix vectors of two models. Configure the "
                f"embedder of {stored}, or stop every replica, then start with {configured}")
        await asyncio.sleep(0.1)


@dataclass(frozen=True)
class ReembedReport:
    model: str
    # False when the stored vectors were already the model's.
    needed: bool
    embedded: int
    # Rows whose content changed between their read and their write (their writer
    # embedded them).
    skipped: int
    resumed: bool
    seconds: float
    # Of `seconds`, the vector index's build and the table's vacuum at the end.
    index_seconds: float = 0.0


PROBE_TEXT = "Engram checks that the new model embeds before it re-embeds every memory."


async def reembed(engine: AsyncEngine, embedder: Embedder, *, batch_size: int = 256,
                  progress: Callable[[int, int], None] | None = None) -> ReembedReport:
    """Re-embed every memory (every tenant's, archived and expired ones too) with
    `embedder`, a batch per transaction, the position saved with each, so a pass cut
    short goes on where it stopped; then record the model. Refuses while the service
    runs on the database: its writes would embed with the model being replaced, and
    while another pass or a restore does."""
    async with exclusive_pass(engine, "run this reembed"):
        return await _reembed(engine, embedder, batch_size=batch_size, progress=progress)


async def _reembed(engine: AsyncEngine, embedder: Embedder, *, batch_size: int,
                   progress: Callable[[int, int], None] | None) -> ReembedReport:
    started = time.monotonic()
    target = embedder.vector_space
    async with engine.begin() as conn:
        repo = EmbeddingSpaceRepository(conn)
        await refuse_while_serving(
            repo, "or their writes would be embedded with the model being replaced")
        start = reembed_start(await repo.lock_row(), target)
        if not start.needed:
            return ReembedReport(target, False, 0, 0, False, time.monotonic() - started)
        if not start.resumed:
            # A model that cannot embed (a typo in its URL or its name, a wrong key) fails
            # here, with nothing changed: once the pass is begun, no service starts until
            # it is finished, with this model or the old one, every memory re-embedded.
            # One text, under the row's lock, which only another pass or a start reads.
            try:
                await embedder.embed([PROBE_TEXT])
            except Exception as exc:
                said = (str(exc).strip().splitlines() or [""])[0]
                raise ModelUnusable(f"{exc.__class__.__name__}: {said}") from exc
        await repo.begin_target(target, start.after)
        await repo.drop_vector_index()
        total = await repo.count_after(start.after)
    after, embedded, skipped = start.after, 0, 0
    while True:
        async with engine.connect() as conn:
            rows = await EmbeddingSpaceRepository(conn).next_batch(after, batch_size)
        if not rows:
            break
        # Embedded outside a transaction: the model's time holds no locks.
        vectors = await embedder.embed([content for _, content in rows])
        async with engine.begin() as conn:
            repo = EmbeddingSpaceRepository(conn)
            written = await repo.write_vectors(rows, vectors)
            after = rows[-1][0]
            await repo.advance(after)
        embedded += written
        skipped += len(rows) - written
        if progress is not None:
            progress(embedded + skipped, total)
    # Still before the model is recorded: cut short here, a second run builds it. No
    # service runs without it meanwhile: none starts while the pass is unfinished.
    indexing = time.monotonic()
    async with engine.connect() as conn:
        autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await EmbeddingSpaceRepository(autocommit).build_vector_index()
    indexed = time.monotonic() - indexing
    async with engine.begin() as conn:
        await EmbeddingSpaceRepository(conn).record(target)
    return ReembedReport(target, True, embedded, skipped, start.resumed,
                         time.monotonic() - started, indexed)
