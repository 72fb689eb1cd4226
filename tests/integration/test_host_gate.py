"""Which names the service answers to, and which web pages, with authentication off and
on (app/service/host_gate.py), through the whole app on the suite's database.

Found by an HTTP probe: with authentication off any Host was served, so a page whose name
DNS re-points at 127.0.0.1 (DNS rebinding) read, wrote and erased the `default` tenant's
memories, and a page of another site could send a form's POST without any."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.resources import Resources
from app.service.host_gate import (
    CrossSiteRequest,
    HostGateMiddleware,
    HostRule,
    host_name,
    is_loopback_name,
    origin_host,
)
from tests.conftest import answers, reconfigured
from tests.integration.test_service_endpoints import assert_problem


@contextlib.asynccontextmanager
async def client_of(resources: Resources, database_url: str, base_url: str,
                    **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with reconfigured(resources, database_url, **overrides) as res:
        app = create_app(res.settings, res)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url=base_url,
                                     event_hooks={"response": [answers()]}) as client:
            yield client


@pytest.fixture
async def auth_off(resources: Resources,
                   database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with client_of(resources, database_url, "http://localhost:8080",
                         auth_enabled=False) as c:
        yield c


async def count(client: httpx.AsyncClient, user_id: str) -> int:
    listed = await client.get("/v1/memories", params={"user_id": user_id},
                              headers={"Host": "localhost:8080"})
    assert listed.status_code == 200, listed.text
    return len(listed.json()["items"])


@pytest.mark.parametrize("host", ["localhost", "localhost:8080", "LOCALHOST.", "127.0.0.1:8080",
                                  "127.3.4.5", "[::1]:8080", "app.localhost:8080"])
async def test_with_auth_off_loopback_names_are_served(
    auth_off: httpx.AsyncClient, host: str,
) -> None:
    answer = await auth_off.post("/v1/memories", json={"content": "Tea at four.",
                                                       "user_id": "gate-loopback"},
                                 headers={"Host": host})
    assert answer.status_code == 201, answer.text


@pytest.mark.parametrize("path", ["/v1/memories?user_id=gate-rebind", "/metrics", "/healthz"])
async def test_with_auth_off_another_name_is_421_and_reads_nothing(
    auth_off: httpx.AsyncClient, path: str,
) -> None:
    answer = await auth_off.get(path, headers={"Host": "attacker.example:8080"})

    problem = assert_problem(answer, 421)
    assert problem["type"].endswith("/host_not_allowed")
    assert "'attacker.example'" in problem["detail"]
    assert "ENGRAM_ALLOWED_HOSTS" in problem["detail"]


async def test_with_auth_off_another_names_write_changes_nothing(
    auth_off: httpx.AsyncClient,
) -> None:
    before = await count(auth_off, "gate-rebind")
    answer = await auth_off.post("/v1/memories", json={"content": "Planted.",
                                                       "user_id": "gate-rebind"},
                                 headers={"Host": "attacker.example:8080"})
    assert_problem(answer, 421)
    assert await count(auth_off, "gate-rebind") == before


@pytest.mark.parametrize("origin", ["http://attacker.example", "null",
                                    "http://127.0.0.1.attacker.example:8080"])
async def test_with_auth_off_a_foreign_pages_request_is_403_and_changes_nothing(
    auth_off: httpx.AsyncClient, origin: str,
) -> None:
    """A form's POST (text/plain, no preflight) needs no rebinding: the browser sends it to
    localhost with the page's Origin."""
    before = await count(auth_off, "gate-origin")
    answer = await auth_off.post("/v1/memories", json={"content": "Planted.",
                                                       "user_id": "gate-origin"},
                                 headers={"Origin": origin})
    problem = assert_problem(answer, 403)
    assert problem["type"].endswith("/cross_site_request")
    assert await count(auth_off, "gate-origin") == before


@pytest.mark.parametrize("origin", ["http://localhost:3000", "http://localhost.:3000",
                                    "http://[::1]:3000", "http://app.localhost"])
async def test_with_auth_off_a_local_pages_request_is_served(
    auth_off: httpx.AsyncClient, origin: str,
) -> None:
    answer = await auth_off.post("/v1/memories", json={"content": "From a local tool.",
                                                       "user_id": "gate-local"},
                                 headers={"Origin": origin})
    assert answer.status_code == 201, answer.text


async def test_allowed_hosts_name_what_else_is_served(
    resources: Resources, database_url: str,
) -> None:
    """A reverse proxy on the same machine passing its own name on, with auth off."""
    async with client_of(resources, database_url, "http://memory.internal", auth_enabled=False,
                         allowed_hosts="memory.internal, other.internal") as c:
        assert (await c.get("/healthz")).status_code == 200
        assert (await c.get("/healthz", headers={"Host": "localhost"})).status_code == 200
        assert_problem(await c.get("/healthz", headers={"Host": "x.internal"}), 421)
        assert (await c.get("/healthz", headers={"Origin": "https://other.internal"})
                ).status_code == 200
    async with client_of(resources, database_url, "http://anything.example", auth_enabled=False,
                         allowed_hosts="*") as c:
        assert (await c.get("/healthz", headers={"Origin": "http://x.example"})
                ).status_code == 200


async def test_with_auth_on_any_name_and_page_are_served_unless_names_are_listed(
    client: httpx.AsyncClient, resources: Resources, database_url: str,
) -> None:
    """A key is needed, which a page cannot borrow from the browser."""
    answer = await client.get("/v1/memories", params={"user_id": "gate-on"},
                              headers={"Host": "engram.example.com",
                                       "Origin": "http://attacker.example"})
    assert answer.status_code == 200, answer.text
    async with client_of(resources, database_url, "http://engram.example.com",
                         allowed_hosts="engram.example.com") as c:
        assert (await c.get("/healthz")).status_code == 200
        problem = assert_problem(await c.get("/v1/memories", headers={"Host": "other.example"}),
                                 421)
        assert "ENGRAM_ALLOWED_HOSTS" in problem["detail"]
        # The probes and metrics under any name (an orchestrator asks by the pod's
        # address), and everything by a loopback name (the image's HEALTHCHECK).
        for path in ("/healthz", "/readyz", "/metrics"):
            answer = await c.get(path, headers={"Host": "10.1.2.3:8080"})
            assert answer.status_code == 200, (path, answer.text)
        assert (await c.get("/openapi.json", headers={"Host": "127.0.0.1:8080"})
                ).status_code == 200


@pytest.mark.parametrize("host", ["a b", "x:abc", "user@host", "", "[::1"])
async def test_a_host_header_that_is_no_host_is_400(
    client: httpx.AsyncClient, host: str,
) -> None:
    assert_problem(await client.get("/healthz", headers={"Host": host}), 400)


def test_host_names_and_the_rule_alone() -> None:
    assert host_name("Example.COM.:443") == "example.com"
    assert host_name("[::1]:80") == "[::1]"
    assert host_name("x/y") is None
    assert [is_loopback_name(h) for h in ("localhost", "a.localhost", "127.0.0.9", "[::1]",
                                          "localhost.example", "10.0.0.1", "[::2]")] == [
        True, True, True, True, False, False, False]
    off = HostRule.of(auth_enabled=False, allowed_hosts=())
    assert off.check_names
    assert off.admits("localhost")
    assert not off.admits("example.com")
    on = HostRule.of(auth_enabled=True, allowed_hosts=())
    assert not on.check_names
    listed = HostRule.of(auth_enabled=True, allowed_hosts=("Engram.Example.",))
    assert listed.check_names
    assert listed.admits("engram.example")
    # Loopback is served whatever the list: the image's HEALTHCHECK asks 127.0.0.1 (a
    # re-probe found it refused).
    assert listed.admits("localhost")
    assert listed.admits("127.0.0.1")
    assert origin_host("http://localhost.:3000") == "localhost"
    assert origin_host("http://[2001:DB8::1]:8080") == "[2001:db8::1]"
    assert origin_host("null") == ""


def test_an_http_1_0_request_without_a_host_is_still_checked_for_its_origin() -> None:
    """A re-probe: a POST with a foreign Origin and no Host (HTTP/1.0) was served."""
    gate = HostGateMiddleware(app=None,  # type: ignore[arg-type]
                              rule=HostRule.of(auth_enabled=False, allowed_hosts=()))
    scope = {"type": "http", "http_version": "1.0", "path": "/v1/memories",
             "headers": [(b"origin", b"http://evil.example")]}

    assert isinstance(gate.refusal(scope), CrossSiteRequest)
    assert gate.refusal({**scope, "headers": []}) is None
