"""`python -m app backup` and `restore` as real processes: a backup of one database
restored into another replaces everything there and serves the same memories; a restore
that is not confirmed, meets the running service, is given something that is not a backup
or a backup cut short changes nothing. On the embedded default too: moving a data dir's
contents into another."""

from __future__ import annotations

import asyncio
import stat
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import httpx
import pytest
from sqlalchemy import make_url, text

from app.backup import bundled_tools
from app.embedding_space.service import exclusive_pass
from app.migrate import downgrade, head_revision, upgrade_to_head
from app.resources import Resources, build_resources
from app.restore_lock import RestoreRunning
from tests.conftest import TenantKey, create_tenant_key, make_client, reconfigured
from tests.integration.test_cli_and_process import (
    Run,
    base_env,
    cli,
    meaningful_lines,
    run_sync,
)

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
    # Its owner's alone (it was 0644): it holds every tenant's memories.
    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
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


async def revision_of(resources: Resources, url: str) -> str:
    async with reconfigured(resources, url) as res, res.engine.connect() as conn:
        return str(await conn.scalar(text("SELECT version_num FROM alembic_version")))


async def set_revision(resources: Resources, url: str, revision: str) -> None:
    async with reconfigured(resources, url) as res, res.engine.begin() as conn:
        await conn.execute(text("UPDATE alembic_version SET version_num = :r"),
                           {"r": revision})


async def backed_up_beside(resources: Resources, new_database: Database, archive: Path,
                           note: str) -> tuple[str, TenantKey, TenantKey]:
    """A database of FACTS backed up to `archive`, and another holding `note`: the other's
    url, the first's tenant and the other's."""
    source, target = await new_database(), await new_database()
    async with serving(resources, source) as (client, key):
        await remember(client, *FACTS)
        assert (await cli(source, "backup", str(archive))).returncode == 0
    async with serving(resources, target) as (other, other_key):
        await remember(other, note)
    return target, key, other_key


async def test_a_backup_leaves_the_schema_as_it_was(
    resources: Resources, new_database: Database, tmp_path: Path,
) -> None:
    """Found by an exploratory probe: `backup` migrated the live database first, so a
    backup taken before an upgrade with the new version's CLI upgraded production under
    the old replicas, and was of the migrated schema."""
    source = await new_database()
    async with serving(resources, source) as (client, _):
        await remember(client, *FACTS)
    async with reconfigured(resources, source) as res:
        await downgrade(res.engine, "0026")
    archive = tmp_path / "before-upgrade.dump"

    saved = await cli(source, "backup", str(archive))

    assert saved.returncode == 0, saved.stderr
    assert " at schema 0026 to " in saved.stdout
    assert await revision_of(resources, source) == "0026"


async def test_a_backup_a_newer_version_took_is_refused_before_anything_is_replaced(
    resources: Resources, new_database: Database, tmp_path: Path,
) -> None:
    """Found by an exploratory probe: the restore replaced the database, then failed to
    migrate it ("restore failed"), and no command of this version ran on it again."""
    source, target = await new_database(), await new_database()
    async with serving(resources, source) as (client, _):
        await remember(client, *FACTS)
    await set_revision(resources, source, "0099")
    archive = tmp_path / "newer.dump"
    assert (await cli(source, "backup", str(archive))).returncode == 0
    async with serving(resources, target) as (other, other_key):
        await remember(other, "Only in the target.")

    refused = await cli(target, "restore", str(archive), "--yes")

    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1] == (
        f"engram: {archive} cannot be restored by this version, nothing was changed: its "
        f"schema is at 0099, which this version of Engram (head {head_revision()}) does "
        "not know: a newer version migrated it; run that version")
    async with serving(resources, target, other_key) as (other, _):
        assert await contents(other) == ["Only in the target."]
    assert await revision_of(resources, target) == head_revision()


async def test_a_database_a_newer_version_migrated_can_be_restored_over(
    resources: Resources, new_database: Database, tmp_path: Path,
) -> None:
    """Rolling a release back: the backup taken before it goes over the database it
    migrated (every command migrated first, and refused that schema)."""
    archive = tmp_path / "last-night.dump"
    target, key, _ = await backed_up_beside(resources, new_database, archive,
                                            "Written by the newer release.")
    await set_revision(resources, target, "0099")

    restored = await cli(target, "restore", str(archive), "--yes")

    assert restored.returncode == 0, restored.stderr
    async with serving(resources, target, key) as (client, _):
        assert await contents(client) == sorted(FACTS)
    assert await revision_of(resources, target) == head_revision()


async def test_a_restore_is_refused_while_a_reembed_or_restore_runs(
    resources: Resources, new_database: Database, tmp_path: Path,
) -> None:
    archive = tmp_path / "engram.dump"
    target, _, other_key = await backed_up_beside(resources, new_database, archive,
                                                  "Only in the target.")

    async with reconfigured(resources, target) as res, \
            exclusive_pass(res.engine, "reembed"):
        refused = await cli(target, "restore", str(archive), "--yes")

    assert refused.returncode == 1
    assert "another `reembed` or `restore` is running on this database" in refused.stderr
    async with serving(resources, target, other_key) as (other, _):
        assert await contents(other) == ["Only in the target."]


async def test_a_backups_summary_counts_what_the_file_holds_while_writes_go_on(
    resources: Resources, new_database: Database, tmp_path: Path,
) -> None:
    """Found by an exploratory probe: the counts were read after the dump, so writes
    meanwhile were counted too ("21368 memories" of a file holding 21,093)."""
    source, target = await new_database(), await new_database()
    archive = tmp_path / "busy.dump"
    async with serving(resources, source) as (client, _):
        await remember(client, *(f"seed fact {i}" for i in range(50)))
        stop = asyncio.Event()

        async def write() -> None:
            n = 0
            while not stop.is_set():
                await remember(client, f"written during the backup {n}")
                n += 1

        writer = asyncio.create_task(write())
        try:
            saved = await cli(source, "backup", str(archive))
        finally:
            stop.set()
            await writer
    restored = await cli(target, "restore", str(archive), "--yes")

    assert saved.returncode == 0, saved.stderr
    assert restored.returncode == 0, restored.stderr
    said = saved.stdout.split(" at schema ")[0].removeprefix("backed up ")
    assert restored.stdout.startswith(f"restored {said} from "), (saved.stdout,
                                                                  restored.stdout)


# Each waits where a restore or a dump is seen running, until the test makes `go` (or
# a minute passes), and leaves a mark as it begins to wait.
_WAIT = 'i=0; while [ ! -e "{marks}/go" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done'
SLOW_RESTORE = """#!/bin/sh
# The restore's stream is the only call with --no-owner: its end is held back.
case "$1" in
  --no-owner) "{real}/pg_restore" "$@"; status=$?; touch "{marks}/restoring"; {wait}
              exit $status ;;
  *) exec "{real}/pg_restore" "$@" ;;
esac
"""
SLOW_DUMP = """#!/bin/sh
touch "{marks}/dumping"
{wait}
exec "{real}/pg_dump" "$@"
"""


def slow_tools(folder: Path) -> Path:
    """ENGRAM_PG_BIN_DIR for the bundled tools, with a restore's stream and a dump held
    back until `go` is made in the folder."""
    real = bundled_tools().bin_dir
    folder.mkdir()
    (folder / "psql").symlink_to(real / "psql")
    for name, script in (("pg_restore", SLOW_RESTORE), ("pg_dump", SLOW_DUMP)):
        (folder / name).write_text(
            script.format(real=real, marks=folder, wait=_WAIT.format(marks=folder)))
        (folder / name).chmod(0o755)
    return folder


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    for _ in range(300):
        if await check():
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"never {what}")


async def test_nothing_starts_on_a_database_a_restore_is_replacing(
    resources: Resources, new_database: Database, tmp_path: Path,
) -> None:
    """Found by an exploratory probe: the restore's rule that nothing else runs was
    checked once, at its start. A backup begun meanwhile failed with pg_dump's "cache
    lookup failed", and a service started meanwhile waited on the replaced tables, then
    served."""
    archive = tmp_path / "engram.dump"
    target, _, _ = await backed_up_beside(resources, new_database, archive,
                                          "Only in the target.")
    slow = slow_tools(tmp_path / "slow")
    restoring = asyncio.create_task(
        cli(target, "restore", str(archive), "--yes", ENGRAM_PG_BIN_DIR=str(slow)))

    async def restore_running() -> bool:
        return (slow / "restoring").exists()

    await until(restore_running, "saw the restore running")
    backed_up = await cli(target, "backup", str(tmp_path / "meanwhile.dump"))
    created = await cli(target, "keys", "create", "--tenant", "made-meanwhile")
    try:
        started = await build_resources(
            resources.settings.model_copy(update={"database_url": target}))
    except RestoreRunning as exc:
        start_refused = str(exc)
    else:
        await started.close()
        start_refused = ""
    (slow / "go").touch()
    restored = await restoring

    assert start_refused == ("a `restore` is running on this database; start the service "
                             "once it is done")
    assert backed_up.returncode == 1
    assert meaningful_lines(backed_up.stderr) == [
        "engram: backup failed: a `restore` is running on this database; run the command "
        "again once it is done"]
    assert created.returncode == 1
    assert "a `restore` is running on this database" in created.stderr
    assert not (tmp_path / "meanwhile.dump").exists()
    assert restored.returncode == 0, restored.stderr
    async with reconfigured(resources, target) as res, res.engine.connect() as conn:
        names = (await conn.scalars(text("SELECT name FROM tenants"))).all()
    assert "made-meanwhile" not in names


async def test_a_restore_is_refused_while_a_backup_runs(
    resources: Resources, new_database: Database, tmp_path: Path,
) -> None:
    """It had waited for the whole dump, saying nothing, and then replaced the database."""
    archive = tmp_path / "engram.dump"
    target, _, other_key = await backed_up_beside(resources, new_database, archive,
                                                  "Only in the target.")
    slow = slow_tools(tmp_path / "slow")
    backing = asyncio.create_task(
        cli(target, "backup", str(tmp_path / "target.dump"), ENGRAM_PG_BIN_DIR=str(slow)))

    async def backup_running() -> bool:
        return (slow / "dumping").exists()

    await until(backup_running, "saw the backup running")
    refused = await cli(target, "restore", str(archive), "--yes")
    (slow / "go").touch()
    backed_up = await backing

    assert refused.returncode == 1
    assert meaningful_lines(refused.stderr) == [
        "engram: a `backup` is running on this database; let it finish, then restore again"]
    assert backed_up.returncode == 0, backed_up.stderr
    async with serving(resources, target, other_key) as (other, _):
        assert await contents(other) == ["Only in the target."]
