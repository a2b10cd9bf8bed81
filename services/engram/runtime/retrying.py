"""What the tenacity retry policies share: one log line per failed attempt."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tenacity import RetryCallState


def log_before_retry(
    logger: logging.Logger, message: str, **extra: Any
) -> Callable[[RetryCallState], None]:
    """A tenacity `before_sleep` hook: a warning with the error, the wait before the next
    attempt and how many attempts failed so far."""

    def hook(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        logger.warning(
            message,
            extra={
                **extra,
                "error": getattr(error, "message", None) or f"{type(error).__name__}: {error}",
                "retry_in_s": round(state.upcoming_sleep, 3),
                "failures": state.attempt_number,
            },
        )

    return hook
