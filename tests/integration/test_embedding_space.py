"""The stored vectors' model (app/embedding_space): recorded at the first start, a start
with another model refused while memories hold vectors, and `python -m app reembed`
moving every memory to the configured model, resumable and refused while the service
runs. Each test has a database of its own: the space is one row for a whole database."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import asyncpg
import numpy as np
import pytest
from sqlalchemy import text

from app.db import asyncpg_dsn, create_engine, create_sessionmaker
from app.embedding_space.service import (
    PassRunning,
    ServiceRunning,
    VectorSpaceMismatch,
    check_on_start,
    exclusive_pass,
    reembed,
)
from app.migrate import upgrade_to_head
from app.providers.embedder import Vector
from app.providers.hash_embedder import HashEmbedder
from app.providers.local_embedder import LocalEmbedder
from app.resources import Resources, build_resources
from tests.conftest import TenantKey, create_tenant_key, fresh_database, make_client
from tests.integration.providers.test_openai_embedder import (
    Fail,
    FakeEmbeddingsServer,
    Succeed,
)
from tests.integration.test_cli_and_process import cli

HASH = HashEmbedder.vector_space
LOCAL = LocalEmbedder.vector_space


class OtherModel(HashEmbedder):
    """Another model: the hash vectors of the text reversed, recording what it embeds
    and failing on the call numbered `fail_on` (from 1)."""

    def __init__(self, space: str = "other-model", fail_on: int | None = None) -> None:
        super().__init__(384)
        self.vector_space = space
        self.batches: list[list[str]] = []
        self._fail_on = fail_on

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        self.batches.append(list(texts))
        if len(self.batches) == self._fail_on:
            raise RuntimeError("the embeddings endpoint went away")
        return [self.embed_one(t[::-1]) for t in texts]


@pytest.fixture
async def own_db(resources: Resources, database_url: str) -> AsyncIterator[Resources]:
    """The suite's resources over a migrated database of the test's own, with the hash
    embedder, and pools of their own on it (opened on first use)."""
    async with fresh_database(database_url, "space") as url:
        settings = resources.settings.model_copy(update={"database_url": url})
        engine = create_engine(url, settings, application_name="engram-cli")
        own = replace(resources, settings=settings, engine=engine,
                      sessionmaker=create_sessionmaker(engine), reader=None, reads=None)
        try:
            await upgrade_to_head(engine)
            yield own
        finally:
            await close_pools(own)
            await engine.dispose()


async def space_row(own: Resources) -> tuple[str, str | None, uuid.UUID | None, datetime]:
    async with own.engine.connect() as conn:
        row = (await conn.execute(text(
            "SELECT model, target_model, target_after, recorded_at FROM embedding_space"))
        ).one()
    return row[0], row[1], row[2], row[3]


async def store(own: Resources, *contents: str, tenant: TenantKey | None = None,
                **fields: object) -> list[str]:
    """Memories written through the API (a new tenant's unless given), their ids."""
    tenant = tenant or await create_tenant_key(own)
    ids = []
    async with make_client(own, tenant.headers) as client:
        for content in contents:
            resp = await client.post("/v1/memories", json={"content": content, **fields})
            assert resp.status_code == 201, resp.text
            ids.append(resp.json()["id"])
    # Then the API's pools close, as a stopped service's do: a re-embedding refuses to
    # run beside them.
    await close_pools(own)
    return ids


async def close_pools(own: Resources) -> None:
    for pool in (own.reader, own.reads):
        if pool is not None:
            await pool.close()
    own.reader = own.reads = None


async def stored_vectors(own: Resources) -> dict[str, tuple[str, np.ndarray]]:
    async with own.engine.connect() as conn:
        rows = (await conn.execute(text(
            "SELECT id, content, embedding::text FROM memories"))).all()
    return {str(r[0]): (r[1], np.array([float(x) for x in r[2].strip("[]").split(",")]))
            for r in rows}


async def vector_index(own: Resources) -> str | None:
    """The HNSW index's definition, or None when it is absent."""
    async with own.engine.connect() as conn:
        definition = (await conn.execute(text(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_memories_embedding_hnsw'"))
        ).scalar()
    return str(definition) if definition is not None else None


async def test_the_first_start_records_the_model_and_later_ones_keep_it(
        own_db: Resources) -> None:
    await check_on_start(own_db.engine, own_db.embedder)
    model, target, after, recorded = await space_row(own_db)
    assert (model, target, after) == (HASH, None, None)

    await check_on_start(own_db.engine, own_db.embedder)
    assert await space_row(own_db) == (HASH, None, None, recorded)


async def test_vectors_stored_before_any_record_are_checked_against_the_configured_model(
        own_db: Resources) -> None:
    """Found by an upgrade probe: a database from before migration 0021 written with the
    hash embedder, started with the local model, was recorded as the local model's, and
    every old memory's vector answered a search at random (0.03 to its own text)."""
    await store(own_db, "Alice prefers green tea.", "Bob runs on Sundays.")
    async with own_db.engine.begin() as conn:
        await conn.execute(text("DELETE FROM embedding_space"))  # as before 0021

    with pytest.raises(VectorSpaceMismatch) as refused:
        await check_on_start(own_db.engine, OtherModel())

    said = str(refused.value)
    assert "written before their model was recorded" in said
    assert "other-model" in said
    assert "python -m app reembed" in said
    async with own_db.engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM embedding_space"))).scalar() == 0
    # The model they were written with is recorded.
    await check_on_start(own_db.engine, own_db.embedder)
    assert (await space_row(own_db))[:3] == (HASH, None, None)


async def test_vectors_of_no_recorded_model_are_not_recorded_unchecked(
        own_db: Resources) -> None:
    """A re-probe: with the embedder down at that first start the model was recorded
    unchecked, for good, and the one that wrote the vectors refused after."""
    await store(own_db, "Alice prefers green tea.")
    async with own_db.engine.begin() as conn:
        await conn.execute(text("DELETE FROM embedding_space"))

    with pytest.raises(VectorSpaceMismatch) as refused:
        await check_on_start(own_db.engine, OtherModel(fail_on=1))

    assert "start again once it answers" in str(refused.value)
    async with own_db.engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM embedding_space"))).scalar() == 0
    await check_on_start(own_db.engine, own_db.embedder)
    assert (await space_row(own_db))[0] == HASH


async def test_another_model_is_refused_while_memories_hold_vectors(own_db: Resources) -> None:
    await check_on_start(own_db.engine, own_db.embedder)
    await store(own_db, "The boiler was serviced in March")
    before = await space_row(own_db)

    with pytest.raises(VectorSpaceMismatch) as refused:
        await check_on_start(own_db.engine, OtherModel())

    assert str(refused.value).startswith(
        f"the stored memories' vectors come from {HASH}, but the configured embedder "
        "gives other-model")
    assert "`python -m app reembed`" in str(refused.value)
    assert await space_row(own_db) == before


async def test_without_memories_another_model_is_adopted(own_db: Resources) -> None:
    await check_on_start(own_db.engine, own_db.embedder)

    await check_on_start(own_db.engine, OtherModel())

    assert (await space_row(own_db))[:3] == ("other-model", None, None)


async def test_another_model_is_not_adopted_beside_a_replica_of_the_recorded_one(
        own_db: Resources) -> None:
    """Two replicas on one empty database, one configured with another embedder: the
    second adopted its model while the first served, and both wrote (a probe)."""
    await check_on_start(own_db.engine, own_db.embedder)
    before = await space_row(own_db)
    replica = await asyncpg.connect(asyncpg_dsn(own_db.engine),
                                    server_settings={"application_name": "engram"})
    try:
        with pytest.raises(VectorSpaceMismatch, match=(
                rf"recorded as {HASH}'s, and the service is connected to this database "
                r"\(engram \(1\)\)")):
            await check_on_start(own_db.engine, OtherModel())
        await check_on_start(own_db.engine, own_db.embedder)  # its own model still starts
    finally:
        await replica.close()

    assert await space_row(own_db) == before
    await check_on_start(own_db.engine, OtherModel())
    assert (await space_row(own_db))[:3] == ("other-model", None, None)


async def test_two_replicas_of_one_new_model_starting_together_both_start(
        own_db: Resources) -> None:
    """A re-probe: the second replica, waiting for the first's lock on the record, was
    taken for one serving with the recorded model, and the first refused to start."""
    await check_on_start(own_db.engine, own_db.embedder)
    url = own_db.settings.database_url
    assert url is not None
    replicas = [create_engine(url, own_db.settings) for _ in range(2)]  # named "engram"
    try:
        await asyncio.gather(*(check_on_start(engine, OtherModel()) for engine in replicas))
    finally:
        for engine in replicas:
            await engine.dispose()

    assert (await space_row(own_db))[:3] == ("other-model", None, None)


async def test_a_pass_left_unfinished_over_memories_since_deleted_gives_the_index_back(
        own_db: Resources) -> None:
    await check_on_start(own_db.engine, own_db.embedder)
    await store(own_db, "one", "two", "three")
    index = await vector_index(own_db)
    with pytest.raises(RuntimeError, match="went away"):
        await reembed(own_db.engine, OtherModel(fail_on=3), batch_size=2)  # 1: the probe
    async with own_db.engine.begin() as conn:
        await conn.execute(text("DELETE FROM memories"))

    await check_on_start(own_db.engine, own_db.embedder)

    assert (await space_row(own_db))[:3] == (HASH, None, None)
    assert await vector_index(own_db) == index


async def test_reembedding_moves_every_memory_to_the_real_model(own_db: Resources) -> None:
    await check_on_start(own_db.engine, own_db.embedder)
    facts = ["Maya adopted a grey cat called Pixel last spring",
             "The quarterly budget review moved to Thursday afternoon",
             "Leon is allergic to peanuts and carries an epinephrine pen",
             "The staging database runs PostgreSQL 18 with pgvector"]
    tenant = await create_tenant_key(own_db)
    ids = await store(own_db, *facts, tenant=tenant)
    past = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    [expired] = await store(own_db, "An offer that lapsed yesterday", expires_at=past)
    settings = own_db.settings.model_copy(update={"embedder": "local"})

    # The service itself, on the real model, does not start over the hash vectors.
    with pytest.raises(VectorSpaceMismatch, match=f"come from {HASH}, but the configured "
                                                  f"embedder gives {LOCAL}"):
        await build_resources(settings)

    model = LocalEmbedder(batch_size=8, threads=1)
    await model.load()
    try:
        report = await reembed(own_db.engine, model, batch_size=2)
        expected = await model.embed([*facts, "An offer that lapsed yesterday"])
    finally:
        await model.aclose()

    assert (report.model, report.needed, report.embedded, report.skipped, report.resumed) \
        == (LOCAL, True, 5, 0, False)
    assert (await space_row(own_db))[:3] == (LOCAL, None, None)
    vectors = await stored_vectors(own_db)
    for memory_id, vector in zip([*ids, expired], expected, strict=True):
        # halfvec keeps ~3 significant digits.
        assert np.allclose(vectors[memory_id][1], vector, atol=2e-3), memory_id

    # Now the service starts on the real model, and its search finds by meaning the
    # memories written before, under the hash embedder.
    service = await build_resources(settings)
    try:
        async with make_client(service, tenant.headers) as client:
            found = await client.post("/v1/search",
                                      json={"query": "Which pet does Maya have?"})
        assert found.status_code == 200, found.text
        assert found.json()["results"][0]["memory"]["id"] == ids[0]
    finally:
        await service.close()


async def test_a_model_that_cannot_embed_is_found_out_before_the_pass_begins(
        own_db: Resources) -> None:
    """A typo in the new endpoint's URL or model took the service down: the pass was
    begun (the target recorded, the vector index dropped) before the first batch failed,
    and no service starts until a pass is finished, every memory re-embedded."""
    await check_on_start(own_db.engine, own_db.embedder)
    await store(own_db, "one", "two", "three")
    index = await vector_index(own_db)

    with pytest.raises(RuntimeError, match="went away"):
        await reembed(own_db.engine, OtherModel(fail_on=1), batch_size=2)

    assert (await space_row(own_db))[:3] == (HASH, None, None)
    assert await vector_index(own_db) == index
    await check_on_start(own_db.engine, own_db.embedder)  # the service starts as before


async def test_an_interrupted_reembedding_goes_on_where_it_stopped(
        own_db: Resources) -> None:
    await check_on_start(own_db.engine, own_db.embedder)
    await store(own_db, *(f"memory number {n}" for n in range(6)))
    by_id = sorted((await stored_vectors(own_db)).items())
    index = await vector_index(own_db)
    assert index is not None

    with pytest.raises(RuntimeError, match="went away"):
        await reembed(own_db.engine, OtherModel(fail_on=3), batch_size=2)  # 1: the probe

    # Dropped for the pass, as for a bulk load.
    assert await vector_index(own_db) is None

    assert (await space_row(own_db))[:3] == (HASH, "other-model", uuid.UUID(by_id[1][0]))
    for configured in (own_db.embedder, OtherModel()):
        with pytest.raises(VectorSpaceMismatch, match="was left unfinished"):
            await check_on_start(own_db.engine, configured)

    finishing = OtherModel()
    report = await reembed(own_db.engine, finishing, batch_size=2)

    # The vector index is back as the schema defines it, and the table was vacuumed.
    assert await vector_index(own_db) == index
    async with own_db.engine.connect() as conn:
        assert (await conn.execute(text(
            "SELECT last_vacuum IS NOT NULL FROM pg_stat_user_tables "
            "WHERE relname = 'memories'"))).scalar() is True
    assert 0 < report.index_seconds < report.seconds

    assert (report.embedded, report.resumed) == (4, True)
    assert finishing.batches == [[by_id[2][1][0], by_id[3][1][0]],
                                 [by_id[4][1][0], by_id[5][1][0]]]
    assert (await space_row(own_db))[:3] == ("other-model", None, None)
    vectors = await stored_vectors(own_db)
    for memory_id, (content, _) in by_id:
        assert np.allclose(vectors[memory_id][1], finishing.embed_one(content[::-1]),
                           atol=2e-3)
    await check_on_start(own_db.engine, finishing)
    again = await reembed(own_db.engine, OtherModel())
    assert (again.needed, again.embedded) == (False, 0)


async def test_a_memory_changed_while_it_was_embedded_keeps_its_writers_vector(
        own_db: Resources) -> None:
    [first, second] = await store(own_db, "the first text", "the second text")

    class EditingMeanwhile(OtherModel):
        async def embed(self, texts: Sequence[str]) -> list[Vector]:
            if "the second text" in texts:  # the pass's batch, not its probe
                async with own_db.engine.begin() as conn:
                    await conn.execute(text(
                        "UPDATE memories SET content = 'edited meanwhile' WHERE id = :id"),
                        {"id": second})
            return await super().embed(texts)

    before = await stored_vectors(own_db)
    report = await reembed(own_db.engine, EditingMeanwhile())

    assert (report.embedded, report.skipped) == (1, 1)
    after = await stored_vectors(own_db)
    assert not np.allclose(after[first][1], before[first][1])
    assert np.array_equal(after[second][1], before[second][1])


async def test_reembedding_is_refused_while_the_service_is_connected(
        own_db: Resources) -> None:
    await check_on_start(own_db.engine, own_db.embedder)
    await store(own_db, "a memory")
    before = await space_row(own_db)
    service = await asyncpg.connect(asyncpg_dsn(own_db.engine),
                                    server_settings={"application_name": "engram-search"})
    try:
        with pytest.raises(ServiceRunning, match=r"\(engram-search \(1\)\); stop every "):
            await reembed(own_db.engine, OtherModel())
    finally:
        await service.close()

    assert await space_row(own_db) == before
    assert (await reembed(own_db.engine, OtherModel())).embedded == 1


async def test_the_command_reembeds_once_and_refuses_beside_the_service(
        own_db: Resources) -> None:
    await check_on_start(own_db.engine, OtherModel())
    await store(own_db, "one", "two", "three")
    url = own_db.settings.database_url
    assert url is not None

    done = await cli(url, "reembed", "--batch-size", "2")

    assert done.returncode == 0, done.stderr
    assert re.fullmatch(rf"re-embedded 3 memories with {HASH} in \d+\.\d s \(the vector "
                        r"index built in \d+\.\d s\)\n", done.stdout), done.stdout
    assert "re-embedded 3 of 3" in done.stderr
    assert (await space_row(own_db))[:3] == (HASH, None, None)
    again = await cli(url, "reembed")
    assert again.stdout.strip() == f"the stored vectors are already {HASH}'s; nothing to do"

    service = await asyncpg.connect(asyncpg_dsn(own_db.engine),
                                    server_settings={"application_name": "engram"})
    try:
        refused = await cli(url, "reembed")
    finally:
        await service.close()
    assert refused.returncode == 1
    assert refused.stderr.startswith("engram: the service is connected to this database "
                                     "(engram (1))")
    bad = await cli(url, "reembed", "--batch-size", "0")
    assert bad.returncode == 2
    assert "argument --batch-size: 0 is not between 1 and 4096" in bad.stderr


async def test_the_command_stopped_by_a_failing_endpoint_goes_on_when_run_again(
        own_db: Resources) -> None:
    await check_on_start(own_db.engine, own_db.embedder)
    await store(own_db, "one", "two", "three")
    url = own_db.settings.database_url
    assert url is not None

    with FakeEmbeddingsServer() as server:
        endpoint = {"ENGRAM_EMBEDDER": "openai", "ENGRAM_OPENAI_BASE_URL": server.base_url,
                    "ENGRAM_OPENAI_MAX_RETRIES": "0",
                    "ENGRAM_OPENAI_EMBEDDING_MODEL": "served-minilm"}
        server.script(Succeed(), Succeed(), Fail(500))  # the probe, a batch, a failure
        stopped = await cli(url, "reembed", "--batch-size", "2", **endpoint)

        assert stopped.returncode == 1
        # After the embedder's own warning, which quotes the endpoint's answer.
        assert stopped.stderr.strip().splitlines()[-1] == (
            "engram: reembed stopped: EmbeddingError: the embeddings API answered 500. "
            "The batches done are kept; run it again to go on from there")
        assert "Traceback" not in stopped.stderr
        model, target, after, _ = await space_row(own_db)
        assert (model, target) == (HASH, "served-minilm")
        assert after is not None

        finished = await cli(url, "reembed", "--batch-size", "2", **endpoint)

    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.startswith(
        "re-embedded 1 memories with served-minilm (going on from an earlier pass) in ")
    assert [len(r.body["input"]) for r in server.requests] == [1, 2, 1, 1]
    assert (await space_row(own_db))[:3] == ("served-minilm", None, None)


async def test_a_second_pass_is_refused_while_one_runs(own_db: Resources) -> None:
    """Found by an exploratory probe: two passes of two models at once both reported
    success, left 220 of 600 memories with one model's vectors and 380 with the other's,
    recorded one, and a service then started on the mix."""
    await check_on_start(own_db.engine, own_db.embedder)
    await store(own_db, "one", "two")
    before = await space_row(own_db)

    async with exclusive_pass(own_db.engine, "run this reembed"):
        with pytest.raises(PassRunning, match=r"another `reembed` or `restore` is running"):
            await reembed(own_db.engine, OtherModel())
        url = own_db.settings.database_url
        assert url is not None
        refused = await cli(url, "reembed")
    assert await space_row(own_db) == before
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1] == (
        "engram: another `reembed` or `restore` is running on this database; let it "
        "finish, then run this reembed again")
    # Released with the block: the pass runs now.
    assert (await reembed(own_db.engine, OtherModel())).embedded == 2


async def test_a_model_that_cannot_embed_is_said_to_have_changed_nothing(
        own_db: Resources) -> None:
    await check_on_start(own_db.engine, own_db.embedder)
    await store(own_db, "one")
    before = await space_row(own_db)
    url = own_db.settings.database_url
    assert url is not None

    refused = await cli(url, "reembed", ENGRAM_EMBEDDER="openai",
                        ENGRAM_OPENAI_BASE_URL="http://127.0.0.1:9/v1",
                        ENGRAM_OPENAI_MAX_RETRIES="0")

    assert refused.returncode == 1
    last = refused.stderr.strip().splitlines()[-1]
    # It said "The batches done are kept; run it again to go on from there", of none.
    assert last.startswith("engram: reembed did not begin, nothing was changed: the new "
                           "model could not embed a probe text: "), refused.stderr
    assert "run it again" not in last
    assert await space_row(own_db) == before
