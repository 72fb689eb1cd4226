"""Migrations on a fresh database of the test server: upgrade, downgrade to nothing,
upgrade again, and autogenerate finds no difference between the models and the schema."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import (
    Column,
    Connection,
    MetaData,
    String,
    func,
    inspect,
    pool,
    select,
    text,
)
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.migrate import (
    MIGRATION_LOCK_ID,
    MigrationLockTimeout,
    SchemaNewer,
    current_revisions,
    downgrade,
    head_revision,
    upgrade_to_head,
)
from app.models import DEFAULT_TENANT_ID, Base, Tenant
from app.resources import Resources
from tests.conftest import fresh_database, make_client

ENGRAM_TABLES = {"tenants", "api_keys", "idempotency_keys", "memories"}


@pytest.fixture
async def fresh_engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """An engine on a new, empty database; the database is dropped afterwards."""
    async with fresh_database(database_url, "mig") as url:
        engine = create_async_engine(url, poolclass=pool.NullPool)
        try:
            yield engine
        finally:
            await engine.dispose()


def _tables(conn: Connection) -> set[str]:
    return set(inspect(conn).get_table_names(schema="public"))


async def tables(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        return await conn.run_sync(_tables)


def _diff(conn: Connection, metadata: MetaData = Base.metadata) -> list[Any]:
    # migrations/env.py compares types; server defaults are compared too, which is
    # stricter than `alembic revision --autogenerate` and catches a default changed in a
    # model without a migration. No difference is filtered out: the computed `tsv`
    # column (to_tsvector(...) STORED) is reflected faithfully by this alembic and
    # SQLAlchemy, so there is no spurious diff to ignore. Should a future upgrade start
    # reporting one for it, filter exactly that column here and say so.
    context = MigrationContext.configure(
        conn, opts={"compare_type": True, "compare_server_default": True}
    )
    return list(compare_metadata(context, metadata))


def _diff_with_an_extra_column(conn: Connection) -> list[Any]:
    changed = MetaData(naming_convention=Base.metadata.naming_convention)
    for table in Base.metadata.tables.values():
        table.to_metadata(changed)
    changed.tables["tenants"].append_column(Column("not_migrated", String(10)))
    return _diff(conn, changed)


async def test_upgrade_downgrade_upgrade(fresh_engine: AsyncEngine) -> None:
    assert await tables(fresh_engine) == set()

    await upgrade_to_head(fresh_engine)
    assert await tables(fresh_engine) >= ENGRAM_TABLES
    assert await current_revisions(fresh_engine) == {head_revision()}

    await downgrade(fresh_engine, "base")
    # Only alembic's own bookkeeping table may remain, and it is empty.
    assert await tables(fresh_engine) - {"alembic_version"} == set()
    assert await current_revisions(fresh_engine) == set()

    await upgrade_to_head(fresh_engine)
    assert await tables(fresh_engine) >= ENGRAM_TABLES
    assert await current_revisions(fresh_engine) == {head_revision()}
    async with fresh_engine.connect() as conn:
        default = (await conn.execute(
            select(Tenant.id, Tenant.name).where(Tenant.id == DEFAULT_TENANT_ID)
        )).one()
    assert default.name == "default"


async def test_upgrading_twice_is_a_no_op(fresh_engine: AsyncEngine) -> None:
    await upgrade_to_head(fresh_engine)
    await upgrade_to_head(fresh_engine)

    assert await current_revisions(fresh_engine) == {head_revision()}
    async with fresh_engine.connect() as conn:
        count = await conn.scalar(
            select(func.count()).select_from(Tenant).where(Tenant.id == DEFAULT_TENANT_ID)
        )
    assert count == 1


async def test_a_migration_gives_up_a_held_table_lock_and_changes_nothing(
        fresh_engine: AsyncEngine, caplog: pytest.LogCaptureFixture) -> None:
    await upgrade_to_head(fresh_engine, "0018")
    # An open write transaction on memories, as an older replica's during a rolling
    # deploy: 0019's index build must wait for it.
    async with fresh_engine.connect() as holder:
        await holder.execute(text("LOCK TABLE memories IN ROW EXCLUSIVE MODE"))
        started = time.monotonic()

        with pytest.raises(MigrationLockTimeout, match=r"waited 0\.3 s for a table's lock "
                                                        r"3 times and gave up"):
            await upgrade_to_head(fresh_engine, lock_timeout_seconds=0.3, attempts=3,
                                  retry_delay_seconds=0.1)

        # Three waits of 0.3 s and two pauses (0.1, 0.2), not a wait without end.
        assert time.monotonic() - started < 5
        assert await current_revisions(fresh_engine) == {"0018"}
        assert [r.message for r in caplog.records if "trying again" in r.message] == [
            "a migration waited 0.3 s for a table's lock (attempt 1 of 3); rolled back, "
            "trying again in 0.1 s",
            "a migration waited 0.3 s for a table's lock (attempt 2 of 3); rolled back, "
            "trying again in 0.2 s"]
    await upgrade_to_head(fresh_engine, lock_timeout_seconds=0.3)
    assert await current_revisions(fresh_engine) == {head_revision()}


async def test_a_migration_goes_on_once_the_lock_is_released(
        fresh_engine: AsyncEngine) -> None:
    await upgrade_to_head(fresh_engine, "0018")
    async with fresh_engine.connect() as holder:
        await holder.execute(text("LOCK TABLE memories IN ROW EXCLUSIVE MODE"))
        release = asyncio.get_running_loop().call_later(
            0.5, lambda: asyncio.ensure_future(holder.rollback()))
        try:
            await upgrade_to_head(fresh_engine, lock_timeout_seconds=0.2, attempts=6,
                                  retry_delay_seconds=0.1)
        finally:
            release.cancel()

    assert await current_revisions(fresh_engine) == {head_revision()}


async def test_the_replicas_lock_is_waited_for_without_the_bound(
        fresh_engine: AsyncEngine) -> None:
    # Another replica migrating (for longer than the lock timeout) is waited for.
    async with fresh_engine.connect() as other_replica:
        await other_replica.execute(text("SELECT pg_advisory_xact_lock(:id)"),
                                    {"id": MIGRATION_LOCK_ID})
        finish = asyncio.get_running_loop().call_later(
            0.8, lambda: asyncio.ensure_future(other_replica.commit()))
        started = time.monotonic()
        try:
            await upgrade_to_head(fresh_engine, lock_timeout_seconds=0.2, attempts=1)
        finally:
            finish.cancel()

    assert time.monotonic() - started >= 0.7
    assert await current_revisions(fresh_engine) == {head_revision()}


async def test_autogenerate_finds_no_difference(fresh_engine: AsyncEngine) -> None:
    await upgrade_to_head(fresh_engine)

    async with fresh_engine.connect() as conn:
        diff = await conn.run_sync(_diff)

    assert diff == [], "models and migrations disagree; write a migration:\n" + "\n".join(
        repr(d) for d in diff
    )


async def test_the_comparison_is_not_vacuous(fresh_engine: AsyncEngine) -> None:
    """A model change without a migration is reported, so an empty diff means something."""
    await upgrade_to_head(fresh_engine)

    async with fresh_engine.connect() as conn:
        diff = await conn.run_sync(_diff_with_an_extra_column)

    assert [(d[0], d[2], d[3].name) for d in diff] == [("add_column", "tenants",
                                                         "not_migrated")]


async def test_every_model_table_is_created_by_the_migrations(
    fresh_engine: AsyncEngine,
) -> None:
    await upgrade_to_head(fresh_engine)

    assert set(Base.metadata.tables) <= await tables(fresh_engine)


async def test_the_term_statistics_are_backfilled_from_existing_memories(
    fresh_engine: AsyncEngine,
) -> None:
    """Migration 0004 counts the memories already stored (active ones only), so search
    scores them right away; later writes go through the triggers."""
    await upgrade_to_head(fresh_engine, "0003")
    vector = "[" + ",".join(["0.05"] * 384) + "]"
    async with fresh_engine.begin() as conn:
        for content, archived in (("red apple pie", False), ("green apple", False),
                                  ("rotten apple", True)):
            await conn.execute(text(
                "INSERT INTO memories (tenant_id, id, content, embedding, archived_at) "
                "VALUES (:t, :id, :c, CAST(:v AS halfvec(384)), "
                "CASE WHEN :a THEN now() END)"
            ), {"t": DEFAULT_TENANT_ID, "id": uuid.uuid4(), "c": content, "v": vector,
                "a": archived})

    await upgrade_to_head(fresh_engine)

    async with fresh_engine.connect() as conn:
        stats = {r.lexeme: (r.df, r.len) for r in await conn.execute(text(
            "SELECT lexeme, sum(df) AS df, sum(total_len) AS len FROM term_stats "
            "WHERE tenant_id = :t GROUP BY lexeme"), {"t": DEFAULT_TENANT_ID})}
        lengths = await conn.scalar(text(
            "SELECT sum(length(tsv)) FROM memories WHERE archived_at IS NULL"))
    assert stats["appl"] == (2, 0)
    assert stats["pie"] == (1, 0)
    assert "rotten" not in stats
    assert stats[""] == (2, lengths)


def at(year: int, month: int, day: int, hour: int = 12, minute: int = 0, *,
       hours: int = 0) -> datetime:
    """A time at `hours` east of UTC."""
    return datetime(year, month, day, hour, minute, tzinfo=timezone(timedelta(hours=hours)))


# A row's day words: its full-text entries of weight D (the content's are A).
WORDS = "ARRAY(SELECT w FROM unnest(tsvector_to_array(ts_filter(tsv, '{d}'))) AS w ORDER BY w)"


async def test_summaries_get_the_days_they_cover_and_lose_them_on_downgrade(
    fresh_engine: AsyncEngine,
) -> None:
    """Migration 0010 fills each stored summary's covered days from the facts under it,
    through summaries of summaries, and indexes their words instead of the write date;
    its downgrade puts the write date's words back."""
    await upgrade_to_head(fresh_engine, "0009")
    vector = "[" + ",".join(["0.05"] * 384) + "]"
    ids = {name: uuid.uuid4() for name in ("may8", "may9", "june1", "inner", "outer", "lost")}
    rows = [  # name, role, created_at, summary_of
        ("may8", "fact", at(2023, 5, 8, 23, 30), []),
        ("may9", "fact", at(2023, 5, 9, 1, 0, hours=2), []),  # 8 May in UTC
        ("june1", "fact", at(2023, 6, 1), []),
        ("inner", "summary", at(2026, 6, 30), [ids["may8"], ids["may9"]]),
        ("outer", "summary", at(2026, 7, 1), [ids["inner"], ids["june1"]]),
        ("lost", "summary", at(2026, 7, 2), [uuid.uuid4()]),  # its fact was deleted
    ]
    async with fresh_engine.begin() as conn:
        for name, role, created, summary_of in rows:
            await conn.execute(text(
                "INSERT INTO memories (tenant_id, id, content, fact_role, summary_of,"
                " created_at, embedding) VALUES (:t, :id, 'words', :role,"
                " CAST(:of AS uuid[]), :at, CAST(:v AS halfvec(384)))"
            ), {"t": DEFAULT_TENANT_ID, "id": ids[name], "role": role, "of": summary_of,
                "at": created, "v": vector})

    await upgrade_to_head(fresh_engine)

    async with fresh_engine.connect() as conn:
        found = {name: (await conn.execute(text(
            f"SELECT covered_days, {WORDS} AS words FROM memories WHERE id = :id"),
            {"id": ids[name]})).one() for name in ids}
    may8, june1 = date(2023, 5, 8), date(2023, 6, 1)
    assert found["may8"].covered_days == []
    assert found["may8"].words == ["2023", "8", "may"]
    assert found["may9"].words == ["2023", "8", "may"]
    assert found["inner"].covered_days == [may8]
    assert found["inner"].words == ["2023", "8", "may"]
    assert found["outer"].covered_days == [may8, june1]
    assert found["outer"].words == ["1", "2023", "8", "june", "may"]
    assert found["lost"].covered_days == []
    assert found["lost"].words == ["2", "2026", "juli"]

    await downgrade(fresh_engine, "0009")

    async with fresh_engine.connect() as conn:
        words = (await conn.execute(text(f"SELECT {WORDS} FROM memories WHERE id = :id"),
                                    {"id": ids["outer"]})).scalar()
    assert words == ["1", "2026", "juli"]


async def test_users_are_counted_from_existing_memories_and_forgotten_on_downgrade(
    fresh_engine: AsyncEngine,
) -> None:
    """Migration 0013 counts each user's active memories already stored, and its triggers
    count later writes; its downgrade drops the counts and stops counting."""
    await upgrade_to_head(fresh_engine, "0012")
    vector = "[" + ",".join(["0.05"] * 384) + "]"
    insert = text(
        "INSERT INTO memories (tenant_id, id, content, user_id, embedding, archived_at) "
        "VALUES (:t, :id, 'a note', :u, CAST(:v AS halfvec(384)), CASE WHEN :a THEN now() END)")
    async with fresh_engine.begin() as conn:
        for user, archived in (("u1", False), ("u1", False), ("u1", True), ("u2", False),
                               (None, False)):
            await conn.execute(insert, {"t": DEFAULT_TENANT_ID, "id": uuid.uuid4(), "u": user,
                                        "v": vector, "a": archived})

    async def users() -> dict[str, int]:
        async with fresh_engine.connect() as conn:
            return {r.lexeme: int(r.df) for r in await conn.execute(text(
                "SELECT lexeme, sum(df) AS df FROM term_stats WHERE tenant_id = :t"
                " AND lexeme LIKE ' user:%' GROUP BY lexeme HAVING sum(df) <> 0"),
                {"t": DEFAULT_TENANT_ID})}

    await upgrade_to_head(fresh_engine)
    assert await users() == {" user:u1": 2, " user:u2": 1}
    async with fresh_engine.begin() as conn:
        await conn.execute(insert, {"t": DEFAULT_TENANT_ID, "id": uuid.uuid4(), "u": "u2",
                                    "v": vector, "a": False})
    assert await users() == {" user:u1": 2, " user:u2": 2}

    await downgrade(fresh_engine, "0012")
    assert await users() == {}
    async with fresh_engine.begin() as conn:
        await conn.execute(insert, {"t": DEFAULT_TENANT_ID, "id": uuid.uuid4(), "u": "u2",
                                    "v": vector, "a": False})
    assert await users() == {}


async def test_stored_answers_become_text_and_back_to_jsonb_on_downgrade(
    fresh_engine: AsyncEngine,
) -> None:
    """Migration 0014 keeps an answer stored as jsonb as the same JSON value in text, and
    its downgrade turns the text back into jsonb."""
    await upgrade_to_head(fresh_engine, "0013")
    answer = {"id": "x", "metadata": {"zeta": 1, "a": [1.5, None, "é"]}, "tags": []}
    async with fresh_engine.begin() as conn:
        await conn.execute(text(
            "INSERT INTO idempotency_keys (tenant_id, key, operation, request_hash, "
            "status_code, response_body) VALUES (:t, 'k', 'createMemory', '\\x00', 201, "
            "CAST(:b AS jsonb))"), {"t": DEFAULT_TENANT_ID, "b": json.dumps(answer)})

    async def stored() -> tuple[str, Any]:
        async with fresh_engine.connect() as conn:
            row = (await conn.execute(text(
                "SELECT pg_typeof(response_body)::text AS type, response_body::text AS body"
                " FROM idempotency_keys WHERE key = 'k'"))).one()
            return row.type, json.loads(row.body)

    await upgrade_to_head(fresh_engine)
    assert await stored() == ("text", answer)
    await downgrade(fresh_engine, "0013")
    assert await stored() == ("jsonb", answer)


async def test_stored_answers_are_named_by_what_they_hold_and_lose_the_names_on_downgrade(
    fresh_engine: AsyncEngine,
) -> None:
    """Migration 0034 names each stored create's and append's answer by the memories or
    session it holds, so erasing them erases the answer (a day-2 probe found them served
    back after the erasure); a failed answer and another operation's hold none."""
    await upgrade_to_head(fresh_engine, "0033")
    one, two, three = (str(uuid.uuid4()) for _ in range(3))
    answers = {
        "one": ("createMemory", 201, {"id": one, "content": "a secret"}),
        "batch": ("createMemories", 201, {"items": [{"id": two}, {"id": three}]}),
        "turn": ("appendTurn", 201, {"session_id": "conv-7", "content": "hi"}),
        "refused": ("createMemory", 422, {"detail": "no"}),
    }
    async with fresh_engine.begin() as conn:
        for key, (operation, status, body) in answers.items():
            await conn.execute(text(
                "INSERT INTO idempotency_keys (tenant_id, key, operation, request_hash, "
                "status_code, response_body) VALUES (:t, :k, :o, '\\x00', :s, :b)"),
                {"t": DEFAULT_TENANT_ID, "k": key, "o": operation, "s": status,
                 "b": json.dumps(body)})

    await upgrade_to_head(fresh_engine)
    async with fresh_engine.connect() as conn:
        named = dict((await conn.execute(text(
            "SELECT key, names FROM idempotency_keys"))).all())
    assert named == {"one": [f"memory:{one}"], "batch": [f"memory:{two}", f"memory:{three}"],
                     "turn": ["session:conv-7"], "refused": []}
    await downgrade(fresh_engine, "0033")
    async with fresh_engine.connect() as conn:
        assert await conn.scalar(text(
            "SELECT count(*) FROM information_schema.columns "
            "WHERE table_name = 'idempotency_keys' AND column_name = 'names'")) == 0


async def test_memories_take_their_version_from_their_history_and_drop_it_on_downgrade(
    fresh_engine: AsyncEngine,
) -> None:
    """Migration 0027 gives each memory the number after its newest kept state, the
    trigger then numbers from the memory whatever is erased, and the downgrade goes back
    to numbering from the states kept."""
    await upgrade_to_head(fresh_engine, "0026")
    vector = "[" + ",".join(["0.05"] * 384) + "]"
    edited, untouched = uuid.uuid4(), uuid.uuid4()
    change = text("UPDATE memories SET content = content || '!' WHERE id = :id")
    async with fresh_engine.begin() as conn:
        for memory_id in (edited, untouched):
            await conn.execute(text(
                "INSERT INTO memories (tenant_id, id, content, embedding) "
                "VALUES (:t, :id, 'a note', CAST(:v AS halfvec(384)))"),
                {"t": DEFAULT_TENANT_ID, "id": memory_id, "v": vector})
        for _ in range(2):
            await conn.execute(change, {"id": edited})

    async def numbers(memory_id: uuid.UUID) -> list[int]:
        async with fresh_engine.connect() as conn:
            return list((await conn.execute(text(
                "SELECT version FROM memory_versions WHERE memory_id = :id ORDER BY version"),
                {"id": memory_id})).scalars())

    await upgrade_to_head(fresh_engine)
    async with fresh_engine.begin() as conn:
        stored = {r.id: r.version for r in await conn.execute(text(
            "SELECT id, version FROM memories"))}
        assert stored == {edited: 3, untouched: 1}
        await conn.execute(text("DELETE FROM memory_versions WHERE memory_id = :id"),
                           {"id": edited})
        await conn.execute(change, {"id": edited})
    assert await numbers(edited) == [3]

    await downgrade(fresh_engine, "0026")
    async with fresh_engine.begin() as conn:
        await conn.execute(change, {"id": edited})
        await conn.execute(change, {"id": untouched})
    assert await numbers(edited) == [3, 4]
    assert await numbers(untouched) == [1]


async def test_a_schema_a_newer_version_migrated_is_named_as_such_and_left_alone(
    fresh_engine: AsyncEngine, resources: Resources,
) -> None:
    """Alembic said "Can't locate revision identified by '0099'", and /readyz "run `make
    migrate`", which cannot help: this version's migrations end before it."""
    await upgrade_to_head(fresh_engine)
    async with fresh_engine.begin() as conn:
        await conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))

    with pytest.raises(SchemaNewer) as refused:
        await upgrade_to_head(fresh_engine)
    assert str(refused.value) == (
        f"the schema is at 0099, which this version of Engram (head {head_revision()}) "
        "does not know: a newer version migrated it; run that version")
    assert await current_revisions(fresh_engine) == {"0099"}

    async with make_client(dataclasses.replace(resources, engine=fresh_engine)) as client:
        ready = await client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["detail"] == str(refused.value)


async def test_a_newer_version_migrating_while_this_one_waits_is_named_as_such(
    fresh_engine: AsyncEngine,
) -> None:
    """Found by an exploratory probe: the check came before the advisory lock, so a start
    that waited for a newer version's migration got Alembic's "Can't locate revision"."""
    await upgrade_to_head(fresh_engine)
    async with fresh_engine.connect() as newer:
        await newer.execute(text("SELECT pg_advisory_xact_lock(:id)"),
                            {"id": MIGRATION_LOCK_ID})
        waiting = asyncio.create_task(upgrade_to_head(fresh_engine))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        await newer.execute(text("UPDATE alembic_version SET version_num = '0099'"))
        await newer.commit()

        with pytest.raises(SchemaNewer) as refused:
            await asyncio.wait_for(waiting, 10)
    assert "the schema is at 0099" in str(refused.value)
    assert await current_revisions(fresh_engine) == {"0099"}


async def test_a_schema_behind_says_to_migrate(
    fresh_engine: AsyncEngine, resources: Resources,
) -> None:
    await upgrade_to_head(fresh_engine, "0026")
    async with make_client(dataclasses.replace(resources, engine=fresh_engine)) as client:
        ready = await client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["detail"] == (
        f"the schema is at ['0026'], not at head {head_revision()}; run `python -m app "
        "migrate` (`make migrate`)")


async def insert_expiring(
    engine: AsyncEngine,
    rows: list[tuple[uuid.UUID, str, list[uuid.UUID], datetime | None]],
) -> None:
    """Memories of the default tenant as (id, role, summary_of, expires_at)."""
    vector = "[" + ",".join(["0.05"] * 384) + "]"
    async with engine.begin() as conn:
        for memory_id, role, sources, expires in rows:
            await conn.execute(text(
                "INSERT INTO memories (tenant_id, id, content, embedding, fact_role, "
                "summary_of, expires_at) VALUES (:t, :id, 'a note', "
                "CAST(:v AS halfvec(384)), :role, CAST(:of AS uuid[]), :exp)"),
                {"t": DEFAULT_TENANT_ID, "id": memory_id, "v": vector, "role": role,
                 "of": [str(s) for s in sources], "exp": expires})


async def test_summaries_are_made_to_expire_no_later_than_their_sources(
    fresh_engine: AsyncEngine,
) -> None:
    """Migration 0028: summaries written to expire with their last source (or never)
    expire with their first, a summary of a summary too; later ones are left alone."""
    await upgrade_to_head(fresh_engine, "0027")
    soon = datetime(2030, 1, 1, tzinfo=UTC)
    fact, lasting, prior, above, early = (uuid.uuid4() for _ in range(5))
    rows = [  # (id, role, summary_of, expires_at)
        (fact, "fact", [], soon),
        (lasting, "fact", [], None),
        (prior, "summary", [fact, lasting], None),
        (above, "summary", [prior, lasting], None),
        (early, "summary", [fact], soon - timedelta(days=1)),
    ]
    await insert_expiring(fresh_engine, rows)

    await upgrade_to_head(fresh_engine)

    async with fresh_engine.connect() as conn:
        expiry = {r.id: r.expires_at for r in await conn.execute(text(
            "SELECT id, expires_at FROM memories"))}
    assert expiry == {fact: soon, lasting: None, prior: soon, above: soon,
                      early: soon - timedelta(days=1)}


async def test_a_summarys_own_expiry_is_read_from_what_it_shows(
    fresh_engine: AsyncEngine,
) -> None:
    """Migration 0030: an expiry sooner than every source's (or set where none expires)
    can only be a client's and becomes the summary's own; one that is its first source's
    is not. A fact's own expiry is its expiry."""
    await upgrade_to_head(fresh_engine, "0029")
    soon = datetime(2030, 1, 1, tzinfo=UTC)
    fact, lasting, following, earlier, alone = (uuid.uuid4() for _ in range(5))
    rows = [  # (id, role, summary_of, expires_at)
        (fact, "fact", [], soon),
        (lasting, "fact", [], None),
        (following, "summary", [fact, lasting], soon),
        (earlier, "summary", [fact, lasting], soon - timedelta(days=1)),
        (alone, "summary", [lasting], soon + timedelta(days=1)),
    ]
    await insert_expiring(fresh_engine, rows)

    await upgrade_to_head(fresh_engine)

    async with fresh_engine.connect() as conn:
        own = {r.id: r.own_expires_at for r in await conn.execute(text(
            "SELECT id, own_expires_at FROM memories"))}
    assert own == {fact: soon, lasting: None, following: None,
                   earlier: soon - timedelta(days=1), alone: soon + timedelta(days=1)}


async def insert_spelt(engine: AsyncEngine, spelt: dict[str, str]) -> dict[str, uuid.UUID]:
    """A memory of each text, as a migration test's rows: their ids by name."""
    vector = "[" + ",".join(["0.05"] * 384) + "]"
    ids = {name: uuid.uuid4() for name in spelt}
    async with engine.begin() as conn:
        for name, content in spelt.items():
            await conn.execute(text(
                "INSERT INTO memories (tenant_id, id, content, embedding) "
                "VALUES (:t, :id, :c, CAST(:v AS halfvec(384)))"),
                {"t": DEFAULT_TENANT_ID, "id": ids[name], "c": content, "v": vector})
    return ids


async def indexed_words(engine: AsyncEngine, ids: dict[str, uuid.UUID],
                        ) -> tuple[dict[str, Any], dict[str, int]]:
    """Each row by name (its text, stamp, version, xmin and content words), and the
    tenant's document frequencies."""
    async with engine.connect() as conn:
        rows = {r.id: r for r in await conn.execute(text(
            "SELECT id, content, updated_at, version, xmin::text AS xmin, "
            "ARRAY(SELECT unnest(tsvector_to_array(ts_filter(tsv, '{a}')))) AS words "
            "FROM memories"))}
        df = {r.lexeme: int(r.df) for r in await conn.execute(text(
            "SELECT lexeme, sum(df) AS df FROM term_stats WHERE tenant_id = :t "
            "GROUP BY lexeme"), {"t": DEFAULT_TENANT_ID})}
    return {name: rows[row_id] for name, row_id in ids.items()}, df


async def test_tags_and_categories_are_composed_without_a_history_version(
    fresh_engine: AsyncEngine,
) -> None:
    """Migration 0033: a decomposed tag or category is stored composed (a list keeping the
    first of two spellings), in the row and in the states its history keeps, counted in
    the term statistics under it, with no new version or history; a composed row is not
    written at all, and a label composing would take past 100 characters stays as sent."""
    await upgrade_to_head(fresh_engine, "0032")
    nfc, nfd = "caf\u00e9", "cafe\u0301"
    long = "\u0958" * 60  # 120 characters composed: kept as sent
    rows = {"decomposed": ([nfd, "x"], nfd), "both": ([nfc, "y", nfd], "general"),
            "composed": ([nfc], nfc), "long": ([long, nfd], long)}
    vector = "[" + ",".join(["0.05"] * 384) + "]"
    ids = {name: uuid.uuid4() for name in rows}
    async with fresh_engine.begin() as conn:
        for name, (tags, category) in rows.items():
            await conn.execute(text(
                "INSERT INTO memories (tenant_id, id, content, embedding, tags, category) "
                "VALUES (:t, :id, 'x', CAST(:v AS halfvec(384)), :tags, :c)"),
                {"t": DEFAULT_TENANT_ID, "id": ids[name], "v": vector, "tags": tags,
                 "c": category})

    async def stored() -> dict[str, Any]:
        async with fresh_engine.connect() as conn:
            found = {r.id: r for r in await conn.execute(text(
                "SELECT id, tags, category, version, updated_at, xmin::text AS xmin "
                "FROM memories"))}
        return {name: found[ids[name]] for name in rows}

    # A state the history keeps, as a PATCH wrote it: a revert compares it with the row.
    async with fresh_engine.begin() as conn:
        await conn.execute(text("UPDATE memories SET importance = 0.9 WHERE id = :id"),
                           {"id": ids["decomposed"]})
    before = await stored()
    await upgrade_to_head(fresh_engine)
    after = await stored()

    assert (after["decomposed"].tags, after["decomposed"].category) == ([nfc, "x"], nfc)
    assert (after["long"].tags, after["long"].category) == ([long, nfc], long)
    assert (after["both"].tags, after["both"].category) == ([nfc, "y"], "general")
    for name in rows:
        assert (after[name].version, after[name].updated_at) == \
            (before[name].version, before[name].updated_at)
    assert after["composed"].xmin == before["composed"].xmin
    async with fresh_engine.connect() as conn:
        kept = (await conn.execute(text("SELECT tags, category FROM memory_versions"))).all()
        assert [(list(r.tags), r.category) for r in kept] == [([nfc, "x"], nfc)]
        counts = {r.lexeme: int(r.df) for r in await conn.execute(text(
            "SELECT lexeme, sum(df) AS df FROM term_stats WHERE tenant_id = :t "
            "AND lexeme LIKE ' %' GROUP BY lexeme HAVING sum(df) <> 0"),
            {"t": DEFAULT_TENANT_ID})}
    assert counts[f" tag:{nfc}"] == 4
    assert counts[f" category:{nfc}"] == 2
    assert f" tag:{nfd}" not in counts
    assert f" category:{nfd}" not in counts


async def test_text_is_indexed_case_folded_without_invisible_characters_and_back(
    fresh_engine: AsyncEngine,
) -> None:
    """Migration 0032: a capital final sigma, a sharp s and a soft hyphen inside a word
    are indexed as the words they spell, in the vectors and the term statistics; the
    other rows are not written; a downgrade indexes them as migration 0031 did."""
    await upgrade_to_head(fresh_engine, "0031")
    spelt = {"greek": "\u039a\u03a9\u03a3\u03a4\u0391\u03a3 \u03bf\u03b4\u03bf\u03c2",
             "sharp": "Gro\u00dfstra\u00dfe", "hyphen": "pass\u00adword",
             "plain": "password rotated"}
    ids = await insert_spelt(fresh_engine, spelt)

    async def indexed() -> tuple[dict[str, Any], dict[str, int]]:
        return await indexed_words(fresh_engine, ids)

    before, df_before = await indexed()
    assert before["hyphen"].words == ["pass\u00adword"]  # a word "password" is not
    assert df_before["password"] == 1

    await upgrade_to_head(fresh_engine)
    after, df_after = await indexed()
    assert sorted(after["greek"].words) == ["\u03ba\u03c9\u03c3\u03c4\u03b1\u03c3",
                                            "\u03bf\u03b4\u03bf\u03c3"]
    assert after["sharp"].words == ["grossstrass"]
    assert after["hyphen"].words == ["password"]
    assert (df_after["password"], df_after.get("pass", 0)) == (2, 0)
    for name in spelt:  # the text as sent, no new version
        assert (after[name].content, after[name].updated_at, after[name].version) == \
            (spelt[name], before[name].updated_at, before[name].version)
    assert after["plain"].xmin == before["plain"].xmin  # not written again

    await downgrade(fresh_engine, "0031")
    again, df_again = await indexed()
    assert {n: sorted(r.words) for n, r in again.items()} == \
        {n: sorted(r.words) for n, r in before.items()}
    assert df_again["password"] == 1
    async with fresh_engine.connect() as conn:
        assert await conn.scalar(text(
            "SELECT count(*) FROM pg_proc WHERE proname = 'engram_text_form'")) == 0


async def test_text_is_indexed_in_its_compatibility_normal_form_and_back_on_downgrade(
    fresh_engine: AsyncEngine,
) -> None:
    """Migration 0031: a ligature ("\ufb01nance", from a PDF), decomposed accents (a Mac's
    "Zoe" with a combining diaeresis) and full-width letters are indexed as the words
    they spell, in the vectors and the term statistics, while the rows' text, versions and
    history stay as they were; a downgrade indexes them as spelt again."""
    await upgrade_to_head(fresh_engine, "0030")
    spelt = {"ligature": "\ufb01nance report", "decomposed": "Zoe\u0308 Bronte\u0308",
             "wide": "\uff21\uff30\uff29 budget", "plain": "finance review"}
    ids = await insert_spelt(fresh_engine, spelt)

    async def indexed() -> tuple[dict[str, Any], dict[str, int]]:
        async with fresh_engine.connect() as conn:
            assert await conn.scalar(text("SELECT count(*) FROM memory_versions")) == 0
        return await indexed_words(fresh_engine, ids)

    before, df_before = await indexed()
    assert "\ufb01nanc" in before["ligature"].words
    assert df_before["financ"] == 1

    await upgrade_to_head(fresh_engine)
    after, df_after = await indexed()
    assert sorted(after["ligature"].words) == ["financ", "report"]
    assert sorted(after["decomposed"].words) == ["bront\u00eb", "zo\u00eb"]
    assert sorted(after["wide"].words) == ["api", "budget"]
    assert (df_after["financ"], df_after.get("\ufb01nanc", 0)) == (2, 0)
    for name in spelt:  # the text as sent, no new version, no history
        assert (after[name].content, after[name].updated_at, after[name].version) == \
            (spelt[name], before[name].updated_at, before[name].version)

    await downgrade(fresh_engine, "0030")
    again, df_again = await indexed()
    assert {n: sorted(r.words) for n, r in again.items()} == \
        {n: sorted(r.words) for n, r in before.items()}
    assert df_again["financ"] == 1
