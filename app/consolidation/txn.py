"""Short transactions for one run, all on the run's own connection.

A run holds its lock (see `locks`) on a dedicated connection for its whole length; its
short transactions (record, candidates, one per group, outcome) run on that same
connection, one at a time, instead of taking a pooled connection (and a liveness ping)
for each. Between them the connection sits idle outside any transaction, so an op
waiting on the LLM holds no transaction open.

Commits on this connection do not wait for the WAL flush: a crash may lose the last
groups, each whole, never half of one (the run is then marked failed and its record
reconciled with what is really there). The run's final commit waits (`durable=True`),
and since WAL is flushed in order that makes every earlier commit durable too, before
the run answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession


class RunTransactions:
    def __init__(self, connection: AsyncConnection) -> None:
        self.connection = connection
        self._one_at_a_time = asyncio.Lock()

    @asynccontextmanager
    async def begin(self, *, durable: bool = False) -> AsyncIterator[AsyncSession]:
        """A session in a transaction, committed on exit, rolled back on an exception."""
        async with self._one_at_a_time:
            session = AsyncSession(bind=self.connection, expire_on_commit=False,
                                   autoflush=False)
            async with session, session.begin():
                if durable:
                    await session.execute(text("SET LOCAL synchronous_commit = on"))
                yield session

    @asynccontextmanager
    async def driver(self, *, transaction: bool = True) -> AsyncIterator[Any]:
        """The asyncpg connection itself, in a transaction unless told otherwise, for
        the statements a run repeats once per group (`repository.GroupWriter`)."""
        async with self._one_at_a_time:
            raw: Any = (await self.connection.get_raw_connection()).driver_connection
            if not transaction:
                yield raw
                return
            async with raw.transaction():
                yield raw
