"""SpaceRef: the name of a space, its qualifier rules and its deterministic ID."""

from __future__ import annotations

import functools
import unicodedata
from dataclasses import dataclass, replace
from enum import StrEnum

from engram.domain.errors import InvalidSpaceRef, quoted
from engram.domain.text_rules import describe_char, first_forbidden_char, utf8_len

MAX_FIELD_BYTES = 128
ID_PREFIX = "v1"
# The name QuotaService uses for the instance aggregate of global spaces.
RESERVED_TENANT = "instance"


class Visibility(StrEnum):
    """Who shares a space. The value is the spelling used in space IDs."""

    PRIVATE = "private"
    BOT = "bot"
    PROJECT = "project"
    CROSS_PROJECT = "cross_project"
    USER = "user"
    ORG = "org"
    GLOBAL = "global"


QUALIFIERS = ("project", "bot", "user")

# The qualifiers each visibility requires; every other qualifier must be empty.
REQUIRED_QUALIFIERS: dict[Visibility, tuple[str, ...]] = {
    Visibility.PRIVATE: (),
    Visibility.BOT: ("project", "bot"),
    Visibility.PROJECT: ("project",),
    Visibility.CROSS_PROJECT: (),
    Visibility.USER: ("user",),
    Visibility.ORG: (),
    Visibility.GLOBAL: (),
}


@dataclass(frozen=True)
class SpaceRef:
    """A validated reference to a space. Build one with `SpaceRef.create` or `parse_space_id`.

    A request's ref is parsed once at the edge and carried as this value; its `id` is built
    on first use and kept (no slots, so the cached id has somewhere to live).
    """

    visibility: Visibility
    tenant: str
    name: str
    project: str = ""
    bot: str = ""
    user: str = ""

    @classmethod
    def create(
        cls,
        visibility: Visibility,
        *,
        tenant: str,
        name: str,
        project: str = "",
        bot: str = "",
        user: str = "",
    ) -> SpaceRef:
        """Validates every rule and returns the ref; raises InvalidSpaceRef naming the field."""
        ref = cls(visibility, tenant, name, project, bot, user)
        validate_space_ref(ref)
        return ref

    @functools.cached_property
    def id(self) -> str:
        """`v1:<visibility>:<tenant>:<project>:<bot>:<user>:<name>`; injective over valid refs."""
        return ":".join(
            (
                ID_PREFIX,
                self.visibility.value,
                self.tenant,
                self.project,
                self.bot,
                self.user,
                self.name,
            )
        )

    @property
    def is_global(self) -> bool:
        return self.visibility is Visibility.GLOBAL

    def with_identity(self, *, tenant: str, user: str) -> SpaceRef:
        """Returns the ref stamped with the caller's tenant (and user, for user spaces)."""
        stamped = replace(
            self,
            tenant="" if self.is_global else tenant,
            user=user if self.visibility is Visibility.USER else self.user,
        )
        validate_space_ref(stamped)
        return stamped

    def describe(self) -> str:
        """A short human description for messages and CLI output."""
        parts = [f"{self.visibility.value} space {quoted(self.name)}"]
        for label, value in (("project", self.project), ("bot", self.bot), ("user", self.user)):
            if value:
                parts.append(f"{label} {quoted(value)}")
        if self.tenant:
            parts.append(f"tenant {quoted(self.tenant)}")
        return ", ".join(parts)


def validate_field(field: str, value: str, *, required: bool) -> None:
    """Checks one SpaceRef field's characters; raises InvalidSpaceRef naming the field."""
    if not value:
        if required:
            raise InvalidSpaceRef(f"space.{field} is required", field=f"space.{field}")
        return
    problem = _field_problem(value)
    if problem:
        raise InvalidSpaceRef(f"space.{field} {problem}", field=f"space.{field}")


def name_problem(value: str) -> str:
    """What is wrong with a tenant-like name (a qualifier's rules: no separators, no
    control characters, NFC, bounded), or "" when nothing is."""
    return _field_problem(value)


def _field_problem(value: str) -> str:
    if utf8_len(value) > MAX_FIELD_BYTES:
        return f"is {utf8_len(value)} bytes; at most {MAX_FIELD_BYTES} are allowed"
    for bad, label in (("/", "'/'"), ("\\", "'\\'"), (":", "':'"), ("\x00", "NUL")):
        if bad in value:
            return f"must not contain {label}"
    if value in (".", "..") or ".." in value:
        return "must not contain '..' or be '.'"
    char = first_forbidden_char(value)
    if char is not None:
        return f"must not contain control or invisible characters (found {describe_char(char)})"
    if value != value.strip():
        return "must not start or end with whitespace"
    if unicodedata.normalize("NFC", value) != value:
        return "must be in Unicode NFC form"
    return ""


def validate_space_ref(ref: SpaceRef) -> None:
    """Checks visibility, required and forbidden qualifiers, tenant presence and characters."""
    if not isinstance(ref.visibility, Visibility):
        raise InvalidSpaceRef("space.visibility is required", field="space.visibility")
    validate_field("name", ref.name, required=True)
    required = REQUIRED_QUALIFIERS[ref.visibility]
    for qualifier in QUALIFIERS:
        value = getattr(ref, qualifier)
        if qualifier in required:
            validate_field(qualifier, value, required=True)
        elif value:
            needs = ", ".join(required) or "no qualifiers"
            raise InvalidSpaceRef(
                f"space.{qualifier} must be empty for {ref.visibility.value} spaces "
                f"(they take {needs})",
                field=f"space.{qualifier}",
            )
    if ref.is_global:
        if ref.tenant:
            raise InvalidSpaceRef(
                "space.tenant must be empty for global spaces: they belong to no tenant",
                field="space.tenant",
            )
    else:
        # Fails closed: a non-global space without a tenant never reaches storage.
        validate_field("tenant", ref.tenant, required=True)
        if ref.tenant == RESERVED_TENANT:
            raise InvalidSpaceRef(
                f"tenant {RESERVED_TENANT!r} is reserved for the instance aggregate",
                field="space.tenant",
            )


@functools.lru_cache(maxsize=4096)
def parse_space_id(space_id: str) -> SpaceRef:
    """Inverse of `SpaceRef.id`; raises InvalidSpaceRef on anything that is not a valid ID.
    Refs are immutable, so each id is parsed once and its ref shared (every stored document
    and event read back names its space by id)."""
    parts = space_id.split(":")
    if len(parts) != 7 or parts[0] != ID_PREFIX:
        raise InvalidSpaceRef(f"{quoted(space_id)} is not a v1 space id", field="space_id")
    try:
        visibility = Visibility(parts[1])
    except ValueError:
        raise InvalidSpaceRef(
            f"unknown visibility {quoted(parts[1])} in space id", field="space_id"
        ) from None
    _, _, tenant, project, bot, user, name = parts
    return SpaceRef.create(
        visibility, tenant=tenant, name=name, project=project, bot=bot, user=user
    )
