"""Folding BM25's term statistics: the delta rows writers append become one row per lexeme.
(The statistics also count each tenant's tags, categories and users, under the keys below.)

Triggers on `memories` append a signed delta row per lexeme for every write (migration
0004), so writers never contend; a search sums the rows of its query's lexemes. This
fold keeps those sums short: it replaces every lexeme's unfolded rows and its folded
row by their sum, in one transaction, and drops the lexemes whose sum is zero. Any
number of processes may run it; the advisory lock makes all but one skip a round.
"""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.errors import log_failed_round

log = logging.getLogger("engram.search")

# Besides lexemes, the triggers count each tenant's rows per tag and per category (migration
# 0009) and per user (0013) under these prefixes, which no lexeme has (a lexeme never
# starts with a space).
TAG_KEY = " tag:"
CATEGORY_KEY = " category:"
USER_KEY = " user:"

# pg_try_advisory_xact_lock key: "term_stats" folded into a bigint.
_FOLD_LOCK = 0x7465726D5F737461

_FOLD = text("""
WITH touched AS (
    SELECT DISTINCT tenant_id, lexeme FROM term_stats WHERE NOT folded
),
moved AS (
    DELETE FROM term_stats s
    USING touched t
    WHERE s.tenant_id = t.tenant_id AND s.lexeme = t.lexeme
    RETURNING s.tenant_id, s.lexeme, s.df, s.total_len
),
summed AS (
    INSERT INTO term_stats (tenant_id, lexeme, df, total_len, folded)
    SELECT tenant_id, lexeme, sum(df), sum(total_len), true
    FROM moved
    GROUP BY tenant_id, lexeme
    HAVING sum(df) <> 0 OR sum(total_len) <> 0
    RETURNING 1
)
SELECT (SELECT count(*) FROM moved) AS moved, (SELECT count(*) FROM summed) AS kept
""")


async def fold_term_stats(session: AsyncSession) -> int | None:
    """Fold every unfolded delta row; the caller commits. Returns how many rows were
    summed, or None when another process holds the fold."""
    locked = (await session.execute(
        text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": _FOLD_LOCK}
    )).scalar_one()
    if not locked:
        return None
    row = (await session.execute(_FOLD)).one()
    return int(row.moved)


async def fold_loop(sessionmaker: async_sessionmaker[AsyncSession], every: float) -> None:
    """Fold every `every` seconds until cancelled; a failed round is logged and retried."""
    while True:
        await asyncio.sleep(every)
        try:
            async with sessionmaker() as session, session.begin():
                folded = await fold_term_stats(session)
        except Exception as exc:
            log_failed_round(log, exc, "folding the term statistics failed; retrying in %.0f s",
                             every)
            continue
        if folded:
            log.debug("term statistics: %d rows folded", folded)
