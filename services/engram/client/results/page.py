"""One page of a listing (list_spaces, list_tokens, list_job_runs ...)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

Item = TypeVar("Item")


@dataclass(frozen=True, slots=True)
class Page(Generic[Item]):
    """One page of a listing; pass `next_page_token` back for the next ("" = the last)."""

    items: tuple[Item, ...]
    next_page_token: str = ""
