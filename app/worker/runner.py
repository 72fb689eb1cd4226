"""The worker: pgqueuer's QueueManager on a dedicated connection, running the registry's
handlers as jobs arrive (LISTEN/NOTIFY wakes it; a poll catches anything missed).

It runs inside the service process (started by the lifespan) and in tests; any number of
replicas can run one, since pgqueuer picks each job once (SELECT ... FOR UPDATE SKIP
LOCKED) and re-picks a job whose worker stopped sending heartbeats.

pgqueuer's run ends when its connection is lost (a PostgreSQL restart or failover, a
terminated backend, or a statement unanswered for `statement_timeout`), so the worker
supervises it: it connects again, with a doubling delay, and runs a new manager, until it
is stopped. Jobs picked on the lost connection have lost their heartbeats too, so they are
picked again once stale.
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

from app import db_tcp
from app.db import CONNECT_TIMEOUT_SECONDS, asyncpg_dsn
from app.errors import describe
from app.service import request_id
from app.service.metrics import JOB_SECONDS, JOBS, WORKER_RECONNECTS
from app.worker.queue import QUEUE_SETTINGS, QUEUED_BY, queue_queries
from app.worker.registry import MAIN_LANE, JobContext, JobRegistry, JobSpec, RetryLater

if TYPE_CHECKING:
    from app.resources import Resources

log = logging.getLogger("engram.worker")


# How long a cancelled run may take to unwind before its connection is cut from under it,
# and again after.
CANCELLED_SECONDS = 2.0


async def _ended(task: asyncio.Task[None], seconds: float) -> bool:
    """Whether `task` ended within `seconds` (it is not cancelled for running longer); its
    outcome, an error or a cancel included, is taken, so none is reported as lost."""
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if done and not task.cancelled():
        task.exception()
    return bool(done)


class Worker:
    def __init__(
        self,
        resources: Resources,
        registry: JobRegistry,
        *,
        concurrency: int = 4,
        # NOTIFY wakes the manager for a new job, not for a retry's delay coming due: that
        # is seen at a poll. At 10 s a session's 1 s first retry waited 10 s (degraded
        # after 20 s instead of ~3). One dequeue statement a second per lane when idle.
        poll_interval: timedelta = timedelta(seconds=1),
        heartbeat_timeout: timedelta = timedelta(seconds=30),
        lane: str = MAIN_LANE,
        reconnect_delay: timedelta = timedelta(seconds=1),
        reconnect_delay_max: timedelta = timedelta(seconds=30),
        statement_timeout: timedelta = timedelta(seconds=30),
    ) -> None:
        self.resources = resources
        self.registry = registry
        self.lane = lane
        self.concurrency = max(2, concurrency)
        self.poll_interval = poll_interval
        self.heartbeat_timeout = heartbeat_timeout
        self.reconnect_delay = reconnect_delay.total_seconds()
        self.reconnect_delay_max = reconnect_delay_max.total_seconds()
        self.statement_timeout = statement_timeout.total_seconds()
        self._connection: Any = None
        self._manager: QueueManager | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        WORKER_RECONNECTS.labels(lane)  # at 0 from the start (app/service/metrics.py)

    async def start(self) -> None:
        """Connect and start taking jobs; a database unreachable now raises (the service
        does not start), one lost later is reconnected to."""
        self._stopping = asyncio.Event()
        await self._connect()
        self._task = asyncio.create_task(self._supervise(), name=self.application_name)
        log.info("worker started (%s lane, %d at once): jobs %s", self.lane,
                 2 * self._batch, ", ".join(self.registry.names()))

    @property
    def _batch(self) -> int:
        # The dequeue query caps picked jobs at max_concurrent_tasks, which must be at
        # least twice the batch.
        return max(1, self.concurrency // 2)

    @property
    def application_name(self) -> str:
        """How the worker's connection shows in pg_stat_activity."""
        return "engram-worker" if self.lane == MAIN_LANE else f"engram-worker-{self.lane}"

    async def _open(self) -> Any:
        # The queue's statements are short. One that takes longer is taken for a
        # connection gone dead without a word (a failover that left it half-open sends no
        # reset, so no termination is heard and a reply would wait for TCP's retries,
        # ~15 min): it raises, and the worker connects again.
        connection = await asyncpg.connect(
            asyncpg_dsn(self.resources.engine), command_timeout=self.statement_timeout,
            timeout=CONNECT_TIMEOUT_SECONDS,
            server_settings={"application_name": self.application_name})
        # Also on the worker's connection: while it waits for a notification, its
        # keepalive probes find a vanished server.
        db_tcp.apply(connection,
                     db_tcp.socket_options(self.resources.settings.db_tcp_timeout_seconds))
        return connection

    async def _connect(self) -> None:
        connection = await self._open()
        try:
            manager = QueueManager(
                queue_queries(AsyncpgDriver(connection)),
                channel=Channel(QUEUE_SETTINGS.channel),
            )
            for spec in self.registry:
                manager.register_executor(spec.name, self._executor(spec))
        except BaseException:
            await connection.close()
            raise
        self._connection, self._manager = connection, manager
        connection.add_termination_listener(self._on_terminated)

    def _on_terminated(self, connection: Any) -> None:
        # The server ended the connection. The manager would notice only at its next poll
        # (up to poll_interval); stop it now, and _supervise connects again.
        if connection is self._connection and self._manager is not None:
            self._manager.shutdown.set()

    async def _supervise(self) -> None:
        delay = self.reconnect_delay
        while self._manager is not None and not self._stopping.is_set():
            started = time.monotonic()
            try:
                await self._manager.run(
                    dequeue_timeout=self.poll_interval,
                    batch_size=self._batch,
                    max_concurrent_tasks=2 * self._batch,
                    heartbeat_timeout=self.heartbeat_timeout,
                )
            except TimeoutError:
                reason = f"no answer to a statement within {self.statement_timeout:g} s"
            except Exception as exc:
                reason = f"{exc.__class__.__name__}: {exc}"
            else:  # stop() or _on_terminated ended it
                reason = "the server closed it"
            if self._stopping.is_set():
                return
            WORKER_RECONNECTS.labels(self.lane).inc()
            log.warning("worker (%s lane) lost its connection (%s); connecting again",
                        self.lane, reason)
            await self._close_connection()
            # A manager that ran a while had a working connection: start the delays over.
            if time.monotonic() - started > self.reconnect_delay_max:
                delay = self.reconnect_delay
            delay = await self._reconnect(delay)

    async def _reconnect(self, delay: float) -> float:
        """Connect again after `delay`, doubled after each failed try; returns the delay
        for the next loss. Stopped meanwhile, it returns with no manager."""
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
                break
            next_delay = min(2 * delay, self.reconnect_delay_max)
            try:
                await self._connect()
            except Exception as exc:
                log.warning("worker (%s lane) cannot connect (%s); next try in %.1f s",
                            self.lane, describe(exc), next_delay)
                delay = next_delay
                continue
            if self._stopping.is_set():  # stopped while connecting
                await self._close_connection()
            else:
                log.info("worker (%s lane) connected again", self.lane)
            return next_delay
        return delay

    async def _close_connection(self) -> None:
        connection, self._connection, self._manager = self._connection, None, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close(timeout=2)

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """Stop taking jobs and wait up to `grace_seconds` for running ones, then cancel them.
        pgqueuer drops a cancelled job, so what must go on is put back by its domain: an
        automatic consolidation queues its scope again as it unwinds, the sweep queues a
        session's due fold, and marks a queued API run failed (its client asked for it)."""
        self._stopping.set()
        if self._manager is not None:
            self._manager.shutdown.set()
        task = self._task
        if task is not None and not await _ended(task, grace_seconds):
            task.cancel()
            # The cancelled run still writes its jobs' last statuses and heartbeats
            # (shielded); on a server that stopped answering they wait for the statement
            # timeout, and stop() with them: a service with its backends frozen did not
            # stop within 40 s. Past a bound the connection goes, failing them at once.
            if not await _ended(task, CANCELLED_SECONDS):
                self._terminate_connection()
                if not await _ended(task, CANCELLED_SECONDS):
                    log.warning("worker (%s lane) still busy %.0f s after its cancel; left",
                                self.lane, 2 * CANCELLED_SECONDS)
        await self._close_connection()
        self._task = None

    def _terminate_connection(self) -> None:
        if self._connection is not None:
            self._connection.terminate()

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
            # Reset after the job: pgqueuer may run the next one in the same task.
            correlation = request_id.REQUEST_ID.set(
                request_id.for_job(int(job.id), payload.get(QUEUED_BY)))
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
                outcome = "cancelled"  # the worker stopping; pgqueuer drops the job
                raise
            finally:
                JOBS.labels(spec.name, outcome).inc()
                JOB_SECONDS.labels(spec.name).observe(time.perf_counter() - started)
                request_id.REQUEST_ID.reset(correlation)

        return run
