"""Index progress read through the indexer's GetIndexProgress: a search process waiting for
positions asks the indexer, the one service that owns the progress rows, instead of reading
their collection (so search needs no credentials to the indexer's database).

Nothing here notifies: a waiter polls with the backoff of engram.indexes.progress (5 ms
doubling to 250 ms), within the search's wait budget. Each poll is one call for the few
documents still pending, bounded by `timeout_seconds` and never retried (the next poll is
the retry). An indexer that does not answer makes the read fail with Unavailable naming the
indexer (any other refusal keeps its own error), which the search reports as "index
progress unreadable: ..." while answering with what the indexes hold.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from engram.client.aio import EngramClient
from engram.domain.errors import Unavailable
from engram.domain.positions import MAX_POSITIONS, IndexLeg, ProgressKey

# The longest one progress read may take: a read of a few rows by id answers in
# milliseconds; a black-holed indexer must not hold a search for its whole budget per poll.
DEFAULT_TIMEOUT_SECONDS = 1.0


class IndexerIndexProgress:
    """`ProgressReader` over IndexerService.GetIndexProgress, as a service principal."""

    notifies = False

    def __init__(
        self, client: EngramClient, *, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    ) -> None:
        self._client = client.with_options(timeout=timeout_seconds, retries=0)

    async def reached(self, leg: IndexLeg, keys: Sequence[ProgressKey]) -> dict[ProgressKey, int]:
        wanted = list(dict.fromkeys(keys))
        found: dict[ProgressKey, int] = {}
        for start in range(0, len(wanted), MAX_POSITIONS):
            try:
                found.update(
                    await self._client.index_progress(leg, wanted[start : start + MAX_POSITIONS])
                )
            except Unavailable as error:
                raise Unavailable(
                    f"the indexer did not answer GetIndexProgress ({error.message})"
                ) from None
        return found

    def generation(self) -> int:
        return 0

    async def wait_change(self, generation: int, within: float) -> None:
        await asyncio.sleep(within)
