"""Opaque page tokens and page-size rules shared by every list method.

A token is bound to the listing that issued it (a digest of its scope), so a token taken
from one space's listing is refused in another's: it can neither leak nor skip data.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from engram.domain.errors import InvalidArgument, InvalidPageToken


@dataclass(frozen=True, slots=True)
class PageSize:
    default: int
    maximum: int

    def resolve(self, requested: int, *, field: str = "page_size") -> int:
        """0 = default; above the maximum = clamped; negative = INVALID_ARGUMENT."""
        if requested < 0:
            raise InvalidArgument(f"{field} must be 0 or positive, got {requested}", field=field)
        if requested == 0:
            return self.default
        return min(requested, self.maximum)


def _scope_digest(scope: tuple[str, ...]) -> str:
    return hashlib.sha256("\x1f".join(scope).encode("utf-8")).hexdigest()[:24]


def encode_page_token(scope: tuple[str, ...], position: dict[str, Any]) -> str:
    """An opaque token carrying `position` within the listing identified by `scope`."""
    body = json.dumps({"v": 1, "s": _scope_digest(scope), "p": position}, separators=(",", ":"))
    return base64.urlsafe_b64encode(body.encode("utf-8")).decode("ascii").rstrip("=")


def decode_page_token(token: str, scope: tuple[str, ...]) -> dict[str, Any] | None:
    """The position in `token` (None for an empty token); refuses foreign or damaged tokens."""
    if not token:
        return None
    try:
        padded = token + "=" * (-len(token) % 4)
        body = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        if not isinstance(body, dict) or body.get("v") != 1 or not isinstance(body.get("p"), dict):
            raise ValueError("shape")
    except (ValueError, UnicodeError):
        raise InvalidPageToken(
            "page_token is not a token this server issued; start again without one",
            field="page_token",
        ) from None
    if body.get("s") != _scope_digest(scope):
        raise InvalidPageToken(
            "page_token belongs to a different listing (space, directory or options changed); "
            "start again without one",
            field="page_token",
        )
    position: dict[str, Any] = body["p"]
    return position
