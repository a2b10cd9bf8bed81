"""The space every call addresses: a frozen dataclass, no protobuf. What the calls return is
in engram.client.results, made on first use."""

from __future__ import annotations

from dataclasses import dataclass

from engram.domain.errors import InvalidSpaceRef
from engram.v1 import space_pb2

# "private", "bot", "project", ...: the proto's Visibility names, lower case, unprefixed.
VISIBILITIES = tuple(
    name.removeprefix("VISIBILITY_").lower()
    for name in space_pb2.Visibility.keys()
    if name != "VISIBILITY_UNSPECIFIED"
)


@dataclass(frozen=True, slots=True)
class Space:
    """A space (one agent workspace). Tenant and user default to the caller's own."""

    visibility: str = "private"
    name: str = "default"
    project: str = ""
    bot: str = ""
    user: str = ""
    tenant: str = ""

    def __post_init__(self) -> None:
        if self.visibility not in VISIBILITIES:
            raise InvalidSpaceRef(
                f"visibility {self.visibility!r} is not one of {', '.join(VISIBILITIES)}",
                field="space.visibility",
            )
