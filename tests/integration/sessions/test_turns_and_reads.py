"""Appending turns and reading sessions over HTTP: the log, the session's identity, bad
input, tenancy, idempotent retries, and each context strategy."""

from __future__ import annotations

import asyncio
import re
from datetime import datetime

import httpx
import pytest
from sqlalchemy import text

from app.resources import Resources
from app.sessions.config import fold_policy
from app.sessions.repository import SessionReader, SessionRepository
from app.sessions.service import SessionReads
from app.sessions.types import SessionState
from app.validation import PATH_SEGMENT_PATTERN
from tests.conftest import TenantKey, make_client
from tests.integration.memories.test_idempotency import stored_as_before_the_upgrade
from tests.integration.sessions.conftest import append, get_json, new_id, with_settings


async def test_the_first_turn_creates_the_session_and_turns_are_numbered(
    client: httpx.AsyncClient,
) -> None:
    sid = new_id()
    first = await append(client, sid, "Hello, I am Dana.", user_id="u1", agent_id="a1")
    second = await append(client, sid, "Hi Dana, how can I help?", role="assistant")

    assert (first["seq"], second["seq"]) == (1, 2)
    assert first["session_id"] == sid
    assert (first["role"], first["content"], first["tokens"]) == ("user", "Hello, I am Dana.", 5)
    assert (second["user_id"], second["agent_id"]) == (None, None)
    session = await get_json(client, f"/v1/sessions/{sid}")
    assert session["strategy"] == "rolling_summary"  # the default
    assert (session["user_id"], session["agent_id"]) == ("u1", "a1")
    assert session["counts"] == {"turns": 2, "unsummarised": 2, "summarised": 0, "dropped": 0}
    assert session["cursor"] == 0
    assert session["backlog"] == {"due": 0, "max": 10}
    assert session["health"] == {"state": "healthy", "consecutive_failures": 0,
                                 "last_error": None, "changed_at": None}
    assert session["updated_at"] == second["created_at"]


async def test_content_is_trimmed_and_kept_exactly_otherwise(client: httpx.AsyncClient) -> None:
    sid = new_id()
    text = "  Line one.\n\n  Ünïcödé — 東京 🙂  "
    turn = await append(client, sid, text)
    context = await get_json(client, f"/v1/sessions/{sid}/context")
    assert turn["content"] == text.strip()
    assert context["turns"][0]["content"] == text.strip()


@pytest.mark.parametrize(("path", "field"), [
    ("/v1/sessions/{sid}", None),
    ("/v1/sessions/{sid}/context", None),
    ("/v1/sessions/{sid}/events", None),
])
async def test_an_unknown_session_is_404(client: httpx.AsyncClient, path: str,
                                         field: None) -> None:
    resp = await client.get(path.format(sid=new_id()))
    assert resp.status_code == 404
    assert resp.headers["content-type"] == "application/problem+json"
    assert "not found" in resp.json()["detail"]


@pytest.mark.parametrize(("body", "field"), [
    ({"role": "robot", "content": "x"}, "role"),
    ({"content": "x"}, "role"),
    ({"role": "user"}, "content"),
    ({"role": "user", "content": "   "}, "content"),
    ({"role": "user", "content": "x" * 32769}, "content"),
    ({"role": "user", "content": "a\u0000b"}, "content"),
    ({"role": "user", "content": "x", "user_id": ""}, "user_id"),
    ({"role": "user", "content": "x", "user_id": "   "}, "user_id"),
    ({"role": "user", "content": "x", "agent_id": "a" * 256}, "agent_id"),
    ({"role": "user", "content": "x", "strategy": "none"}, "strategy"),
    ({"role": 1, "content": "x"}, "role"),
])
async def test_bad_turns_are_422_naming_the_field_and_change_nothing(
    client: httpx.AsyncClient, body: dict[str, object], field: str,
) -> None:
    sid = new_id()
    resp = await client.post(f"/v1/sessions/{sid}/turns", json=body)

    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"] == "application/problem+json"
    assert field in [e["field"] for e in resp.json()["errors"]]
    assert (await client.get(f"/v1/sessions/{sid}")).status_code == 404


async def test_a_session_id_over_255_characters_is_422_naming_the_path(
    client: httpx.AsyncClient,
) -> None:
    resp = await client.post(f"/v1/sessions/{'s' * 256}/turns",
                             json={"role": "user", "content": "x"})
    assert resp.status_code == 422
    assert [e["field"] for e in resp.json()["errors"]] == ["path.session_id"]


@pytest.mark.parametrize("raw", ["%2E", "%2E%2E", ".%2E"])
async def test_a_session_id_no_url_could_name_is_422_naming_the_path(
    client: httpx.AsyncClient, raw: str,
) -> None:
    """Found by an exploratory contract probe: a raw request (curl --path-as-is) made a
    session named '..', which every client resolves away before sending, so none could
    read or delete it again."""
    resp = await client.post(f"/v1/sessions/{raw}/turns", json={"role": "user",
                                                               "content": "x"})
    assert resp.status_code == 422, resp.text
    assert [e["field"] for e in resp.json()["errors"]] == ["path.session_id"]
    assert "'..'" in resp.json()["errors"][0]["message"]
    listed = await client.get("/v1/sessions")
    assert listed.json()["items"] == []
    # Dots within an id are an id like any other.
    for sid in ("...", "v1.2", ".hidden"):
        made = await client.post(f"/v1/sessions/{sid}/turns", json={"role": "user",
                                                                     "content": "x"})
        assert made.status_code == 201, made.text


def test_the_declared_session_id_pattern_says_what_the_service_refuses() -> None:
    pattern = re.compile(PATH_SEGMENT_PATTERN)
    for refused in (".", "..", "a/b", "/", "  ", ""):
        assert not pattern.search(refused), refused
    for allowed in ("...", "v1.2", ".hidden", "chat-42", " a "):
        assert pattern.search(allowed), allowed


async def test_a_blank_session_id_is_422_naming_the_path(client: httpx.AsyncClient) -> None:
    resp = await client.post("/v1/sessions/%20%20/turns", json={"role": "user", "content": "x"})
    assert resp.status_code == 422
    assert [e["field"] for e in resp.json()["errors"]] == ["path.session_id"]
    assert "blank" in resp.json()["errors"][0]["message"]


async def test_a_turn_naming_another_user_is_409_appends_nothing_and_is_recorded(
    client: httpx.AsyncClient,
) -> None:
    sid = new_id()
    await append(client, sid, "I am u1.", user_id="u1")

    resp = await client.post(f"/v1/sessions/{sid}/turns",
                             json={"role": "user", "content": "I am u2.", "user_id": "u2"})

    assert resp.status_code == 409
    problem = resp.json()
    assert resp.headers["content-type"] == "application/problem+json"
    assert problem["type"].endswith("/session_identity_conflict")
    assert [e["field"] for e in problem["errors"]] == ["user_id"]
    assert "'u1'" in problem["detail"]
    assert "'u2'" in problem["detail"]
    session = await get_json(client, f"/v1/sessions/{sid}")
    assert session["counts"]["turns"] == 1
    assert session["user_id"] == "u1"
    events = (await get_json(client, f"/v1/sessions/{sid}/events"))["items"]
    assert [e["kind"] for e in events] == ["identity_rejected"]
    assert events[0]["detail"] == {"fields": {"user_id": "u2"}, "role": "user",
                                   "session": {"user_id": "u1", "agent_id": None}}


async def test_identity_is_adopted_from_the_first_turn_that_names_it(
    client: httpx.AsyncClient,
) -> None:
    sid = new_id()
    await append(client, sid, "anonymous start")
    await append(client, sid, "now with an agent", role="assistant", agent_id="a1")
    await append(client, sid, "and a user", user_id="u1")
    await append(client, sid, "same agent again", role="assistant", agent_id="a1")
    rejected = await append(client, sid, "other agent", role="assistant", agent_id="a2",
                            expect=409)

    assert [e["field"] for e in rejected["errors"]] == ["agent_id"]
    session = await get_json(client, f"/v1/sessions/{sid}")
    assert (session["user_id"], session["agent_id"]) == ("u1", "a1")
    assert session["counts"]["turns"] == 4


async def test_sessions_are_confined_to_their_tenant(
    resources: Resources, client: httpx.AsyncClient, other_tenant: TenantKey,
) -> None:
    sid = new_id()
    await append(client, sid, "tenant one's secret", user_id="u1")
    async with make_client(resources, other_tenant.headers) as other:
        for path in (f"/v1/sessions/{sid}", f"/v1/sessions/{sid}/context",
                     f"/v1/sessions/{sid}/events"):
            assert (await other.get(path)).status_code == 404
        # The same id in another tenant is another session, with its own identity.
        turn = await append(other, sid, "tenant two", user_id="someone-else")
        assert turn["seq"] == 1
        context = await get_json(other, f"/v1/sessions/{sid}/context")
    assert [t["content"] for t in context["turns"]] == ["tenant two"]
    assert (await get_json(client, f"/v1/sessions/{sid}"))["counts"]["turns"] == 1


async def test_a_missing_or_wrong_key_is_401(anon_client: httpx.AsyncClient) -> None:
    resp = await anon_client.post(f"/v1/sessions/{new_id()}/turns",
                                  json={"role": "user", "content": "x"})
    assert resp.status_code == 401
    assert (await anon_client.get(f"/v1/sessions/{new_id()}")).status_code == 401


async def test_a_retry_with_the_same_idempotency_key_appends_once(
    client: httpx.AsyncClient,
) -> None:
    sid = new_id()
    headers = {"Idempotency-Key": "turn-1"}
    body = {"role": "user", "content": "only once", "user_id": "u1"}
    first = await client.post(f"/v1/sessions/{sid}/turns", json=body, headers=headers)
    retry = await client.post(f"/v1/sessions/{sid}/turns", json=body, headers=headers)

    assert (first.status_code, retry.status_code) == (201, 201)
    assert retry.content == first.content
    assert retry.headers["idempotent-replayed"] == "true"
    assert (await get_json(client, f"/v1/sessions/{sid}"))["counts"]["turns"] == 1
    # The same key for another session's turn is another request.
    other = await client.post(f"/v1/sessions/{new_id()}/turns", json=body, headers=headers)
    assert other.status_code == 409
    # Its defaults spelt out (a generated client's form), the same request.
    spelt = await client.post(f"/v1/sessions/{sid}/turns", json={**body, "agent_id": None},
                              headers=headers)
    assert (spelt.status_code, spelt.content) == (201, first.content)


async def test_a_turns_retry_across_the_upgrade_of_a_key_hashed_the_older_way_replays(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
) -> None:
    """An upgrade probe: the older version hashed the fields as sent, so a generated
    client's retry after the upgrade's restart was a 409."""
    sid = new_id()
    headers = {"Idempotency-Key": f"turn-up-{sid}"}
    body = {"role": "user", "content": "said before the upgrade", "user_id": "u1",
            "agent_id": None}
    first = await client.post(f"/v1/sessions/{sid}/turns", json=body, headers=headers)
    assert first.status_code == 201
    await stored_as_before_the_upgrade(resources, tenant, headers["Idempotency-Key"],
                                       "appendTurn", {"session_id": sid, **body})

    retry = await client.post(f"/v1/sessions/{sid}/turns", json=body, headers=headers)

    assert (retry.status_code, retry.content) == (201, first.content)
    assert retry.headers["idempotent-replayed"] == "true"
    assert (await get_json(client, f"/v1/sessions/{sid}"))["counts"]["turns"] == 1


async def test_a_retry_after_the_session_was_deleted_is_410_and_creates_nothing(
    client: httpx.AsyncClient,
) -> None:
    sid = new_id()
    headers = {"Idempotency-Key": f"turn-{sid}"}
    body = {"role": "user", "content": "said once", "user_id": "u1"}
    first = await client.post(f"/v1/sessions/{sid}/turns", json=body, headers=headers)
    assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204

    retry = await client.post(f"/v1/sessions/{sid}/turns", json=body, headers=headers)

    # The answer, which quoted the turn, went with the session (since 2026-12-02; it was
    # replayed whole).
    assert retry.status_code == 410, first.text
    assert retry.headers["idempotent-replayed"] == "true"
    # Not begun again, empty, by the retry of a turn that was deleted with it.
    assert (await client.get(f"/v1/sessions/{sid}")).status_code == 404
    assert sid not in [s["session_id"] for s in
                       (await get_json(client, "/v1/sessions?user_id=u1"))["items"]]


@pytest.mark.parametrize("erase", ["one", "of_user"])
async def test_a_deleted_sessions_keyed_turn_is_not_served_back(
    client: httpx.AsyncClient, erase: str,
) -> None:
    """A day-2 probe: after a user's sessions were deleted, a retry with a turn's key
    served the turn's text back; now its answer is erased with the session (410), and the
    retry creates nothing."""
    sid = new_id()
    headers = {"Idempotency-Key": f"turn-erase-{sid}"}
    body = {"role": "user", "content": "my address is 12 Secret Lane", "user_id": "gdpr-s"}
    assert (await client.post(f"/v1/sessions/{sid}/turns", json=body,
                              headers=headers)).status_code == 201
    deleted = (await client.delete(f"/v1/sessions/{sid}") if erase == "one" else
               await client.delete("/v1/sessions", params={"user_id": "gdpr-s"}))
    assert deleted.status_code in (200, 204), deleted.text

    retry = await client.post(f"/v1/sessions/{sid}/turns", json=body, headers=headers)

    assert retry.status_code == 410, retry.text
    assert "Secret Lane" not in retry.text
    assert (await client.get(f"/v1/sessions/{sid}")).status_code == 404


async def test_truncation_shows_the_newest_turns_that_fit_the_budget(
    resources: Resources, tenant: TenantKey,
) -> None:
    res = with_settings(resources, session_strategy="truncation", session_budget_tokens=10)
    sid = new_id()
    async with make_client(res, tenant.headers) as client:
        for i in range(5):
            await append(client, sid, f"turn number {i}")  # 4 tokens each
        context = await get_json(client, f"/v1/sessions/{sid}/context")
        session = await get_json(client, f"/v1/sessions/{sid}")

    assert (context["strategy"], context["mode"]) == ("truncation", "truncation")
    assert [t["seq"] for t in context["turns"]] == [4, 5]
    assert (context["omitted_turns"], context["tokens"], context["budget_tokens"]) == (3, 8, 10)
    assert (context["summary"], context["warning"]) == (None, None)
    assert session["backlog"]["due"] == 0


async def test_strategy_none_stores_turns_and_gives_an_empty_context(
    resources: Resources, tenant: TenantKey,
) -> None:
    res = with_settings(resources, session_strategy="none")
    sid = new_id()
    async with make_client(res, tenant.headers) as client:
        for i in range(3):
            await append(client, sid, f"turn {i}")
        context = await get_json(client, f"/v1/sessions/{sid}/context")
        session = await get_json(client, f"/v1/sessions/{sid}")

    assert context["mode"] == "none"
    assert (context["turns"], context["summary"], context["tokens"]) == ([], None, 0)
    assert session["counts"]["turns"] == 3


async def test_a_session_keeps_the_strategy_it_was_created_with(
    resources: Resources, tenant: TenantKey,
) -> None:
    sid = new_id()
    async with make_client(with_settings(resources, session_strategy="none"),
                           tenant.headers) as client:
        await append(client, sid, "created under none")
    async with make_client(with_settings(resources, session_strategy="truncation"),
                           tenant.headers) as client:
        await append(client, sid, "appended under truncation")
        session = await get_json(client, f"/v1/sessions/{sid}")
    assert session["strategy"] == "none"


async def test_events_page_newest_first_without_repeats(client: httpx.AsyncClient) -> None:
    sid = new_id()
    await append(client, sid, "hello", user_id="u1")
    for i in range(5):
        await append(client, sid, f"intruder {i}", user_id=f"x{i}", expect=409)

    seen: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, str | int] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        resp = await client.get(f"/v1/sessions/{sid}/events", params=params)
        assert resp.status_code == 200
        page = resp.json()
        seen += [e["detail"]["fields"]["user_id"] for e in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ["x4", "x3", "x2", "x1", "x0"]
    bad = await client.get(f"/v1/sessions/{sid}/events", params={"cursor": "nonsense"})
    assert bad.status_code == 422


async def test_deleting_a_session_removes_its_log_and_events_and_nothing_else(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
) -> None:
    sid = new_id()
    await append(client, sid, "to be forgotten", user_id="u1")
    await append(client, sid, "intruder", user_id="u2", expect=409)
    memory = await client.post("/v1/memories", json={"content": "kept", "session_id": sid})
    assert memory.status_code == 201

    resp = await client.delete(f"/v1/sessions/{sid}")

    assert resp.status_code == 204
    for path in (f"/v1/sessions/{sid}", f"/v1/sessions/{sid}/context",
                 f"/v1/sessions/{sid}/events"):
        assert (await client.get(path)).status_code == 404
    async with resources.engine.connect() as conn:
        left = await conn.scalar(text(
            "SELECT (SELECT count(*) FROM session_turns WHERE tenant_id = :t AND session_id = :s)"
            " + (SELECT count(*) FROM session_events WHERE tenant_id = :t AND session_id = :s)"),
            {"t": tenant.tenant_id, "s": sid})
    assert left == 0
    assert (await client.get(f"/v1/memories/{memory.json()['id']}")).status_code == 200
    assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 404
    # The id can be used again: a new session, numbered from 1.
    assert (await append(client, sid, "a fresh start", user_id="u2"))["seq"] == 1


async def test_another_tenant_cannot_delete_a_session(
    resources: Resources, client: httpx.AsyncClient, other_tenant: TenantKey,
) -> None:
    sid = new_id()
    await append(client, sid, "mine")
    async with make_client(resources, other_tenant.headers) as other:
        assert (await other.delete(f"/v1/sessions/{sid}")).status_code == 404
    assert (await get_json(client, f"/v1/sessions/{sid}"))["counts"]["turns"] == 1


async def test_concurrent_appends_get_consecutive_numbers_without_gaps(
    client: httpx.AsyncClient,
) -> None:
    sid = new_id()  # new: the racing first turns must create one session between them
    turns = await asyncio.gather(*(append(client, sid, f"racing turn {i}")
                                   for i in range(20)))

    assert sorted(t["seq"] for t in turns) == list(range(1, 21))
    context = await get_json(client, f"/v1/sessions/{sid}/context")
    assert [t["seq"] for t in context["turns"]] == list(range(1, 21))
    assert {t["content"] for t in context["turns"]} == {f"racing turn {i}" for i in range(20)}
    # A later turn is never stamped earlier: newest first by seq is newest first by time.
    stamps = [datetime.fromisoformat(t["created_at"]) for t in context["turns"]]
    assert stamps == sorted(stamps)
    session = await get_json(client, f"/v1/sessions/{sid}")
    assert session["updated_at"] == context["turns"][-1]["created_at"]


async def test_a_context_call_may_bring_its_own_budget(
    resources: Resources, tenant: TenantKey,
) -> None:
    res = with_settings(resources, session_strategy="truncation")
    sid = new_id()
    async with make_client(res, tenant.headers) as client:
        for i in range(5):
            await append(client, sid, f"turn number {i}")  # 4 tokens each
        narrow = await get_json(client, f"/v1/sessions/{sid}/context?budget_tokens=9")
        default = await get_json(client, f"/v1/sessions/{sid}/context")
        bad = [await client.get(f"/v1/sessions/{sid}/context", params={"budget_tokens": v})
               for v in ("0", "1000001", "many")]

    assert ([t["seq"] for t in narrow["turns"]], narrow["budget_tokens"]) == ([4, 5], 9)
    assert (len(default["turns"]), default["budget_tokens"]) == (5, 2000)
    for resp in bad:
        assert resp.status_code == 422
        assert [e["field"] for e in resp.json()["errors"]] == ["query.budget_tokens"]


async def test_an_append_that_fails_half_way_leaves_nothing(
    small_client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch,
) -> None:
    sid = new_id()
    for i in range(5):
        await append(small_client, sid, f"turn {i}", user_id="u1")

    async def broken(self: SessionRepository, session_id: str) -> None:
        raise RuntimeError("the database went away after the turn's insert")

    # The sixth turn makes a fold due: its turn row and the session's count are written,
    # then flagging the fold fails.
    monkeypatch.setattr(SessionRepository, "mark_fold_due", broken)
    resp = await small_client.post(f"/v1/sessions/{sid}/turns",
                                   json={"role": "user", "content": "lost?"})
    monkeypatch.undo()

    assert resp.status_code == 500
    assert resp.headers["content-type"] == "application/problem+json"
    session = await get_json(small_client, f"/v1/sessions/{sid}")
    context = await get_json(small_client, f"/v1/sessions/{sid}/context")
    assert session["counts"]["turns"] == 5
    assert [t["content"] for t in context["turns"]] == [f"turn {i}" for i in range(5)]
    # The number is not burnt: the next turn is the sixth.
    assert (await append(small_client, sid, "the real sixth"))["seq"] == 6


class AppendingBetweenReads(SessionReader):
    """Appends a turn through HTTP after the session is read, before its turns are: the
    context's two statements run outside any transaction."""

    def __init__(self, inner: SessionReader, client: httpx.AsyncClient) -> None:
        super().__init__(inner.db, inner.tenant_id)
        self.client = client

    async def get(self, session_id: str) -> SessionState | None:
        state = await super().get(session_id)
        await append(self.client, session_id, "a turn appended between the reads")
        return state


async def test_a_context_is_the_session_as_read_without_turns_appended_meanwhile(
    resources: Resources, tenant: TenantKey, client: httpx.AsyncClient,
) -> None:
    res = with_settings(resources, session_strategy="truncation")
    sid = new_id()
    async with make_client(res, tenant.headers) as c:
        for i in range(3):
            await append(c, sid, f"turn {i + 1}")
    reader = SessionReader(await resources.memory_reader(), tenant.tenant_id)
    reads = SessionReads(AppendingBetweenReads(reader, client), folds=fold_policy(res.settings),
                         budget_tokens=2000)

    context = await reads.context(sid)

    assert [t.seq for t in context.turns] == [1, 2, 3]
    assert context.omitted_turns == 0
    assert (await get_json(client, f"/v1/sessions/{sid}"))["counts"]["turns"] == 4
