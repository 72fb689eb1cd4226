"""`python -m app backup` and `restore` as real processes: a backup of one database
restored into another replaces everything there and serves the same memories; a restore
that is not confirmed, meets the running service, is given something that is not a backup
or a backup cut short changes nothing. On the embedded default too: moving a data dir's
contents into another."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import httpx
import pytest
from sqlalchemy import make_url, text

from app.migrate import head_revision, upgrade_to_head
from app.resources import Resources
from tests.conftest import TenantKey, create_tenant_key, make_client, reconfigured
from tests.integration.test_cli_and_process import Run, base_env, cli, run_sync

pytestmark = pytest.mark.slow

Database = Callable[[], Awaitable[str]]


@pytest.fixture
async def new_database(database_url: str) -> AsyncIterator[Database]:
    """Makes empty databases on the suite's server (dropped after): a restore replaces
    all a database holds, so never the suite's own."""
    server = make_url(database_url)
    admin = server.set(drivername="postgresql", database="postgres")
    made: list[str] = []

    async def make() -> str:
        name = f"engram_backup_{uuid.uuid4().hex[:10]}"
        conn = await asyncpg.connect(admin.render_as_string(hide_password=False))
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        made.append(name)
        return server.set(database=name).render_as_string(hide_password=False)

    yield make
    conn = await asyncpg.connect(admin.render_as_string(hide_password=False))
    try:
        for name in made:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@asynccontextmanager
async def serving(resources: Resources, url: str,
                  key: TenantKey | None = None) -> AsyncIterator[tuple[httpx.AsyncClient,
                                                                        TenantKey]]:
    """The app on the database at `url` (migrated), as `key`'s tenant (a new one if none)."""
    async with reconfigured(resources, url) as res:
        await upgrade_to_head(res.engine, lock_timeout_seconds=10)
        key = key or await create_tenant_key(res)
        async with make_client(res, key.headers) as client:
            yield client, key


async def contents(client: httpx.AsyncClient) -> list[str]:
    listed = await client.get("/v1/memories", params={"limit": 500})
    assert listed.status_code == 200, listed.text
    return sorted(m["content"] for m in listed.json()["items"])


async def remember(client: httpx.AsyncClient, *texts: str) -> None:
    for content in texts:
        created = await client.post("/v1/memories", json={"content": content})
        assert created.status_code == 201, created.text


FACTS = ("Ada keeps bees on the roof.", "The roof garden opened in May.",
         "Ada's hives produced 12 kg of honey.")


async def test_a_backup_restored_into_another_database_replaces_what_it_held(
    resources: Resources, new_database: Database, tmp_path: Path,
) -> None:
    source, target = await new_database(), await new_database()
    archive = tmp_path / "engram.dump"
    async with serving(resources, source) as (client, key):
        await remember(client, *FACTS)
        turn = await client.post("/v1/sessions/chat-1/turns",
                                 json={"role": "user", "content": "Hello bees"})
        assert turn.status_code in (200, 201), turn.text
        saved = await cli(source, "backup", str(archive))
        await remember(client, "Written after the backup.")
    async with serving(resources, target) as (other, other_key):
        await remember(other, "Only in the target.")
        # The app serving here is the service: its connections are seen.
        while_serving = await cli(target, "restore", str(archive), "--yes")
        kept_while_serving = await contents(other)
    unconfirmed = await cli(target, "restore", str(archive))
    async with serving(resources, target, other_key) as (other, _):
        kept_unconfirmed = await contents(other)

    restored = await cli(target, "restore", str(archive), "--yes")
    async with serving(resources, target, key) as (client, _):
        memories = await contents(client)
        found = await client.post("/v1/search", json={"query": "honey from the hives"})
        session = await client.get("/v1/sessions/chat-1/turns")
        async with reconfigured(resources, target) as res, res.engine.connect() as conn:
            revision = await conn.scalar(text("SELECT version_num FROM alembic_version"))

    assert saved.returncode == 0, saved.stderr
    # Two tenants: `default`, which every database has, and the test's.
    assert saved.stdout.startswith(f"backed up 3 memories and 1 sessions of 2 tenants at "
                                   f"schema {head_revision()} to {archive} (")
    assert not list(tmp_path.glob(".*partial"))  # noqa: ASYNC240 - the test's own dir
    assert unconfirmed.returncode == 1
    assert "replaces everything in this database (1 memories and 0 sessions of 2 " \
           "tenants)" in unconfirmed.stderr
    assert "add --yes" in unconfirmed.stderr
    assert kept_unconfirmed == ["Only in the target."]
    assert while_serving.returncode == 1
    assert "the service is connected to this database (engram (1), engram-search (1))" \
        in while_serving.stderr
    assert kept_while_serving == ["Only in the target."]
    assert restored.returncode == 0, restored.stderr
    assert restored.stdout.startswith("restored 3 memories and 1 sessions of 2 tenants")
    # The source's memories as they were at the backup, nothing of the target's, and the
    # source's tenant and key (the target's are gone with the rest).
    assert memories == sorted(FACTS)
    assert found.status_code == 200, found.text
    assert found.json()["results"][0]["memory"]["content"] == FACTS[2]
    assert [t["content"] for t in session.json()["items"]] == ["Hello bees"]
    assert revision == head_revision()


async def test_a_restore_that_cannot_finish_changes_nothing(
    resources: Resources, new_database: Database, tmp_path: Path,
) -> None:
    source, target = await new_database(), await new_database()
    archive = tmp_path / "engram.dump"
    async with serving(resources, source) as (client, _):
        # Enough rows that the archive's data comes well after its table of contents.
        await remember(client, *(f"fact number {i} " + "x" * 200 for i in range(300)))
        assert (await cli(source, "backup", str(archive))).returncode == 0
    cut_short = tmp_path / "cut.dump"
    data = archive.read_bytes()
    cut_short.write_bytes(data[: int(len(data) * 0.8)])
    not_a_backup = tmp_path / "notes.txt"
    not_a_backup.write_text("not a backup\n")

    async with serving(resources, target) as (other, other_key):
        await remember(other, "Only in the target.")
    refused = await cli(target, "restore", str(not_a_backup), "--yes")
    missing = await cli(target, "restore", str(tmp_path / "absent.dump"), "--yes")
    failed = await cli(target, "restore", str(cut_short), "--yes")
    async with serving(resources, target, other_key) as (other, _):
        kept = await contents(other)

    assert refused.returncode == 1
    assert f"engram: {not_a_backup} is not a backup to restore: " in refused.stderr
    assert missing.returncode == 1
    assert "is not a backup to restore" in missing.stderr
    assert failed.returncode == 1, failed.stdout
    assert "engram: restore failed, the database is as it was: " in failed.stderr
    assert "pg_restore: error: " in failed.stderr, failed.stderr
    assert kept == ["Only in the target."]


def test_the_embedded_default_moves_to_another_data_dir(tmp_path: Path) -> None:
    """A backup of one embedded data dir restored into a fresh one (as when moving a
    laptop's memories to a server's data dir)."""
    archive = tmp_path / "engram.dump"
    first = base_env(ENGRAM_DATA_DIR=str(tmp_path / "first"))
    second = base_env(ENGRAM_DATA_DIR=str(tmp_path / "second"))
    for env in (first, second):
        env.pop("XDG_RUNTIME_DIR", None)
    created = run_sync("keys", "create", "--tenant", "moving", "--name", "laptop", env=first)
    saved = run_sync("backup", str(archive), env=first)
    restored = run_sync("restore", str(archive), "--yes", env=second)
    listed: Run = run_sync("keys", "list", env=second)

    assert created.returncode == 0, created.stderr
    assert saved.returncode == 0, saved.stderr
    assert restored.returncode == 0, restored.stderr
    assert "moving" in listed.stdout
    assert "laptop" in listed.stdout
