"""How many of one tenant's requests this process serves at once.

The process's bound (app/service/admission.py) is for all tenants together, and a rate
limit (app/tenants/rate_limit.py) bounds how often requests start, not how long they
run: a tenant whose requests are slow (synchronous consolidation runs waiting on an LLM,
large batches) could still hold every slot at a modest rate. Past its share a tenant's
next request is refused at once, so the slots left are there for the others. The share
is the service's default unless the tenant has its own (`python -m app tenants limit
--in-flight`). Pure: a count per tenant, kept only while it is above zero.
"""

from __future__ import annotations

import uuid


class TenantSlots:
    """Atomic under asyncio: `enter` and `leave` never await."""

    def __init__(self, default: int) -> None:
        self.default = default  # a tenant's share unless it has its own; 0: no bound
        self._in_flight: dict[uuid.UUID, int] = {}

    def limit_for(self, own: int | None) -> int:
        return self.default if own is None else own

    def enter(self, tenant_id: uuid.UUID, limit: int) -> bool:
        """Take one of the tenant's `limit` slots; False (nothing taken) when all are
        taken. A `limit` of 0 is no bound and counts nothing: `leave` only after an
        `enter` under a bound. A limit lowered below what a tenant holds refuses it until
        enough have left."""
        if limit <= 0:
            return True
        held = self._in_flight.get(tenant_id, 0)
        if held >= limit:
            return False
        self._in_flight[tenant_id] = held + 1
        return True

    def leave(self, tenant_id: uuid.UUID) -> None:
        held = self._in_flight.get(tenant_id, 0) - 1
        if held > 0:
            self._in_flight[tenant_id] = held
        else:
            self._in_flight.pop(tenant_id, None)

    def in_flight(self, tenant_id: uuid.UUID) -> int:
        return self._in_flight.get(tenant_id, 0)

    def __len__(self) -> int:
        return len(self._in_flight)
