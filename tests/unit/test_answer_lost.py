"""Which failures of a COMMIT leave its outcome unknown: those where the client never got
the server's answer, not an error the server reported (the transaction then aborted)."""

from __future__ import annotations

import asyncpg
import pytest
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.exc import InterfaceError as SAInterfaceError

from app.errors import answer_lost, statement_timed_out


@pytest.mark.parametrize("exc", [
    TimeoutError(),
    statement_timed_out(30),  # the engine's translation of asyncpg's client-side timeout
    asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
    asyncpg.AdminShutdownError("terminating connection due to administrator command"),
    SAInterfaceError("COMMIT", {}, Exception("connection is closed")),
    ConnectionResetError(),
], ids=repr)
def test_no_answer_from_the_server_is_a_lost_answer(exc: BaseException) -> None:
    assert answer_lost(exc)


def test_errors_the_server_reported_are_not_lost_answers() -> None:
    cancelled = asyncpg.QueryCanceledError("canceling statement due to statement timeout")
    assert not answer_lost(DBAPIError("COMMIT", {}, cancelled))
    assert not answer_lost(IntegrityError("COMMIT", {}, asyncpg.UniqueViolationError("dup")))
    assert not answer_lost(asyncpg.SerializationError("could not serialize access"))
    assert not answer_lost(ValueError("not a database error"))
