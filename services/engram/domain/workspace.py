"""Workspace rules (ARCHITECTURE §5). Pure: no I/O, no clock.

This file holds only what the prompt assembly needs; the workspace service's rules join it.
"""

from __future__ import annotations

import re
from datetime import date

_DAILY_LOG = re.compile(r"daily/(\d{4}-\d{2}-\d{2})(?:-([A-Za-z0-9_-]{1,64}))?\.md")


def parse_daily_log_path(path: str) -> tuple[date, str] | None:
    """(date, session or "") of a daily log path in either format; None for any other path."""
    match = _DAILY_LOG.fullmatch(path)
    if match is None:
        return None
    try:
        day = date.fromisoformat(match.group(1))
    except ValueError:
        return None
    return day, match.group(2) or ""
