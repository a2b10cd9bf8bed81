"""A request's SpaceRef is parsed once at the edge and carried as a value: its id is built
once, follows the ref through stamping, and a stored space id is parsed once per process."""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

import pytest

from engram.app.embedded import build_core
from engram.domain.principals import Principal, Role
from engram.domain.spaces import SpaceRef, Visibility, parse_space_id
from engram.runtime.settings import Settings

pytestmark = pytest.mark.unit


def test_the_id_follows_the_ref_through_stamping() -> None:
    requested = SpaceRef(Visibility.USER, "", "notes")
    assert requested.id == "v1:user:::::notes"
    stamped = requested.with_identity(tenant="acme", user="ann")
    assert stamped.id == "v1:user:acme:::ann:notes"
    assert requested.id == "v1:user:::::notes"  # the first ref keeps its own


def test_a_stored_space_id_is_parsed_once_and_shared() -> None:
    space_id = SpaceRef.create(Visibility.PROJECT, tenant="acme", project="p", name="n").id
    first = parse_space_id(space_id)
    assert parse_space_id(space_id) is first
    assert first.id == space_id


async def test_a_write_builds_its_space_id_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[SpaceRef] = []
    build = SpaceRef.__dict__["id"].func

    def counted(ref: SpaceRef) -> str:
        built.append(ref)
        return str(build(ref))

    cached = functools.cached_property(counted)
    cached.__set_name__(SpaceRef, "id")
    monkeypatch.setattr(SpaceRef, "id", cached)
    async with contextlib.AsyncExitStack() as stack:
        core = await build_core(Settings(data_dir=tmp_path), stack)
        ann = Principal(subject="ann", tenant="acme", role=Role.MEMBER)
        requested = SpaceRef(Visibility.PRIVATE, "", "notes")
        for content in ("one", "one and two"):
            built.clear()
            result = await core.storage.write(ann, requested, "a.md", content)
            assert result.document.space.id == "v1:private:acme::::notes"
            # Before the ref was carried as a value, a write rebuilt the id about 9 times.
            assert len(built) <= 1, f"the id was built {len(built)} times in one write"
