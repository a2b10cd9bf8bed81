"""SpaceRef rules: qualifiers per visibility, characters, tenant presence, the ID."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engram.domain.errors import InvalidSpaceRef
from engram.domain.spaces import (
    REQUIRED_QUALIFIERS,
    SpaceRef,
    Visibility,
    parse_space_id,
    validate_space_ref,
)

pytestmark = pytest.mark.unit


def test_id_has_the_exact_documented_shape() -> None:
    ref = SpaceRef.create(Visibility.BOT, tenant="acme", project="p1", bot="b1", name="notes")
    assert ref.id == "v1:bot:acme:p1:b1::notes"


@pytest.mark.parametrize(
    ("visibility", "spelling"),
    [
        (Visibility.PRIVATE, "private"),
        (Visibility.BOT, "bot"),
        (Visibility.PROJECT, "project"),
        (Visibility.CROSS_PROJECT, "cross_project"),
        (Visibility.USER, "user"),
        (Visibility.ORG, "org"),
        (Visibility.GLOBAL, "global"),
    ],
)
def test_visibility_spelling_in_id(visibility: Visibility, spelling: str) -> None:
    qualifiers = {q: "x" for q in REQUIRED_QUALIFIERS[visibility]}
    tenant = "" if visibility is Visibility.GLOBAL else "t"
    ref = SpaceRef.create(visibility, tenant=tenant, name="n", **qualifiers)
    assert ref.id.split(":")[1] == spelling


@pytest.mark.parametrize(
    ("visibility", "missing"),
    [
        (Visibility.BOT, "project"),
        (Visibility.BOT, "bot"),
        (Visibility.PROJECT, "project"),
        (Visibility.USER, "user"),
    ],
)
def test_required_qualifier_missing_is_refused(visibility: Visibility, missing: str) -> None:
    qualifiers = {q: "x" for q in REQUIRED_QUALIFIERS[visibility] if q != missing}
    with pytest.raises(InvalidSpaceRef, match=f"space.{missing} is required"):
        SpaceRef.create(visibility, tenant="t", name="n", **qualifiers)


FORBIDDEN = [
    (Visibility.PRIVATE, "project"),
    (Visibility.PRIVATE, "bot"),
    (Visibility.PRIVATE, "user"),
    (Visibility.PROJECT, "bot"),
    (Visibility.PROJECT, "user"),
    (Visibility.BOT, "user"),
    (Visibility.CROSS_PROJECT, "project"),
    (Visibility.USER, "project"),
    (Visibility.ORG, "bot"),
    (Visibility.GLOBAL, "user"),
    (Visibility.GLOBAL, "project"),
]


@pytest.mark.parametrize(("visibility", "extra"), FORBIDDEN)
def test_forbidden_qualifier_is_refused(visibility: Visibility, extra: str) -> None:
    qualifiers = {q: "x" for q in REQUIRED_QUALIFIERS[visibility]}
    qualifiers[extra] = "x"
    tenant = "" if visibility is Visibility.GLOBAL else "t"
    with pytest.raises(InvalidSpaceRef, match=f"space.{extra} must be empty"):
        SpaceRef.create(visibility, tenant=tenant, name="n", **qualifiers)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "..",
        ".",
        "a/b",
        "a\\b",
        "a:b",
        "a\x00b",
        "a\nb",
        "a\tb",
        "x" * 129,
        " lead",
        "trail ",
        "a..b",
        "zero\u200bwidth",
        "e\u0301",
    ],
)
def test_bad_name_characters_are_refused(bad: str) -> None:
    with pytest.raises(InvalidSpaceRef):
        SpaceRef.create(Visibility.PRIVATE, tenant="t", name=bad)


def test_128_byte_fields_are_allowed_but_not_129() -> None:
    SpaceRef.create(Visibility.PRIVATE, tenant="t", name="é" * 64)
    with pytest.raises(InvalidSpaceRef, match="129 bytes"):
        SpaceRef.create(Visibility.PRIVATE, tenant="t", name="é" * 64 + "x")


def test_non_global_without_tenant_fails_closed() -> None:
    with pytest.raises(InvalidSpaceRef, match="space.tenant is required"):
        SpaceRef.create(Visibility.ORG, tenant="", name="n")


def test_global_with_tenant_is_refused() -> None:
    with pytest.raises(InvalidSpaceRef, match="global"):
        SpaceRef.create(Visibility.GLOBAL, tenant="t", name="n")


def test_reserved_instance_tenant_is_refused() -> None:
    with pytest.raises(InvalidSpaceRef, match="reserved"):
        SpaceRef.create(Visibility.ORG, tenant="instance", name="n")


def test_parse_space_id_round_trips_and_refuses_garbage() -> None:
    ref = SpaceRef.create(Visibility.USER, tenant="t", user="ann", name="n")
    assert parse_space_id(ref.id) == ref
    for bad in ("v2:private:t::::n", "v1:nope:t::::n", "v1:private:t:::n", "garbage"):
        with pytest.raises(InvalidSpaceRef):
            parse_space_id(bad)


field_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")),
    min_size=1,
    max_size=12,
)


@st.composite
def valid_refs(draw: st.DrawFn) -> SpaceRef | None:
    visibility = draw(st.sampled_from(list(Visibility)))
    values = {q: draw(field_text) for q in REQUIRED_QUALIFIERS[visibility]}
    tenant = "" if visibility is Visibility.GLOBAL else draw(field_text)
    ref = SpaceRef(visibility, tenant, draw(field_text), **values)
    try:
        validate_space_ref(ref)
    except InvalidSpaceRef:
        return None
    return ref


@given(valid_refs(), valid_refs())
def test_two_different_valid_refs_never_share_an_id(a: SpaceRef | None, b: SpaceRef | None) -> None:
    if a is None or b is None:
        return
    assert (a == b) == (a.id == b.id)


@given(valid_refs())
def test_id_parses_back_to_the_same_ref(ref: SpaceRef | None) -> None:
    if ref is not None:
        assert parse_space_id(ref.id) == ref
