"""The tenant export file and the rules an import follows: pure, no I/O.

The file is gzip-compressed JSON Lines: a header (what it is, the schema and the vector
model it was taken at, the tenant, each table's columns), then one line per row (`{"table":
..., "row": {...}}`) table by table in the order an import inserts them, then a trailer
with each table's row count, so a file cut short is refused instead of half-imported.

What goes in is what the tenant owns and the database cannot derive: its row and keys, its
memories (vectors included, the full-text vector not: a trigger computes it) and their
history, its sessions with their turns and events, its consolidation runs and the
automatic consolidation's write counters. Not its idempotency keys (stored answers that
live a day and name rows of this database), the search's term statistics (triggers keep
them) or its jobs in the queue.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from app.validation import is_storable

FORMAT = "engram-tenant-export"
VERSION = 1


@dataclass(frozen=True)
class Table:
    name: str
    # The file lists rows in this order, so two exports of the same data are the same.
    order_by: tuple[str, ...]
    # Columns the database derives on insert.
    derived: tuple[str, ...] = ()


TENANTS = Table("tenants", ("id",))
KEYS = Table("api_keys", ("id",))
# Inserted after the tenant's row and keys, in this order (foreign keys).
DATA_TABLES = (
    Table("memories", ("id",), derived=("tsv",)),
    Table("memory_versions", ("memory_id", "version")),
    Table("sessions", ("session_id",)),
    Table("session_turns", ("session_id", "seq")),
    Table("session_events", ("id",)),
    Table("consolidation_runs", ("id",)),
    Table("scope_write_counters", ("scope_key",)),
)
TABLES = (TENANTS, KEYS, *DATA_TABLES)
TABLE_NAMES = tuple(t.name for t in TABLES)


class TransferError(ValueError):
    """The file cannot be imported (or written) as asked; the message says why."""


@dataclass(frozen=True)
class Header:
    schema: str
    vector_space: str
    exported_at: str
    tenant_id: uuid.UUID
    tenant_name: str
    columns: dict[str, tuple[str, ...]]

    def line(self) -> str:
        return json.dumps({
            "format": FORMAT, "version": VERSION, "schema": self.schema,
            "vector_space": self.vector_space, "exported_at": self.exported_at,
            "tenant": {"id": str(self.tenant_id), "name": self.tenant_name},
            "columns": {name: list(cols) for name, cols in self.columns.items()},
        }, ensure_ascii=False) + "\n"


def row_line(table: str, row_json: str) -> str:
    """A row as the database wrote it in JSON (to_jsonb), unparsed."""
    return f'{{"table": {json.dumps(table)}, "row": {row_json}}}\n'


def trailer_line(counts: dict[str, int]) -> str:
    return json.dumps({"end": True, "rows": counts}) + "\n"


def parse_header(line: str) -> Header:
    try:
        doc = json.loads(line)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TransferError("not an Engram tenant export (its first line is not the header "
                            "`tenants export` writes)")
    if doc.get("version") != VERSION:
        raise TransferError(f"a tenant export of format version {doc.get('version')!r}; "
                            f"this Engram reads version {VERSION}")
    try:
        tenant = doc["tenant"]
        columns = {name: tuple(str(c) for c in cols) for name, cols in doc["columns"].items()}
        header = Header(str(doc["schema"]), str(doc["vector_space"]),
                        str(doc["exported_at"]), uuid.UUID(tenant["id"]),
                        str(tenant["name"]), columns)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise TransferError(f"the export's header is damaged ({exc!r})") from None
    unknown = set(columns) - set(TABLE_NAMES)
    if unknown or set(columns) != set(TABLE_NAMES):
        raise TransferError(f"the export's header lists the tables {sorted(columns)}; this "
                            f"Engram exports {list(TABLE_NAMES)}")
    return header


@dataclass(frozen=True)
class RowLine:
    table: str
    row: dict[str, Any]


@dataclass(frozen=True)
class Trailer:
    rows: dict[str, int]


def parse_line(line: str, number: int) -> RowLine | Trailer:
    try:
        doc = json.loads(line)
    except ValueError:
        raise TransferError(f"line {number} of the export is not JSON: the file is "
                            "damaged") from None
    if isinstance(doc, dict) and doc.get("end") is True:
        rows = doc.get("rows")
        if not isinstance(rows, dict) or not all(
                type(v) is int and v >= 0 for v in rows.values()):
            raise TransferError(f"line {number} of the export, its last line, is damaged: "
                                "its row counts are not whole numbers (nothing was "
                                "imported)")
        return Trailer({str(k): v for k, v in rows.items()})
    if (not isinstance(doc, dict) or doc.get("table") not in TABLE_NAMES
            or not isinstance(doc.get("row"), dict)):
        raise TransferError(f"line {number} of the export is not a row of a known table")
    # Only JSON's escapes write them (an export never does): looked for only then, so
    # a whole file is not walked value by value. PostgreSQL's refusal named no line.
    if ("\\u0000" in line or "\\ud" in line.lower()) and not _storable(doc["row"]):
        raise TransferError(f"line {number} of the export holds a NUL character or an "
                            "unpaired surrogate, which PostgreSQL cannot store (nothing was "
                            "imported)")
    return RowLine(doc["table"], doc["row"])


def _storable(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not is_storable(item):
                return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def check_order(previous: str | None, table: str) -> None:
    """Rows come table by table, in TABLES' order (an import inserts them as they come)."""
    if previous is not None and TABLE_NAMES.index(table) < TABLE_NAMES.index(previous):
        raise TransferError(f"rows of {table} come after rows of {previous}: the file was "
                            "not written by `tenants export`")


def check_counts(read: dict[str, int], trailer: Trailer | None) -> None:
    if trailer is None:
        raise TransferError("the export ends before its last line: the file was cut short "
                            "(nothing was imported)")
    expected = {name: trailer.rows.get(name, 0) for name in TABLE_NAMES}
    got = {name: read.get(name, 0) for name in TABLE_NAMES}
    if expected != got:
        raise TransferError(f"the export holds {got} rows, its last line says {expected}: "
                            "the file is damaged (nothing was imported)")


def check_schema(file_schema: str, head: str) -> None:
    if file_schema != head:
        raise TransferError(
            f"the export was taken at schema {file_schema}, this Engram is at {head}: "
            "import it with the version that exported it, into a database of its own, "
            "then upgrade that one and export again")


@dataclass(frozen=True)
class SpaceDecision:
    # keep: the database's vectors are the file's model; record: the database records
    # the file's model (none recorded, or no memory holds a vector); refuse.
    action: Literal["keep", "record", "refuse"]
    reason: str = ""


def vector_space_on_import(file_model: str, stored_model: str | None,
                           reembedding: bool, has_memories: bool) -> SpaceDecision:
    """Whether the file's vectors can join the database's. `stored_model`: the recorded
    model (None: none yet); `reembedding`: a `reembed` pass is unfinished;
    `has_memories`: other memories than those the import replaces are stored."""
    if reembedding:
        return SpaceDecision("refuse", (
            "a re-embedding of this database's memories is unfinished (`python -m app "
            "reembed` goes on where it stopped); import once it is done"))
    if stored_model == file_model:
        return SpaceDecision("keep")
    if not has_memories:
        return SpaceDecision("record")
    return SpaceDecision("refuse", (
        f"the export's vectors come from {file_model}, this database's from "
        f"{stored_model or 'a model not yet recorded'}; a search would compare vectors of "
        f"two models. Import it into a database of {file_model} (an empty one takes it), "
        "then `python -m app reembed` there if it is to move to another model"))
