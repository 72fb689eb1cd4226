"""Start and stop the process's background work: crash recovery, the workers, sweeps,
and the fold of the search term statistics.

One worker per lane of jobs (`JobSpec.lane`), each with its own slots and connection:
the sessions' folds (seconds each) never wait for consolidation runs (minutes with an
LLM) to free a slot, nor the other way round.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from app.resources import Resources
from app.search.term_stats import fold_loop
from app.worker.jobs import default_registry, lane_slots, recover
from app.worker.runner import Worker

log = logging.getLogger("engram.worker")

SWEEP_SECONDS = 60.0


WORKER_GRACE_SECONDS = 10.0
"""How long the jobs running get to finish when the app shuts down without a signal first,
or with ENGRAM_SHUTDOWN_GRACE_SECONDS 0."""


@dataclass
class BackgroundWork:
    workers: list[Worker]

    async def stop(self, grace_seconds: float = WORKER_GRACE_SECONDS) -> None:
        """Stop taking jobs, and give the running ones `grace_seconds` to finish."""
        await asyncio.gather(*(worker.stop(grace_seconds) for worker in self.workers))


async def _sweep_loop(resources: Resources) -> None:
    while True:
        await asyncio.sleep(SWEEP_SECONDS)
        await recover(resources)


async def start_background_work(resources: Resources) -> BackgroundWork:
    """Recover what a crash left behind, then start the workers (unless disabled).

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
        return BackgroundWork([])
    registry = default_registry()
    slots = lane_slots(resources.settings)
    work = BackgroundWork([Worker(resources, registry.lane(lane), concurrency=slots[lane],
                                  lane=lane) for lane in registry.lanes()])
    try:
        for worker in work.workers:
            await worker.start()
    except BaseException:
        await work.stop()
        raise
    return work
