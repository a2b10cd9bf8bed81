"""The workspace rules (engram.domain.workspace): pure, no I/O."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from engram.domain.errors import InvalidArgument, InvalidPath, ProtectedFile
from engram.domain.workspace import (
    PROTECTED_FILES,
    Target,
    archived_bootstrap_path,
    build_tree,
    check_writable,
    daily_log_entry,
    daily_log_header,
    parse_daily_log_path,
    require_content,
    search_limit,
    session_name,
    target_path,
    time_zone,
    tree_depth,
)
from engram.runtime.errors import from_received, received_status, to_rpc_status

pytestmark = pytest.mark.unit

DAY = date(2026, 12, 1)


def test_targets_resolve_to_their_files() -> None:
    assert target_path(Target.MEMORY, "", today=DAY) == "MEMORY.md"
    assert target_path(Target.HEARTBEAT, "", today=DAY) == "HEARTBEAT.md"
    assert target_path(Target.DAILY_LOG, "", today=DAY) == "daily/2026-12-01.md"
    assert target_path(Target.DAILY_LOG, "", today=DAY, session="cli_2") == (
        "daily/2026-12-01-cli_2.md"
    )
    assert target_path(Target.PATH, "notes/a.md", today=DAY) == "notes/a.md"


def test_custom_paths_must_be_canonical() -> None:
    with pytest.raises(InvalidPath, match='use "notes/a.md"'):
        target_path(Target.PATH, "notes//a.md", today=DAY)
    with pytest.raises(InvalidPath, match="path is required"):
        target_path(Target.PATH, "", today=DAY)


@pytest.mark.parametrize("name", [*PROTECTED_FILES, "soul.md", "User.md"])
def test_identity_files_are_protected_in_any_case(name: str) -> None:
    with pytest.raises(ProtectedFile) as refused:
        target_path(Target.PATH, name, today=DAY)
    assert refused.value.info_reason == "PROTECTED_FILE"
    assert refused.value.metadata["path"] in PROTECTED_FILES


def test_protection_is_for_the_root_files_only() -> None:
    assert check_writable("notes/SOUL.md") == "notes/SOUL.md"
    assert check_writable("SOUL.md.md") == "SOUL.md.md"


def test_protected_file_crosses_the_wire_as_itself() -> None:
    error = ProtectedFile("no", path="SOUL.md")
    status = to_rpc_status(error)
    assert status.code == 7  # PERMISSION_DENIED

    class Call:
        def code(self) -> object:
            import grpc

            return grpc.StatusCode.PERMISSION_DENIED

        def details(self) -> str:
            return "no"

        def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
            return (("grpc-status-details-bin", status.SerializeToString()),)

    back = from_received(received_status(Call()), "WorkspaceService")  # type: ignore[arg-type]
    assert type(back) is ProtectedFile and back.info_reason == "PROTECTED_FILE"


@pytest.mark.parametrize(("given", "used"), [(0, 1), (1, 1), (10, 10)])
def test_depth_defaults_to_one(given: int, used: int) -> None:
    assert tree_depth(given) == used


@pytest.mark.parametrize("depth", [-1, 11])
def test_depth_outside_bounds_is_refused(depth: int) -> None:
    with pytest.raises(InvalidArgument, match="between 1 and 10") as refused:
        tree_depth(depth)
    assert refused.value.field == "depth"


@pytest.mark.parametrize(("given", "used"), [(0, 5), (1, 1), (20, 20)])
def test_limit_defaults_to_five(given: int, used: int) -> None:
    assert search_limit(given) == used


@pytest.mark.parametrize("limit", [-1, 21])
def test_limit_outside_bounds_is_refused(limit: int) -> None:
    with pytest.raises(InvalidArgument, match="between 1 and 20"):
        search_limit(limit)


@pytest.mark.parametrize("content", ["", " ", "\n\t"])
def test_content_is_required(content: str) -> None:
    with pytest.raises(InvalidArgument, match="content is required"):
        require_content(content)


def test_time_zones_are_iana_names() -> None:
    assert str(time_zone("")) == "UTC"
    assert str(time_zone("Asia/Kolkata")) == "Asia/Kolkata"
    for bad in ("Mars/Olympus", "../../etc/passwd", "x" * 100, "Europe/Berlin\n"):
        with pytest.raises(InvalidArgument) as refused:
            time_zone(bad)
        assert refused.value.field == "time_zone"


def test_sessions_are_short_plain_names() -> None:
    assert session_name("") == ""
    assert session_name("a" * 64) == "a" * 64
    for bad in ("a" * 65, "a/b", "..", "a b", "é"):
        with pytest.raises(InvalidArgument):
            session_name(bad)


def test_entries_and_headers() -> None:
    at = datetime(2026, 12, 1, 7, 5, 9, tzinfo=UTC)
    assert daily_log_entry(at, "shipped") == "[07:05:09] shipped"
    assert daily_log_header(DAY) == "# Daily Log - 2026-12-01\n\n"


def test_daily_log_paths_parse_in_both_formats() -> None:
    assert parse_daily_log_path("daily/2026-12-01.md") == (DAY, "")
    assert parse_daily_log_path("daily/2026-12-01-phone.md") == (DAY, "phone")
    for other in (
        "daily/2026-13-01.md",
        "daily/2026-12-01-.md",
        "MEMORY.md",
        "x/daily/2026-12-01.md",
    ):
        assert parse_daily_log_path(other) is None


def test_archive_name_is_the_bootstrap_update_time() -> None:
    at = datetime(2026, 12, 1, 10, 15, 0, 123000, tzinfo=UTC)
    assert archived_bootstrap_path(at) == "BOOTSTRAP.done-20261201T101500Z.md"


def test_tree_nests_directories_once_with_slashes() -> None:
    paths = ["MEMORY.md", "a/b/c.md", "a/b/d.md", "a/e.md", "z.md"]
    top = build_tree("", paths, 1)
    assert [(n.name, n.path, n.children) for n in top] == [
        ("MEMORY.md", "MEMORY.md", []),
        ("a/", "a/", []),
        ("z.md", "z.md", []),
    ]
    deep = build_tree("", paths, 3)
    a = deep[1]
    assert [c.name for c in a.children] == ["b/", "e.md"]
    assert [c.path for c in a.children[0].children] == ["a/b/c.md", "a/b/d.md"]
    assert [n.path for n in build_tree("a", paths, 1)] == ["a/b/", "a/e.md"]
    assert build_tree("missing", paths, 10) == []
