"""The tenant export file's lines and the rules an import follows, alone."""

from __future__ import annotations

import json
import uuid

import pytest

from app.tenants.transfer_format import (
    TABLE_NAMES,
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

HEADER = Header(schema="0024", vector_space="engram-hash",
                exported_at="2026-11-27T03:00:00+00:00", tenant_id=uuid.UUID(int=7),
                tenant_name="acme", columns=dict.fromkeys(TABLE_NAMES, ("tenant_id", "id")))


def test_a_header_reads_back_as_written() -> None:
    assert parse_header(HEADER.line()) == HEADER


@pytest.mark.parametrize(("line", "says"), [
    ("", "not an Engram tenant export"),
    ("PGDMP\x01\x0e", "not an Engram tenant export"),
    ('{"format": "something else"}', "not an Engram tenant export"),
    ('["engram-tenant-export"]', "not an Engram tenant export"),
    ('{"format": "engram-tenant-export", "version": 2}', "format version 2"),
    ('{"format": "engram-tenant-export", "version": 1}', "header is damaged"),
    (json.dumps({**json.loads(HEADER.line()), "tenant": {"id": "x", "name": "a"}}),
     "header is damaged"),
    (json.dumps({**json.loads(HEADER.line()), "columns": {"memories": ["id"]}}),
     "lists the tables ['memories']"),
])
def test_a_header_that_is_not_one_is_refused(line: str, says: str) -> None:
    with pytest.raises(TransferError, match=says.replace("[", r"\[").replace("]", r"\]")):
        parse_header(line)


def test_rows_and_the_trailer_read_back() -> None:
    row = parse_line(row_line("memories", '{"id": "m1", "tags": ["a"]}'), 2)
    end = parse_line(trailer_line({"memories": 1}), 3)

    assert row == RowLine("memories", {"id": "m1", "tags": ["a"]})
    assert end == Trailer({"memories": 1})


@pytest.mark.parametrize("line", [
    '{"table": "memories", "row": {"id": "m1"}',  # cut off
    '{"table": "pg_authid", "row": {}}',
    '{"table": "memories", "row": []}',
    '{"end": true}',
    "[]",
    # A damaged trailer was "ValueError: invalid literal for int()", with no line.
    '{"end": true, "rows": {"memories": "x"}}',
    '{"end": true, "rows": null}',
    '{"end": true, "rows": {"memories": true}}',
    '{"end": true, "rows": {"memories": -1}}',
    '{"end": true, "rows": {"memories": 1.5}}',
])
def test_a_line_that_is_not_a_row_is_refused_with_its_number(line: str) -> None:
    with pytest.raises(TransferError, match="line 9 of the export"):
        parse_line(line, 9)


def test_tables_come_in_the_order_an_import_inserts_them() -> None:
    check_order(None, "memories")
    check_order("tenants", "memories")
    check_order("memories", "memories")
    with pytest.raises(TransferError, match="rows of memories come after rows of sessions"):
        check_order("sessions", "memories")


def test_a_file_without_its_trailer_or_with_other_counts_is_refused() -> None:
    check_counts({"memories": 2, "tenants": 1}, Trailer({"memories": 2, "tenants": 1}))
    with pytest.raises(TransferError, match="cut short"):
        check_counts({"memories": 2}, None)
    with pytest.raises(TransferError, match="damaged"):
        check_counts({"memories": 1, "tenants": 1}, Trailer({"memories": 2, "tenants": 1}))


def test_only_an_export_of_this_schema_is_imported() -> None:
    check_schema("0024", "0024")
    with pytest.raises(TransferError, match="taken at schema 0023, this Engram is at 0024"):
        check_schema("0023", "0024")


@pytest.mark.parametrize(("stored", "reembedding", "has_memories", "action"), [
    ("m1", False, True, "keep"),
    ("m1", False, False, "keep"),
    (None, False, False, "record"),   # a database no service has started on yet
    ("m2", False, False, "record"),   # an empty database takes the file's model
    ("m2", False, True, "refuse"),    # two models' vectors would be compared
    (None, False, True, "refuse"),    # vectors of a model nobody recorded
    ("m1", True, True, "refuse"),     # a re-embedding under way
    ("m1", True, False, "refuse"),
])
def test_the_vectors_model_decides_whether_an_export_fits(
    stored: str | None, reembedding: bool, has_memories: bool, action: str,
) -> None:
    decision = vector_space_on_import("m1", stored, reembedding, has_memories)
    assert decision.action == action
    assert bool(decision.reason) == (action == "refuse")
