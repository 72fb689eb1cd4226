"""The worker: pgqueuer's QueueManager on a dedicated connection, running the registry's
handlers as jobs arrive (LISTEN/NOTIFY wakes it; a poll catches anything missed).

It runs inside the service process (started by the lifespan) and in tests; any number of
replicas can run one, since pgqueuer picks each job once (SELECT ... FOR UPDATE SKIP
LOCKED) and re-picks a job whose worker stopped sending heartbeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import asyncpg
from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver
from pgqueuer.core.executors import (
    AbstractEntrypointExecutor,
    DatabaseRetryEntrypointExecutor,
    EntrypointExecutorParameters,
)
from pgqueuer.domain.errors import RetryRequested
from pgqueuer.domain.models import Job
from pgqueuer.domain.types import Channel
from pgqueuer.qm import QueueManager

from app.db import asyncpg_dsn
from app.service.metrics import JOB_SECONDS, JOBS
from app.worker.queue import QUEUE_SETTINGS, queue_queries
from app.worker.registry import MAIN_LANE, JobContext, JobRegistry, JobSpec, RetryLater

if TYPE_CHECKING:
    from app.resources import Resources

log = logging.getLogger("engram.worker")


class Worker:
    def __init__(
        self,
        resources: Resources,
        registry: JobRegistry,
        *,
        concurrency: int = 4,
        poll_interval: timedelta = timedelta(seconds=10),
        heartbeat_timeout: timedelta = timedelta(seconds=30),
        lane: str = MAIN_LANE,
    ) -> None:
        self.resources = resources
        self.registry = registry
        self.lane = lane
        self.concurrency = max(2, concurrency)
        self.poll_interval = poll_interval
        self.heartbeat_timeout = heartbeat_timeout
        self._connection: Any = None
        self._manager: QueueManager | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._connection = await asyncpg.connect(
            asyncpg_dsn(self.resources.engine),
            server_settings={"application_name": "engram-worker" if self.lane == MAIN_LANE
                             else f"engram-worker-{self.lane}"},
        )
        manager = QueueManager(
            queue_queries(AsyncpgDriver(self._connection)),
            channel=Channel(QUEUE_SETTINGS.channel),
        )
        for spec in self.registry:
            manager.register_executor(spec.name, self._executor(spec))
        self._manager = manager
        # The dequeue query caps picked jobs at max_concurrent_tasks, which must be at
        # least twice the batch.
        batch = max(1, self.concurrency // 2)
        self._task = asyncio.create_task(
            manager.run(
                dequeue_timeout=self.poll_interval,
                batch_size=batch,
                max_concurrent_tasks=2 * batch,
                heartbeat_timeout=self.heartbeat_timeout,
            ),
            name="engram-worker",
        )
        log.info("worker started (%s lane, %d at once): jobs %s", self.lane, 2 * batch,
                 ", ".join(self.registry.names()))

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """Stop taking jobs and wait up to `grace_seconds` for running ones, then cancel them
        (a cancelled job is picked again by a worker once its heartbeat goes stale)."""
        if self._manager is not None:
            self._manager.shutdown.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), grace_seconds)
            except TimeoutError:
                self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._connection is not None:
            with contextlib.suppress(Exception):
                await self._connection.close()
        self._task = self._manager = self._connection = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def _executor(self, spec: JobSpec) -> AbstractEntrypointExecutor:
        return DatabaseRetryEntrypointExecutor(
            parameters=EntrypointExecutorParameters(
                concurrency_limit=0, func=self._entrypoint(spec)
            ),
            # pgqueuer counts retries (attempts starts at 0); ours counts tries.
            max_attempts=spec.max_attempts - 1,
            initial_delay=spec.retry_delay,
        )

    def _entrypoint(self, spec: JobSpec) -> Callable[[Job], Awaitable[None]]:
        async def run(job: Job) -> None:
            payload = json.loads(job.payload or b"{}")
            context = JobContext(self.resources, int(job.id), job.attempts + 1,
                                 spec.max_attempts)
            started = time.perf_counter()
            outcome = "done"
            try:
                await spec.handler(context, payload)
            except RetryLater as retry:
                outcome = "retry"
                raise RetryRequested(delay=retry.delay, reason=retry.reason) from retry
            except Exception:
                outcome = "gave_up" if context.last_try else "failed"
                log.exception("job %s %d failed (try %d of %d)", spec.name, job.id,
                              job.attempts + 1, spec.max_attempts)
                raise
            except asyncio.CancelledError:
                outcome = "cancelled"  # the worker stopping; the job is picked again
                raise
            finally:
                JOBS.labels(spec.name, outcome).inc()
                JOB_SECONDS.labels(spec.name).observe(time.perf_counter() - started)

        return run
