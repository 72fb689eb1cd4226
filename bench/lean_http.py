"""A minimal HTTP/1.1 keep-alive client for the latency benchmarks.

httpx costs ~1.5-2 ms of client-side Python per request on this machine (building the
request, its connection pool, parsing the response), and that lands in every latency it
measures. This client writes the request and reads a Content-Length answer on one
asyncio stream, at tens of µs, so what it measures is the server's answer time plus the
loopback round trip. One request at a time per client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any


class LeanHttp:
    def __init__(self, port: int, headers: dict[str, str] | None = None) -> None:
        self.port = port
        self.headers = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: Any = None,
                      headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """(status, body). `body`, when given, is sent as JSON."""
        data = b"" if body is None else json.dumps(body).encode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        content = "content-type: application/json\r\n" if body is not None else ""
        message = (
            f"{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n{self.headers}{extra}{content}"
            f"content-length: {len(data)}\r\n\r\n".encode() + data
        )
        reused = self.writer is not None
        try:
            head, reader = await self._send(message)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            # The server closes a keep-alive connection idle past its timeout
            # (ENGRAM_KEEP_ALIVE_SECONDS, 5 s), as between a benchmark's rounds; it read
            # nothing of the request then, so it is sent again on a new connection, as
            # HTTP clients do. An answer cut after its first byte is an error.
            if not reused or (isinstance(exc, asyncio.IncompleteReadError) and exc.partial):
                raise
            await self.close()
            head, reader = await self._send(message)
        status = int(head.split(b" ", 2)[1])
        length = next(
            (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
             if line.lower().startswith(b"content-length:")),
            None,
        )
        if length is None and status in (204, 304):  # no body, by definition
            return status, b""
        if length is None:
            raise RuntimeError(f"no Content-Length in the answer: {head!r}")
        return status, await reader.readexactly(length)

    async def _send(self, message: bytes) -> tuple[bytes, asyncio.StreamReader]:
        """Write the request, on a new connection if none is open: the answer's head, and
        the stream its body follows on."""
        if self.writer is None or self.reader is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(message)
        return await self.reader.readuntil(b"\r\n\r\n"), self.reader

    async def write_memories(self, items: list[dict[str, Any]],
                             batch: int = 500) -> list[dict[str, Any]]:
        """`items` written through POST /v1/memories/batch, `batch` a request; the
        created memories, in order."""
        created: list[dict[str, Any]] = []
        for i in range(0, len(items), batch):
            status, answer = await self.request("POST", "/v1/memories/batch",
                                                {"items": items[i:i + batch]})
            if status != 201:
                raise RuntimeError(f"writing memories -> {status}: {answer[:300]!r}")
            created += json.loads(answer)["items"]
        return created

    async def post(self, path: str, body: Any, tag: str) -> tuple[int, bytes]:
        """POST `body` with the `x-bench-class` tag the profiling servers record."""
        return await self.request("POST", path, body, {"x-bench-class": tag})

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()
            self.writer = self.reader = None
