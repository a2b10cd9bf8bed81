"""Background tasks: stopping one and waiting until it has."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancels the task and waits for it to finish unwinding."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
