"""Document path rules: one canonical spelling, refused otherwise with the canonical form."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engram.domain.errors import InvalidPath
from engram.domain.paths import (
    canonical_form,
    directory_upper_bound,
    validate_directory,
    validate_document_path,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("given_path", "canonical"),
    [
        ("./MEMORY.md", "MEMORY.md"),
        ("a//b.md", "a/b.md"),
        ("/abs.md", "abs.md"),
        ("a/./b.md", "a/b.md"),
        ("a/../b.md", "b.md"),
        ("notes\\x.md", "notes/x.md"),
        ("dir/x.md/", "dir/x.md"),
        ("cafe\u0301.md", "caf\u00e9.md"),
    ],
)
def test_non_canonical_path_names_the_canonical_form(given_path: str, canonical: str) -> None:
    with pytest.raises(InvalidPath) as caught:
        validate_document_path(given_path)
    assert f'use "{canonical}"' in caught.value.message


@pytest.mark.parametrize("bad", ["../x.md", "a/../../x.md", ".."])
def test_escaping_the_root_is_refused(bad: str) -> None:
    with pytest.raises(InvalidPath, match="escapes"):
        validate_document_path(bad)


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ("", "required"),
        ("notes.txt", "Markdown"),
        ("x.MD", 'use "x.md"'),
        (".md", "Markdown"),
        ("dir/", 'use "dir"'),
        ("a\x00b.md", "NUL"),
        ("a\x07b.md", "control"),
        ("a/ b.md", "whitespace"),
        ("/".join(["d"] * 16) + "/x.md", "segments"),
        ("x" * 510 + ".md", "bytes"),
    ],
)
def test_bad_paths_are_refused_with_a_reason(bad: str, fragment: str) -> None:
    with pytest.raises(InvalidPath) as caught:
        validate_document_path(bad)
    assert fragment in caught.value.message


@pytest.mark.parametrize("good", ["MEMORY.md", "daily/2026-03-03.md", "a/b/c/d.md", "ünï.md"])
def test_canonical_paths_pass(good: str) -> None:
    assert validate_document_path(good) == good


def test_directories_follow_the_same_canonical_rules() -> None:
    assert validate_directory("") == ""
    assert validate_directory("notes/2026") == "notes/2026"
    with pytest.raises(InvalidPath, match='use "notes"'):
        validate_directory("notes/")


segment = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_é", min_size=1, max_size=8)


@given(st.lists(segment, min_size=0, max_size=5), segment)
def test_canonical_form_is_a_fixed_point(dirs: list[str], leaf: str) -> None:
    path = "/".join([*dirs, leaf + ".md"])
    assert canonical_form(path) == path
    assert validate_document_path(path) == path
    noisy = "./" + path.replace("/", "//")
    assert canonical_form(noisy) == path


@given(segment, st.lists(segment, min_size=1, max_size=4))
def test_upper_bound_covers_exactly_the_directory(directory: str, rest: list[str]) -> None:
    inside = directory + "/" + "/".join(rest) + ".md"
    bound = directory_upper_bound(directory)
    assert directory + "/" <= inside < bound
    sibling = directory + "0.md"
    assert not (directory + "/" <= sibling < bound) or sibling.startswith(directory + "/")
