"""The error model end to end: every domain error has a status code, and every one survives
the trip through a real grpc.aio server (the interceptor every servicer runs behind) and
back through `from_rpc_error` (what every internal client uses) as the same error."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

import engram
from engram.authz.enforcement import FixedPrincipalAuthenticator
from engram.domain.errors import (
    MAX_MESSAGE_BYTES,
    MAX_SHOWN_CHARS,
    EngramError,
    EtagMismatch,
    InvalidArgument,
    PermissionDenied,
    QuotaExceeded,
    clip,
    quoted,
)
from engram.domain.principals import LOCAL_ADMIN
from engram.runtime.errors import (
    STATUS_BY_ERROR,
    code_for_class,
    error_classes,
    from_rpc_error,
    received_status,
    status_code_for,
)
from engram.runtime.interceptors import ServerInterceptor

SERVICE = "engram.test.Errors"


def _import_every_module() -> None:
    for module in pkgutil.walk_packages(engram.__path__, "engram."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)


_import_every_module()
ALL_ERRORS = sorted(error_classes(), key=lambda cls: f"{cls.__module__}.{cls.__qualname__}")


def sample(cls: type[EngramError]) -> EngramError:
    """An instance of `cls` carrying every detail its family can travel with."""
    message = f"{cls.__name__} happened; do something else"
    if issubclass(cls, PermissionDenied):
        return cls(message, rule="tenant_mismatch")
    if issubclass(cls, EtagMismatch):
        return cls(message, current_sha256="ab" * 32, subject="notes/a.md")
    if issubclass(cls, QuotaExceeded):
        return cls(
            message,
            limit="space",
            subject="v1:private:acme:::ann:notes",
            limit_bytes=100,
            used_bytes=90,
            requested_bytes=20,
        )
    if issubclass(cls, InvalidArgument):
        return cls(message, field="space.name", metadata={"hint": "shorter"})
    return cls(message, metadata={"backend": "example"})


def test_every_domain_error_has_a_status_code() -> None:
    assert len(ALL_ERRORS) > 25, "the walk should find every service package's errors"
    internal = [
        cls.__qualname__ for cls in ALL_ERRORS if code_for_class(cls) == grpc.StatusCode.INTERNAL
    ]
    assert not internal, f"add these to STATUS_BY_ERROR: {internal}"


def test_each_error_belongs_to_exactly_one_family() -> None:
    for cls in ALL_ERRORS:
        families = [family for family, _ in STATUS_BY_ERROR if issubclass(cls, family)]
        assert len(families) == 1, f"{cls.__qualname__} is in {families}"


def test_reasons_are_unique_upper_snake() -> None:
    seen: dict[str, str] = {}
    for cls in ALL_ERRORS:
        assert cls.reason.isupper() and " " not in cls.reason, cls.reason
        assert cls.reason not in seen, f"{cls.__qualname__} reuses {seen.get(cls.reason)}'s"
        seen[cls.reason] = cls.__qualname__


def test_readme_documents_every_reason_under_its_code() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    rows = {
        line.split("|")[1].strip(): line
        for line in readme.splitlines()
        if line.startswith("| ") and line.split("|")[1].strip().isupper()
    }
    for cls in ALL_ERRORS:
        if issubclass(cls, PermissionDenied):
            continue  # its reason on the wire is the rule's name
        row = rows.get(code_for_class(cls).name, "")
        assert f"`{cls.reason}`" in row, f"README's error table lacks {cls.reason}"


def test_index_unavailable_is_unavailable() -> None:
    from engram.indexes.ports import IndexUnavailable

    error = IndexUnavailable("qdrant collections failed: connection refused")
    assert status_code_for(error) == grpc.StatusCode.UNAVAILABLE


# --- bounded errors --------------------------------------------------------------------------


def test_quoted_values_are_clipped() -> None:
    value = "x" * 5000
    assert quoted(value) == repr("x" * MAX_SHOWN_CHARS + "\u2026")
    assert clip("short") == "short"


def test_messages_and_metadata_are_bounded() -> None:
    error = InvalidArgument("é" * 10_000, field="path", metadata={"entry": "y" * 9000})
    assert len(error.message.encode()) <= MAX_MESSAGE_BYTES + 3
    assert error.message.endswith("\u2026")
    assert len(error.metadata["entry"]) == MAX_SHOWN_CHARS + 1


# --- the round trip --------------------------------------------------------------------------


@pytest.fixture
async def error_server() -> AsyncIterator[grpc.aio.Channel]:
    """A real grpc.aio server behind engram's interceptor whose one method raises the
    domain error named in the request."""
    by_name = {f"{cls.__module__}.{cls.__qualname__}": cls for cls in ALL_ERRORS}

    async def raise_named(request: bytes, context: Any) -> bytes:
        raise sample(by_name[request.decode()])

    server = grpc.aio.server(
        interceptors=[ServerInterceptor(FixedPrincipalAuthenticator(LOCAL_ADMIN), access_log=False)]
    )
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                SERVICE, {"Raise": grpc.unary_unary_rpc_method_handler(raise_named)}
            ),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel
    finally:
        await server.stop(None)


async def test_every_error_round_trips_through_grpc(error_server: grpc.aio.Channel) -> None:
    call = error_server.unary_unary(f"/{SERVICE}/Raise")
    for cls in ALL_ERRORS:
        sent = sample(cls)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call(f"{cls.__module__}.{cls.__qualname__}".encode())
        assert caught.value.code() == status_code_for(sent), cls.__qualname__
        back = from_rpc_error(caught.value, "test")
        assert type(back) is cls
        assert back.info_reason == sent.info_reason
        assert received_status(caught.value).reason == sent.info_reason
        assert back.message == sent.message
        assert back.metadata == sent.metadata
        if isinstance(sent, InvalidArgument):
            assert isinstance(back, InvalidArgument) and back.field == sent.field
        if isinstance(sent, QuotaExceeded):
            assert isinstance(back, QuotaExceeded)
            assert (back.limit, back.subject, back.used_bytes) == (
                sent.limit,
                sent.subject,
                sent.used_bytes,
            )
        if isinstance(sent, EtagMismatch):
            assert isinstance(back, EtagMismatch)
            assert (back.current_sha256, back.subject) == (sent.current_sha256, sent.subject)
        if isinstance(sent, PermissionDenied):
            assert isinstance(back, PermissionDenied) and back.rule == sent.rule


async def test_a_status_engram_did_not_shape_is_unavailable(
    error_server: grpc.aio.Channel,
) -> None:
    """UNIMPLEMENTED from the peer's gRPC stack (no ErrorInfo) is the peer failing, not the
    caller's mistake: Unavailable naming the peer, for the caller to retry."""
    from engram.domain.errors import Unavailable

    missing = error_server.unary_unary(f"/{SERVICE}/NoSuchMethod")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await missing(b"")
    back = from_rpc_error(caught.value, "Errors.NoSuchMethod")
    assert type(back) is Unavailable
    assert back.metadata == {"peer": "Errors.NoSuchMethod", "code": "UNIMPLEMENTED"}
    assert back.message.startswith("Errors.NoSuchMethod failed: UNIMPLEMENTED")
