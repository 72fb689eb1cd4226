"""Periodic housekeeping inside the service process: forgetting old idempotency keys."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from app.idempotency.repository import purge_older_than
from app.resources import Resources

log = logging.getLogger("engram.maintenance")

INTERVAL_SECONDS = 3600.0


async def _purge_loop(resources: Resources) -> None:
    ttl = timedelta(hours=resources.settings.idempotency_ttl_hours)
    while True:
        try:
            removed = await purge_older_than(resources.engine, datetime.now(UTC) - ttl)
            if removed:
                log.info("forgot %d idempotency keys older than %s", removed, ttl)
        except Exception:
            # Housekeeping must never take the service down; the next round retries.
            log.exception("idempotency key purge failed")
        await asyncio.sleep(INTERVAL_SECONDS)


def start_maintenance(resources: Resources) -> None:
    resources.background.append(asyncio.create_task(_purge_loop(resources)))
