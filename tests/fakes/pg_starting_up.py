"""A server on 127.0.0.1 that answers every PostgreSQL connection as a server still
starting up does (FATAL 57P03, "the database system is starting up"), as the embedded
PostgreSQL does for the second or so its watcher takes to restart it after a crash.

    async with starting_up() as port:
        url = f"postgresql+asyncpg://postgres@127.0.0.1:{port}/x"
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator

_SSL_REQUEST = 80877103


def _error(code: str, message: str) -> bytes:
    fields = b"".join(kind + value.encode() + b"\0" for kind, value in (
        (b"S", "FATAL"), (b"V", "FATAL"), (b"C", code), (b"M", message)))
    body = fields + b"\0"
    return b"E" + struct.pack("!i", len(body) + 4) + body


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            (length,) = struct.unpack("!i", await reader.readexactly(4))
            payload = await reader.readexactly(length - 4)
            if struct.unpack("!i", payload[:4])[0] == _SSL_REQUEST:
                writer.write(b"N")  # no TLS here: the client goes on in plain text
                continue
            writer.write(_error("57P03", "the database system is starting up"))
            await writer.drain()
            return
    except (asyncio.IncompleteReadError, ConnectionError):
        return
    finally:
        writer.close()


@contextlib.asynccontextmanager
async def starting_up() -> AsyncIterator[int]:
    server = await asyncio.start_server(_answer, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()
