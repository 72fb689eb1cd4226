"""Start and stop the process's background work: crash recovery, the worker, sweeps,
and the fold of the search term statistics."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from app.resources import Resources
from app.search.term_stats import fold_loop
from app.worker.jobs import default_registry, recover
from app.worker.runner import Worker

log = logging.getLogger("engram.worker")

SWEEP_SECONDS = 60.0


@dataclass
class BackgroundWork:
    worker: Worker | None

    async def stop(self) -> None:
        if self.worker is not None:
            await self.worker.stop()


async def _sweep_loop(resources: Resources) -> None:
    while True:
        await asyncio.sleep(SWEEP_SECONDS)
        await recover(resources)


async def start_background_work(resources: Resources) -> BackgroundWork:
    """Recover what a crash left behind, then start the worker (unless disabled).

    Recovery runs again every minute, so a replica that died is noticed by the others.
    """
    await recover(resources)
    resources.background.append(asyncio.create_task(_sweep_loop(resources)))
    # Not a queued job: it runs in every process, whether or not its worker is enabled,
    # since searches slow down as unfolded rows pile up (an advisory lock keeps it to one).
    resources.background.append(asyncio.create_task(
        fold_loop(resources.sessionmaker, resources.settings.term_stats_fold_seconds)
    ))
    if not resources.settings.worker_enabled:
        log.info("background worker disabled (ENGRAM_WORKER_ENABLED=false)")
        return BackgroundWork(None)
    worker = Worker(resources, default_registry(),
                    concurrency=resources.settings.worker_concurrency)
    await worker.start()
    return BackgroundWork(worker)
