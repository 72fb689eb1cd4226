"""Short transactions for one run, on the run's own connection when it has one.

A run that writes holds its scope's advisory lock on a dedicated connection for its
whole length; its short transactions (record, candidates, one per group, outcome) run on
that same connection, one at a time, instead of taking a pooled connection (and a
liveness ping) for each. Between them the connection sits idle outside any transaction,
so an op waiting on the LLM holds no transaction open. Without a connection (a dry run,
which takes no lock) each transaction takes one from the pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_sessionmaker


class RunTransactions:
    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession],
                 connection: AsyncConnection | None = None) -> None:
        self.sessionmaker = sessionmaker
        # A run's own connection (ScopeLock's) commits without waiting for the WAL flush.
        self.connection = connection
        self._one_at_a_time = asyncio.Lock()

    @asynccontextmanager
    async def begin(self, *, durable: bool = False) -> AsyncIterator[AsyncSession]:
        """A session in a transaction, committed on exit, rolled back on an exception.

        On the run's connection commits do not wait for the WAL flush: a crash may lose
        the last groups, each whole, never half of one (the run is then marked failed and
        its groups reconciled with what is really there). `durable=True` waits, and since
        WAL is flushed in order that makes every earlier commit durable too: the run's
        final commit uses it, so a run is durable before it answers.
        """
        if self.connection is None:
            async with self.sessionmaker() as session, session.begin():
                yield session
            return
        async with self._one_at_a_time:
            session = AsyncSession(bind=self.connection, expire_on_commit=False,
                                   autoflush=False)
            async with session, session.begin():
                if durable:
                    await session.execute(text("SET LOCAL synchronous_commit = on"))
                yield session
