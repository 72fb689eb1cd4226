"""TCP liveness of the database connections: keepalive probes and a user timeout on
every Engram connection that reaches PostgreSQL over TCP.

A server that vanishes without a word (a failover that moves the address, a host lost
with its connections) leaves them half-open: no reset arrives, so a statement sent on
one waits for TCP's retransmissions, ~15 minutes on Linux's defaults, and an idle
pooled one looks alive until then. Every request that draws such a connection hangs,
and the pools fill with them. With a user timeout, data left unacknowledged for
`db_tcp_timeout_seconds` fails the connection; with keepalive probes an idle one is
found dead in about that time too, so the pools drop it before a request draws it.
A live server's kernel acknowledges both even while a statement runs for minutes, so
long statements are not cut. libpq's `keepalives*` and `tcp_user_timeout` do the same;
asyncpg has no such options (MagicStack/asyncpg#606), so they are set on the socket.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger("engram.db")

# (level, option, value) triples for setsockopt.
SocketOption = tuple[int, int, int]

# Probes after a third of the timeout idle, then every sixth, so an idle connection
# to a vanished server fails in about the timeout (the user timeout ends the probing).
_IDLE_SHARE, _INTERVAL_SHARE, _PROBES = 3, 6, 3

# Options a kernel refused, warned about once.
_refused: set[tuple[int, int]] = set()


def socket_options(timeout_seconds: int) -> list[SocketOption]:
    """The options for a timeout, those this platform has (TCP_USER_TIMEOUT and the
    keepalive timings are Linux's names); none for 0, which leaves the OS's defaults."""
    if timeout_seconds <= 0:
        return []
    tcp = socket.IPPROTO_TCP
    wanted: list[tuple[int, str, int]] = [
        (socket.SOL_SOCKET, "SO_KEEPALIVE", 1),
        (tcp, "TCP_KEEPIDLE", max(1, timeout_seconds // _IDLE_SHARE)),
        (tcp, "TCP_KEEPINTVL", max(1, timeout_seconds // _INTERVAL_SHARE)),
        (tcp, "TCP_KEEPCNT", _PROBES),
        (tcp, "TCP_USER_TIMEOUT", timeout_seconds * 1000),
    ]
    return [(level, getattr(socket, name), value) for level, name, value in wanted
            if hasattr(socket, name)]


def tcp_socket(connection: Any) -> Any:
    """An asyncpg connection's socket when it is a TCP one, else None."""
    # asyncpg exposes no socket; its transport is the one way to it.
    sock = connection._transport.get_extra_info("socket")
    if sock is None or sock.family == getattr(socket, "AF_UNIX", None):
        return None
    return sock


def apply(connection: Any, options: list[SocketOption]) -> None:
    """Set `options` on an asyncpg connection's socket; nothing for a Unix socket (the
    embedded server's), where a vanished server closes the connection at once."""
    sock = tcp_socket(connection) if options else None
    if sock is None:
        return
    for level, option, value in options:
        try:
            sock.setsockopt(level, option, value)
        except OSError as exc:
            # A kernel without the option (some sandboxes): the connection still works,
            # only without this guard, so connecting goes on.
            if (level, option) not in _refused:
                _refused.add((level, option))
                log.warning("database connections: socket option %s refused (%s)",
                            option, exc)


def install(engine: AsyncEngine, timeout_seconds: int) -> None:
    """Apply the options to each connection the engine opens."""
    options = socket_options(timeout_seconds)
    if not options:
        return

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        apply(dbapi_connection.driver_connection, options)

    event.listen(engine.sync_engine, "connect", on_connect)


def pool_init(timeout_seconds: int) -> Callable[[Any], Awaitable[None]]:
    """An asyncpg pool's `init`: the options on each connection the pool opens."""
    options = socket_options(timeout_seconds)

    async def init(connection: Any) -> None:
        apply(connection, options)

    return init
