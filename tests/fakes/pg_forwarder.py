"""A TCP front for the embedded PostgreSQL, which listens on a Unix socket only: what the
tests of TCP-only behaviour (app/db_tcp.py) connect through.

    async with forwarding(unix_socket_path(url), "127.0.0.1") as port:
        url = tcp_url("127.0.0.1", port)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from app.embedded_db import DATABASE_NAME


def unix_socket_path(url: str) -> Path:
    """The socket file behind an embedded server's URL (`...?host=<socket dir>`)."""
    socket_dir = Path(parse_qs(urlsplit(url).query)["host"][0])
    sockets = [p for p in socket_dir.glob(".s.PGSQL.*") if p.suffix != ".lock"]
    if len(sockets) != 1:
        raise RuntimeError(f"expected one server socket in {socket_dir}, found {sockets}")
    return sockets[0]


def tcp_url(host: str, port: int) -> str:
    return f"postgresql+asyncpg://postgres@{host}:{port}/{DATABASE_NAME}"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


@contextlib.asynccontextmanager
async def forwarding(target: Path, host: str | Path) -> AsyncIterator[int]:
    """Accept connections and pipe each to the Unix socket `target`: on a free TCP port of
    `host` (yielded), or on the Unix socket `host` when it is a path (yields 0)."""
    pipes: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(str(target))
        for task in (asyncio.create_task(_pipe(reader, up_writer)),
                     asyncio.create_task(_pipe(up_reader, writer))):
            pipes.add(task)
            task.add_done_callback(pipes.discard)

    if isinstance(host, Path):
        server = await asyncio.start_unix_server(serve, str(host))
        port = 0
    else:
        server = await asyncio.start_server(serve, host, 0)
        port = server.sockets[0].getsockname()[1]
    try:
        yield port
    finally:
        server.close()
        for task in list(pipes):
            task.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)
