"""One tenant's data out of a database and into another, or back over itself: `python -m
app tenants export NAME FILE` and `tenants import FILE [--as NAME] [--replace]`.

A backup (app/backup.py) is the whole database, so restoring it rolls every tenant back;
an export is one tenant's, so one tenant can be moved to another deployment, handed its
data, or restored alone: restore last night's backup into a scratch database, export
the tenant there, import it with `--replace` here.

An export is one read-only snapshot (REPEATABLE READ), written under a temporary name and
renamed, so a file by the name asked for is always whole. An import is one transaction:
a file that is damaged, cut short or does not fit leaves the database as it was. A new
tenant comes with its keys and limits; `--replace` replaces the data of an existing one
(memories and their history, sessions, consolidation runs) and keeps its keys and limits,
so a key revoked since the export stays revoked. The file must be of this schema and of
the vectors' model the database holds (an empty database takes any).
"""

from __future__ import annotations

import gzip
import json
import os
import time
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.exc import DataError, DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.destination import check_destination
from app.embedding_space.repository import EmbeddingSpaceRepository
from app.embedding_space.service import refuse_while_serving
from app.errors import Conflict, NotFound, sqlstate
from app.models import DEFAULT_TENANT_ID
from app.tenants.transfer_format import (
    DATA_TABLES,
    KEYS,
    TABLES,
    TENANTS,
    Header,
    RowLine,
    Trailer,
    TransferError,
    check_counts,
    check_order,
    check_schema,
    parse_header,
    parse_line,
    row_line,
    trailer_line,
    vector_space_on_import,
)
from app.tenants.transfer_repository import TransferRepository

# Rows an INSERT carries: a memory's JSON is ~4 KB (its vector as text), so ~2 MB.
BATCH_ROWS = 500

UNDER_WAY = ("the run was under way when its tenant was exported; the groups it had "
             "committed by then were imported with it")


@dataclass(frozen=True)
class TransferReport:
    tenant: str
    path: Path
    rows: dict[str, int]
    seconds: float
    size_bytes: int
    # An import over an existing tenant: what of it was deleted first.
    replaced: dict[str, int] | None = None
    runs_failed: int = 0


async def export_tenant(engine: AsyncEngine, name: str, path: Path) -> TransferReport:
    """Write the tenant named `name` to `path`."""
    try:
        check_destination(path)
    except OSError as exc:
        raise TransferError(f"cannot write {exc.filename}: {exc.strerror}") from None
    started = time.monotonic()
    partial = path.with_name(f".{path.name}.partial")
    async with engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="REPEATABLE READ")
        async with conn.begin():
            repo = TransferRepository(conn)
            await repo.read_only()
            tenant_id = await repo.tenant_id(name)
            if tenant_id is None:
                raise NotFound(f"no tenant named {name!r}")
            model, reembedding = await repo.vector_space()
            if reembedding or model is None:
                raise TransferError(
                    "a re-embedding of this database's memories is unfinished (`python -m "
                    "app reembed` goes on where it stopped); export once it is done"
                    if reembedding else
                    "this database has not recorded its vectors' model yet: start the "
                    "service on it once, then export")
            header = Header(
                schema=str(await repo.schema_revision()), vector_space=model,
                exported_at=datetime.now(UTC).isoformat(), tenant_id=tenant_id,
                tenant_name=name,
                columns={t.name: tuple(c for c in await repo.columns(t.name)
                                       if c not in t.derived) for t in TABLES})
            counts: dict[str, int] = {}
            try:
                # Opened apart from the `with` below, so only its own failure reads as
                # the file's.
                # Readable by its owner alone: it holds the tenant's memories.
                fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                out = gzip.open(  # noqa: SIM115
                    os.fdopen(fd, "wb"), "wt", encoding="utf-8", compresslevel=6)
            except OSError as exc:
                raise TransferError(f"cannot write {path}: {exc.strerror or exc}") from None
            try:
                with out:
                    out.write(header.line())
                    for table in TABLES:
                        counts[table.name] = 0
                        async for row in repo.rows(table, tenant_id):
                            out.write(row_line(table.name, row))
                            counts[table.name] += 1
                    out.write(trailer_line(counts))
                os.replace(partial, path)
            except BaseException:
                partial.unlink(missing_ok=True)
                raise
    return TransferReport(name, path, counts, time.monotonic() - started,
                          os.stat(path).st_size)


def read_header(path: Path) -> Header:
    """The file's header alone (what an import would bring), read without importing."""
    with _lines(path) as lines:
        return parse_header(next(lines, ""))


async def _another_name(repo: TransferRepository, exported: uuid.UUID) -> str:
    """What the refusal of an import over an existing name says of --as: the export keeps
    its tenant's id, so another name only works where no tenant has that id. Before, it
    always pointed at --as, which the `default` tenant's export (its id is in every
    database) and a second import into one database can never take."""
    holder = await repo.tenant_name(exported)
    if holder is None:
        return "--as NAME imports the export as another tenant"
    if exported == DEFAULT_TENANT_ID:
        return ("and it cannot take another name: it is the `default` tenant, which every "
                "database has; to reach it with authentication on, give it a key: keys "
                "create --tenant default")
    return (f"and --as cannot import it beside {holder!r} here, which has the exported "
            "tenant's id (an export keeps its ids): import it into another database")


async def import_tenant(engine: AsyncEngine, path: Path, *, name: str | None = None,
                        replace: bool = False) -> TransferReport:
    """Import the export at `path` as the tenant `name` (default: the exported one's
    name): a new tenant, or with `replace` over the existing one's data."""
    started = time.monotonic()
    with _lines(path) as lines:
        header = parse_header(next(lines, ""))
        target = name or header.tenant_name
        try:
            async with engine.begin() as conn:
                repo = TransferRepository(conn)
                check_schema(header.schema, str(await repo.schema_revision()))
                existing = await repo.tenant_id(target, lock=True)
                replaced: dict[str, int] | None = None
                if existing is not None:
                    if not replace:
                        raise Conflict(
                            f"a tenant named {target!r} exists: --replace replaces its data "
                            "with the export's (its keys and limits stay), "
                            + await _another_name(repo, header.tenant_id))
                    live = await repo.live_runs(existing)
                    if live:
                        raise Conflict(
                            f"a consolidation run of {target!r} is running ({live[0]}); "
                            "import once it has finished")
                    replaced = await repo.clear(existing)
                    tenant_id = existing
                else:
                    if replace:
                        raise NotFound(f"no tenant named {target!r} to replace; without "
                                       "--replace the export is imported as a new tenant")
                    holder = await repo.tenant_name(header.tenant_id)
                    if holder is not None and header.tenant_id == DEFAULT_TENANT_ID:
                        raise Conflict(
                            "the export is of the `default` tenant, which every database "
                            "has (the tenant of every call with authentication off): "
                            f"import it with --replace over {holder!r}; to reach it with "
                            "authentication on, give it a key: keys create --tenant "
                            "default")
                    if holder is not None:
                        raise Conflict(
                            f"tenant {holder!r} here is the exported tenant itself (the same "
                            "id): import the export into another database, or with "
                            f"--replace over {holder!r}")
                    tenant_id = header.tenant_id
                await _check_vector_space(conn, header.vector_space)
                rows = await _insert_rows(repo, header, lines, tenant_id, target,
                                          new=replaced is None)
                if replaced is None:
                    shared = await repo.shared_key(tenant_id)
                    if shared is not None:
                        raise Conflict(
                            f"the export's key {shared[0]}... is a key of tenant "
                            f"{shared[1]!r} here too: a request with it would act as "
                            "either; revoke it in one of them first")
                failed = await repo.fail_runs_under_way(tenant_id, UNDER_WAY)
        except IntegrityError as exc:
            raise TransferError(_not_fitting(exc)) from None
        except DataError as exc:
            raise TransferError(f"a value of the export does not fit its column: "
                                f"{_first_line(exc)} (nothing was imported)") from None
        except DBAPIError as exc:
            # pgvector's "expected 384 dimensions, not 3" is SQLSTATE 22000, which the
            # driver does not class as a DataError.
            if not (sqlstate(exc) or "").startswith("22"):
                raise
            raise TransferError(f"a value of the export does not fit its column: "
                                f"{_first_line(exc)} (nothing was imported)") from None
    return TransferReport(target, path, rows, time.monotonic() - started,
                          os.stat(path).st_size, replaced, failed)


async def _check_vector_space(conn: AsyncConnection, model: str) -> None:
    space = EmbeddingSpaceRepository(conn)
    stored = await space.lock_row()
    decision = vector_space_on_import(
        model, None if stored is None else stored.model,
        stored is not None and stored.target_model is not None, await space.has_memories())
    if decision.action == "refuse":
        raise TransferError(decision.reason)
    if decision.action == "record":
        if stored is not None:
            # A service running on the database embeds queries with the model it recorded;
            # it must start again to see the change (and refuse unless it has this one).
            await refuse_while_serving(
                space, f"since the database's vectors' model changes to {model}")
        await space.record(model)


async def _insert_rows(repo: TransferRepository, header: Header, lines: Iterator[str],
                       tenant_id: uuid.UUID, name: str, *, new: bool) -> dict[str, int]:
    """Every row line into its table, in batches; the rows read per table. The tenant's
    own row and keys only for a new tenant (an existing one keeps its own)."""
    read: dict[str, int] = {}
    trailer: Trailer | None = None
    batch: list[dict[str, Any]] = []
    current: str | None = None
    checked: set[str] = set()

    # The rows' owner here: the tenant's id (an existing one's with --replace) and name.
    owner = {"tenant_id": str(tenant_id)}
    own_row = {"id": str(tenant_id), "name": name}

    async def flush() -> None:
        if batch and current is not None:
            await repo.insert(current, header.columns[current],
                              json.dumps(batch, ensure_ascii=False))
        batch.clear()

    for number, line in enumerate(lines, start=2):
        if trailer is not None:
            raise TransferError(f"line {number} comes after the export's last line: the file "
                                "is damaged")
        parsed = parse_line(line, number)
        if isinstance(parsed, Trailer):
            trailer = parsed
            continue
        assert isinstance(parsed, RowLine)
        if parsed.table != current:
            check_order(current, parsed.table)
            await flush()
            current = parsed.table
            if current not in checked:
                await _check_columns(repo, header, current)
                checked.add(current)
        read[current] = read.get(current, 0) + 1
        if not new and current in (TENANTS.name, KEYS.name):
            continue
        unknown = parsed.row.keys() - set(header.columns[current])
        if unknown:
            raise TransferError(f"line {number} has columns its header does not list: "
                                f"{sorted(unknown)}")
        batch.append(parsed.row | (own_row if current == TENANTS.name else owner))
        if len(batch) >= BATCH_ROWS:
            await flush()
    await flush()
    check_counts(read, trailer)
    if new and read.get(TENANTS.name) != 1:
        raise TransferError("the export holds no tenant row")
    return {t.name: read.get(t.name, 0) for t in (TENANTS, KEYS, *DATA_TABLES)}


async def _check_columns(repo: TransferRepository, header: Header, table: str) -> None:
    here = set(await repo.columns(table))
    missing = [c for c in header.columns[table] if c not in here]
    if missing:
        raise TransferError(f"the export's {table} has columns this database lacks: "
                            f"{missing}")


@contextmanager
def _lines(path: Path) -> Iterator[Iterator[str]]:
    """The file's lines; a file that is missing, not gzip or cut short is a TransferError."""
    try:
        # Opened apart from the `with` below, so the caller's errors are not the file's.
        fh = gzip.open(path, "rt", encoding="utf-8")  # noqa: SIM115
    except FileNotFoundError:
        raise TransferError(f"no file {path}") from None
    except OSError as exc:
        raise TransferError(f"cannot read {path}: {exc.strerror or exc}") from None
    with fh:
        yield _guarded(fh)


def _guarded(fh: Any) -> Iterator[str]:
    try:
        yield from fh
    except (EOFError, gzip.BadGzipFile, zlib.error, UnicodeDecodeError) as exc:
        raise TransferError(f"the file is not a whole gzip file of text ({exc}); nothing "
                            "was imported") from None


def _first_line(exc: Exception) -> str:
    orig = getattr(exc, "orig", None) or exc
    return str(orig).strip().splitlines()[0]


def _not_fitting(exc: IntegrityError) -> str:
    detail = str(getattr(exc, "orig", exc))
    if "ix_memories_id" in detail:
        return ("a memory of the export is already stored here under another tenant (the "
                "same id): the export was taken from this database; import it into "
                "another one, or with --replace over the tenant it came from")
    return f"the export's rows do not fit this database: {_first_line(exc)}"
