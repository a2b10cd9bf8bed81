"""README.md's table of the seven visibilities says what the code does: each row's
qualifiers, its `engram search -s` spelling, who reads and who writes it (decided by
`engram.domain.policy.decide` over a fixed cast of callers) and its quota setting."""

from __future__ import annotations

import re

import pytest
import typer

from engram.cli.search_commands import parse_space
from engram.domain.policy import decide
from engram.domain.principals import Action, Principal, Role
from engram.domain.spaces import QUALIFIERS, REQUIRED_QUALIFIERS, SpaceRef, Visibility
from engram.runtime.settings import Settings
from engram.v1 import space_pb2
from tests.support.scripts import ROOT

pytestmark = pytest.mark.unit

HEADER = (
    "| visibility | qualifiers | `engram search -s` | who reads | who writes "
    "| quota of each space |"
)
TENANT, USER = "acme", "ann"

# The callers every row is decided for, each asking for the space of tenant acme (and, for a
# user space, of user ann).
CAST = {
    "viewer": Principal(USER, TENANT, Role.VIEWER),
    "member": Principal(USER, TENANT, Role.MEMBER),
    "admin": Principal(USER, TENANT, Role.ADMIN),
    "another user, admin": Principal("bob", TENANT, Role.ADMIN),
    "another user, platform admin": Principal("bob", TENANT, Role.ADMIN, platform_admin=True),
    "another tenant, admin": Principal(USER, "globex", Role.ADMIN),
    "platform admin of another tenant": Principal(
        "root", "globex", Role.ADMIN, platform_admin=True
    ),
    "service": Principal("indexer", "", Role.ADMIN, service=True),
}
TENANT_MEMBERS = {
    "viewer",
    "member",
    "admin",
    "another user, admin",
    "another user, platform admin",
    "service",
}
PLATFORM_ADMINS = {"another user, platform admin", "platform admin of another tenant"}

# What each phrase of the table means, as the callers of CAST it admits.
READS = {
    "every member of the tenant (any role)": TENANT_MEMBERS,
    "only its user (any role)": {"viewer", "member", "admin", "service"},
    "everyone, in every tenant": set(CAST),
}
WRITES = {
    "members and admins of the tenant": TENANT_MEMBERS - {"viewer"},
    "only its user, as member or admin": {"member", "admin", "service"},
    "platform admins only (audited)": PLATFORM_ADMINS,
}
SPELLING_VALUES = {"PROJECT": "p1", "BOT": "b1", "USER": USER, "NAME": "notes"}


def table_rows() -> dict[str, list[str]]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert HEADER in readme, "README.md has the visibility table"
    lines = readme[readme.index(HEADER) :].splitlines()[2:]
    rows = {}
    for line in lines:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells
    return rows


def requested(visibility: Visibility) -> SpaceRef:
    values = {"project": "p1", "bot": "b1", "user": USER}
    qualifiers = {q: values[q] for q in REQUIRED_QUALIFIERS[visibility]}
    tenant = "" if visibility is Visibility.GLOBAL else TENANT
    return SpaceRef(visibility, tenant, "notes", **qualifiers)


def admitted(visibility: Visibility, action: Action) -> set[str]:
    space = requested(visibility)
    return {name for name, who in CAST.items() if decide(who, action, space).allowed}


def test_every_visibility_has_one_row() -> None:
    assert list(table_rows()) == [v.value for v in Visibility]


@pytest.mark.parametrize("visibility", list(Visibility))
def test_the_qualifiers_are_the_required_ones(visibility: Visibility) -> None:
    cell = table_rows()[visibility.value][1]
    named = [q for q in re.findall(r"`(\w+)`", cell) if q in QUALIFIERS]
    assert tuple(named) == REQUIRED_QUALIFIERS[visibility], cell
    assert (cell.split()[0] == "none") == (not REQUIRED_QUALIFIERS[visibility])


@pytest.mark.parametrize("visibility", list(Visibility))
def test_the_search_spelling_parses_to_this_visibility(visibility: Visibility) -> None:
    spelling = table_rows()[visibility.value][2].strip("`")
    for placeholder, value in SPELLING_VALUES.items():
        spelling = spelling.replace(placeholder, value)
    try:
        ref = parse_space(spelling)
    except typer.Exit:
        pytest.fail(f"the CLI refuses {spelling!r}")
    assert ref.visibility == space_pb2.Visibility.Value(f"VISIBILITY_{visibility.name}")
    assert ref.name == "notes"
    given = {q for q in QUALIFIERS if getattr(ref, q)}
    # A user space may leave its user out: the server stamps the caller's.
    assert given <= set(REQUIRED_QUALIFIERS[visibility])
    if visibility is not Visibility.USER:
        assert given == set(REQUIRED_QUALIFIERS[visibility])


@pytest.mark.parametrize("visibility", list(Visibility))
def test_who_reads_and_writes_is_what_the_policy_decides(visibility: Visibility) -> None:
    row = table_rows()[visibility.value]
    reads, writes = row[3], row[4]
    assert reads in READS, f"{visibility.value}: unknown phrase {reads!r}; use one of {list(READS)}"
    assert writes in WRITES, f"{visibility.value}: unknown phrase {writes!r}: {list(WRITES)}"
    for action in (Action.READ, Action.LIST, Action.SEARCH, Action.EXPORT):
        assert admitted(visibility, action) == READS[reads], (visibility, action)
    for action in (Action.WRITE, Action.DELETE, Action.IMPORT):
        assert admitted(visibility, action) == WRITES[writes], (visibility, action)


def test_global_writes_are_audited_as_the_table_says() -> None:
    root = CAST["platform admin of another tenant"]
    decision = decide(root, Action.WRITE, requested(Visibility.GLOBAL))
    assert decision.allowed and decision.audit_action


def _size(size: int) -> str:
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} B"


@pytest.mark.parametrize("visibility", list(Visibility))
def test_the_quota_column_names_the_setting_and_its_default(visibility: Visibility) -> None:
    cell = table_rows()[visibility.value][5]
    setting = f"quota_{visibility.value}"
    assert cell.startswith(f"`ENGRAM_{setting.upper()}` "), cell
    default = int(Settings.model_fields[setting].default)
    expected = _size(default) if default else "none"
    assert cell.split("` ", 1)[1].startswith(expected), (cell, expected)
