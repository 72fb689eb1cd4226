"""How long one statement of the service's database connections may take: the server
cancels it at `db_statement_timeout_seconds`, and the client gives up a little later
when the server does not answer at all.

A server alive but stuck (statements queued behind a migration's lock, a runaway plan)
and a server that stopped answering while its kernel still acknowledges (storage that
hangs, a frozen host) both left a request waiting without end, since TCP's liveness
(app/db_tcp.py) sees nothing wrong with either. The server's `statement_timeout`
cancels a statement cleanly and the connection stays usable. It cannot fire in a
backend that does not run, so asyncpg's `command_timeout` bounds the wait too, later
by as long again (at most `_CLIENT_GRACE_SECONDS`). A connection that timed out on the
client is still waiting for its statement's end, so it is thrown away, never reused.
The CLI's commands (migrations, re-embedding, a tenant's deletion) run unbounded.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.ext.asyncio import AsyncEngine

from app.errors import statement_timed_out

_CLIENT_GRACE_SECONDS = 5.0


def server_settings(seconds: float) -> dict[str, str]:
    """The session setting that makes the server cancel a statement after `seconds`
    (0: never)."""
    return {"statement_timeout": str(max(1, round(seconds * 1000)) if seconds > 0 else 0)}


def client_timeout(seconds: float) -> float | None:
    """asyncpg's `command_timeout` for a server-side bound of `seconds`: the server's
    cancellation arrives well before it, unless the server stopped answering."""
    if seconds <= 0:
        return None
    return seconds + min(seconds, _CLIENT_GRACE_SECONDS)


def install(engine: AsyncEngine, seconds: float) -> None:
    """Make the engine throw away a connection whose statement timed out on the client,
    and raise DatabaseTimeout for it."""
    if seconds <= 0:
        return

    def on_error(ctx: ExceptionContext) -> Any:
        if not isinstance(ctx.original_exception, TimeoutError):
            return None
        # Only this connection: the others may be fine (one stuck backend).
        ctx.is_disconnect = True
        ctx.invalidate_pool_on_disconnect = False
        return statement_timed_out(seconds)

    event.listen(engine.sync_engine, "handle_error", on_error)
