"""The search service's own errors."""

from __future__ import annotations

from engram.domain.errors import Unavailable


class SearchUnavailable(Unavailable):
    """Every index the request needed failed or timed out."""

    reason = "SEARCH_UNAVAILABLE"
