"""Run inside a network namespace of its own (`unshare -rn`) by test_db_tcp.py: connect to
the embedded PostgreSQL over TCP through tests/fakes/pg_forwarder.py, take the loopback
interface down so the server vanishes without a word (no reset, no FIN: packets are
dropped, as when a failover moves the server's address), and time a statement.

    python -m tests.integration.dead_peer <server socket> <db_tcp_timeout_seconds> \
        <engine|search> <give up after seconds>

Prints one JSON line: `{"outcome": "failed" | "answered" | "hung", "seconds": ...,
"error": ...}`.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import text

from app.db import create_engine, create_sessionmaker
from app.search.reader import SearchReader
from app.settings import Settings
from tests.fakes.pg_forwarder import forwarding, tcp_url

# The server's address, on the namespace's loopback interface until it vanishes.
SERVER = "10.77.0.1"


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True)


async def main(server_socket: Path, tcp_timeout: int, path: str, give_up: float) -> None:
    ip("link", "set", "lo", "up")
    ip("addr", "add", f"{SERVER}/32", "dev", "lo")
    async with forwarding(server_socket, SERVER) as port:
        url = tcp_url(SERVER, port)
        settings = Settings(database_url=url, embedder="hash",  # type: ignore[call-arg]
                            db_tcp_timeout_seconds=tcp_timeout, _env_file=None)
        engine = create_engine(url, settings)
        maker = create_sessionmaker(engine)
        reader = await SearchReader.open(engine, settings)

        async def statement() -> None:
            if path == "engine":
                async with maker() as session:
                    await session.execute(text("SELECT 1"))
            else:
                await reader.fetch("SELECT 1")

        await statement()  # a live connection in the pool, as before a failover
        ip("addr", "del", f"{SERVER}/32", "dev", "lo")
        started = time.monotonic()
        # Not cancelled at the deadline: a cancelled statement on a dead connection waits
        # for its cancellation, which cannot get through either.
        task = asyncio.create_task(statement())
        done, _ = await asyncio.wait({task}, timeout=give_up)
        seconds = round(time.monotonic() - started, 2)
        error = task.exception() if done else None
        outcome = "hung" if not done else "failed" if error else "answered"
        print(json.dumps({"outcome": outcome, "seconds": seconds,
                          "error": repr(error) if error else None}), flush=True)
    # Closing would say goodbye over the dead interface and wait; the namespace and
    # the process go together.
    os._exit(0)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4])))
