"""Idempotency keys: a retried create returns the first answer instead of a duplicate."""
