"""SQLAlchemy mappings, one module per table; importing this package registers them all."""

from app.models.api_key import ApiKey
from app.models.base import Base
from app.models.consolidation_run import ConsolidationRun
from app.models.embedding_space import embedding_space
from app.models.idempotency import IdempotencyRecord
from app.models.memory import SCOPE_COLUMNS, Memory
from app.models.memory_version import MemoryVersion
from app.models.scope_write_counter import ScopeWriteCounter
from app.models.session import ChatSession, SessionEvent, SessionTurn
from app.models.tenant import DEFAULT_TENANT_ID, Tenant
from app.models.term_stat import term_stats

__all__ = ["DEFAULT_TENANT_ID", "SCOPE_COLUMNS", "ApiKey", "Base", "ChatSession",
           "ConsolidationRun", "IdempotencyRecord", "Memory", "MemoryVersion", "ScopeWriteCounter",
           "SessionEvent", "SessionTurn", "Tenant", "embedding_space", "term_stats"]
