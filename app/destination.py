"""Where the CLI writes a whole file (a backup, a tenant's export): refused before any work.

Both write a partial file beside the destination and rename it into place at the end, so
a destination that is a folder, or in a folder that is missing or not writable, failed
only then: after the whole dump was written, and deleted again.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


def check_destination(path: Path) -> None:
    """An OSError naming `path` (or its folder) when a file cannot be written there."""
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", str(path))
    folder = path.parent
    if not folder.is_dir():
        raise FileNotFoundError(errno.ENOENT, "no such folder", str(folder))
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, "cannot write in this folder", str(folder))
