"""One line saying what failed, for an operator: a CLI command's failure, and what stops
the service from starting (a database it cannot reach, a refused setting)."""

from __future__ import annotations

import asyncpg
from sqlalchemy.exc import DBAPIError

from app.embedded_db import EmbeddedSettingRefused, EmbeddedStartFailed
from app.embedding_space.service import VectorSpaceMismatch
from app.migrate import MigrationLockTimeout, SchemaNewer
from app.restore_lock import BackupRunning, RestoreRunning
from app.settings import Settings

# An operator's decision or the surroundings, not a fault of the code: their one line says
# what to do, and a traceback adds nothing.
OPERATIONAL = (VectorSpaceMismatch, MigrationLockTimeout, SchemaNewer, EmbeddedSettingRefused,
               EmbeddedStartFailed, RestoreRunning, BackupRunning,
               DBAPIError, asyncpg.PostgresError, asyncpg.InterfaceError, OSError,
               ConnectionError, TimeoutError)


def describe(exc: BaseException, settings: Settings | None = None) -> str:
    """`exc` on one line; with the `settings` in use, naming the setting that led there
    (the database's URL, the data folder)."""
    if isinstance(exc, VectorSpaceMismatch | MigrationLockTimeout | SchemaNewer
                  | EmbeddedSettingRefused | EmbeddedStartFailed | RestoreRunning
                  | BackupRunning):
        return str(exc)
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        exc = exc.orig
    if isinstance(exc, OSError) and exc.filename is not None:
        # A file's error (a socket's names no file): it was said to be the database's.
        where = str(exc.filename) + (f" -> {exc.filename2}" if exc.filename2 else "")
        setting = ""
        if settings is not None and settings.database_url is None:
            setting = f" (ENGRAM_DATA_DIR is {settings.data_dir})"
        return f"{where}: {exc.strerror or exc}{setting}"
    if isinstance(exc, OSError | ConnectionError):
        which = ""
        if settings is not None:
            which = (" at ENGRAM_DATABASE_URL" if settings.database_url is not None
                     else f" (the embedded one, in ENGRAM_DATA_DIR {settings.data_dir})")
        return f"the database{which} could not be reached ({exc})"
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{exc.__class__.__name__}: {first_line}"
