"""Opening search's indexes: an index that does not answer at startup does not stop the
service; searches degrade to the other index while it is opened again in the background."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential

from engram.indexes.ports import IndexUnavailable, KeywordIndex, VectorIndex
from engram.runtime.retrying import log_before_retry
from engram.runtime.tasks import cancel_and_wait

log = logging.getLogger(__name__)

REOPEN_FIRST_DELAY_SECONDS = 1.0
REOPEN_MAX_DELAY_SECONDS = 30.0


async def open_or_keep_trying(
    index: KeywordIndex | VectorIndex, backend: str, stack: contextlib.AsyncExitStack
) -> None:
    """Opens the index now, or keeps opening it in the background while searches degrade."""
    stack.push_async_callback(index.close)
    try:
        await index.open()
        return
    except IndexUnavailable as error:
        log.warning(
            "index unavailable at startup; searching without it until it answers",
            extra={"backend": backend, "error": error.message},
        )
    task = asyncio.create_task(_keep_opening(index, backend))
    stack.push_async_callback(cancel_and_wait, task)


async def _keep_opening(index: KeywordIndex | VectorIndex, backend: str) -> None:
    """Tries again 1 s, 2 s, 4 s, ... (at most 30 s) apart until the index opens."""
    await asyncio.sleep(REOPEN_FIRST_DELAY_SECONDS)
    async for attempt in AsyncRetrying(
        retry=retry_if_exception_type(IndexUnavailable),
        wait=wait_exponential(
            multiplier=2 * REOPEN_FIRST_DELAY_SECONDS, max=REOPEN_MAX_DELAY_SECONDS
        ),
        before_sleep=log_before_retry(log, "index still unavailable", backend=backend),
    ):
        with attempt:
            await index.open()
    log.info("index opened", extra={"backend": backend})
