"""Page sizes and opaque page tokens bound to the listing that issued them."""

from __future__ import annotations

import pytest

from engram.domain.errors import InvalidArgument, InvalidPageToken
from engram.domain.pagination import PageSize, decode_page_token, encode_page_token

pytestmark = pytest.mark.unit


def test_page_size_rules() -> None:
    size = PageSize(default=100, maximum=1000)
    assert size.resolve(0) == 100
    assert size.resolve(5) == 5
    assert size.resolve(10**6) == 1000
    with pytest.raises(InvalidArgument, match="page_size"):
        size.resolve(-1)


def test_token_round_trip() -> None:
    scope = ("list", "v1:private:acme::::n", "", "True")
    token = encode_page_token(scope, {"start": "b.md", "inclusive": False})
    assert decode_page_token(token, scope) == {"start": "b.md", "inclusive": False}
    assert decode_page_token("", scope) is None


def test_a_token_from_another_listing_is_refused() -> None:
    token = encode_page_token(("list", "v1:private:globex::::n", "", "True"), {"start": "x"})
    with pytest.raises(InvalidPageToken, match="different listing"):
        decode_page_token(token, ("list", "v1:private:acme::::n", "", "True"))


@pytest.mark.parametrize("garbage", ["%%%", "bm90IGpzb24", "eyJ2IjoyfQ", "e30"])
def test_damaged_tokens_are_refused(garbage: str) -> None:
    with pytest.raises(InvalidPageToken):
        decode_page_token(garbage, ("list",))
