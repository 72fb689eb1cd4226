"""Child processes that do not outlive the command that started them.

A CLI command killed outright (SIGKILL, the OOM killer, a container's stop past its
grace) runs no handler, so it cannot kill its tools itself: a probe's SIGKILLed `backup`
left pg_dump running, which went on writing a whole copy of the database to a hidden
file. On Linux the child asks the kernel for SIGKILL when its parent dies
(PR_SET_PDEATHSIG); elsewhere nothing is asked and only the handlers stop it.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

_PR_SET_PDEATHSIG = 1


def _linux_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        # Looked up before any fork: after it, in the child, only the call itself runs.
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


_PRCTL = _linux_prctl()


def _dies_with(parent: int) -> Callable[[], None] | None:
    """A preexec_fn tying the child to `parent`'s life, or None where it cannot."""
    prctl = _PRCTL
    if prctl is None:
        return None

    def tie() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        # The parent died between the fork and the prctl: the signal was never due.
        if os.getppid() != parent:
            os._exit(1)

    return tie


async def spawn(*argv: str, **options: Any) -> asyncio.subprocess.Process:
    """`asyncio.create_subprocess_exec`, with a child killed when this process dies.

    The kernel ties the child to the thread that forked it: this is the event loop's
    thread, which lives as long as the command's loop does."""
    return await asyncio.create_subprocess_exec(
        *argv, preexec_fn=_dies_with(os.getpid()), **options)
