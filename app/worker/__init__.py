"""Background work: a pgqueuer job queue in PostgreSQL, a registry of job handlers by
name, transactional enqueue, and the worker that runs inside the service process.

Domains register handlers in `app.worker.jobs`; see docs/queue.md for why pgqueuer.
"""
