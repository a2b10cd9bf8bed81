"""engram.client's one error mapping (engram.client.errors): every domain error a server
raises comes back to the caller as the same class, with its message and details, importable
from engram.client; a status engram did not shape becomes Unavailable naming the call. And
the client's other conversions: the change feed, job runs, settings, pages, spaces."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

import engram.client
from engram.client import (
    AsyncClient,
    EtagMismatch,
    InvalidPath,
    PermissionDenied,
    QuotaExceeded,
    RateLimited,
    Space,
    SpaceMaintenance,
    Unavailable,
)
from engram.client.errors import domain_error, explain
from engram.client.mapping import space_to_proto
from engram.client.results.feed import watch_event
from engram.client.results.maintenance import job_run, settings_to_proto
from engram.domain.changes import TooManyWatchers
from engram.domain.errors import EngramError, InvalidArgument
from engram.domain.spaces import SpaceRef, Visibility
from engram.runtime.errors import error_classes, status_code_for, to_rpc_status
from engram.v1 import maintenance_pb2, space_pb2, storage_pb2

pytestmark = pytest.mark.unit


def failed_call(error: EngramError) -> grpc.aio.AioRpcError:
    """What a grpc.aio call raises when the server answered `error`."""
    status = to_rpc_status(error)
    return grpc.aio.AioRpcError(
        code=status_code_for(error),
        initial_metadata=grpc.aio.Metadata(),
        trailing_metadata=grpc.aio.Metadata(
            ("grpc-status-details-bin", status.SerializeToString())
        ),
        details=status.message,
    )


def sample(cls: type[EngramError]) -> EngramError:
    if issubclass(cls, EtagMismatch):
        return cls("changed", subject="a.md", current_sha256="ab" * 32)
    if issubclass(cls, QuotaExceeded):
        return cls(
            "full", limit="tenant", subject="acme", used_bytes=10, limit_bytes=5, requested_bytes=1
        )
    if issubclass(cls, RateLimited):
        return cls("slow down", retry_after_seconds=7)
    if issubclass(cls, InvalidArgument):
        return cls(f"bad {cls.__name__}", field="path")
    if issubclass(cls, PermissionDenied):
        return cls("not yours", rule="member_role_required")
    return cls(f"failed: {cls.__name__}")


# The errors a server sends: engram.domain.errors' classes.
SENT = [cls for cls in error_classes() if cls.__module__ == "engram.domain.errors"]


@pytest.mark.parametrize("cls", SENT, ids=lambda cls: cls.__name__)
def test_every_domain_error_comes_back_as_itself_and_is_exported(
    cls: type[EngramError],
) -> None:
    sent = sample(cls)
    received = domain_error(failed_call(sent), "StorageService.WriteDocument")
    assert type(received) is cls
    assert received.message == sent.message
    assert getattr(engram.client, cls.__name__) is cls


def test_details_travel_with_the_error() -> None:
    limited = domain_error(failed_call(RateLimited("slow", retry_after_seconds=7)), "x")
    assert isinstance(limited, RateLimited) and limited.retry_after_seconds == 7
    path = domain_error(failed_call(InvalidPath("use a.md", field="path")), "x")
    assert isinstance(path, InvalidPath) and path.field == "path"


@pytest.mark.parametrize("code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED])
def test_a_status_engram_did_not_shape_is_unavailable_naming_the_call(
    code: grpc.StatusCode,
) -> None:
    bare = grpc.aio.AioRpcError(
        code=code,
        initial_metadata=grpc.aio.Metadata(),
        trailing_metadata=grpc.aio.Metadata(),
        details="connection refused",
    )
    error = domain_error(bare, "QuotaService.Charge")
    assert isinstance(error, Unavailable)
    assert "QuotaService.Charge" in error.message and code.name in error.message


def test_the_issue_names_import_from_the_client() -> None:
    from engram.client import Conflict, ProtectedFile, RateLimited  # noqa: F401


def test_a_domain_space_ref_goes_on_the_wire_as_is() -> None:
    ref = SpaceRef(Visibility.BOT, tenant="acme", name="runs", project="p1", bot="b1")
    message = space_to_proto(ref)
    assert (message.visibility, message.tenant, message.bot) == (
        space_pb2.VISIBILITY_BOT,
        "acme",
        "b1",
    )
    assert space_to_proto(Space("bot", "runs", project="p1", bot="b1", tenant="acme")) == message


def test_watch_events_are_changes_or_the_caught_up_mark() -> None:
    at = Timestamp()
    at.FromDatetime(datetime(2026, 1, 2, 3, 4, 5))
    change = watch_event(
        storage_pb2.WatchSpaceResponse(
            change=storage_pb2.SpaceChange(
                cursor="c1", kind=storage_pb2.CHANGE_KIND_PURGED, path="a.md", version=3, at=at
            )
        )
    )
    assert change.change is not None and not change.caught_up
    assert (change.change.kind, change.change.cursor) == ("purged", "c1")
    assert change.change.at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    caught_up = watch_event(storage_pb2.WatchSpaceResponse(caught_up=True))
    assert caught_up.change is None and caught_up.caught_up


def test_job_runs_and_settings() -> None:
    run = job_run(
        maintenance_pb2.JobRun(
            run_id="r1",
            job="dream",
            outcome=maintenance_pb2.JOB_OUTCOME_RUNNING,
            counts={"promoted": 2},
        )
    )
    assert (run.outcome, run.finished_at, dict(run.counts)) == ("running", None, {"promoted": 2})
    wire = settings_to_proto(SpaceMaintenance(log_retention="delete", log_retention_days=3))
    assert wire.log_retention == maintenance_pb2.LOG_RETENTION_DELETE
    with pytest.raises(InvalidArgument) as bad:
        settings_to_proto(SpaceMaintenance(log_retention="forever"))
    assert bad.value.field == "log_retention"


async def test_named_choices_are_refused_before_any_call() -> None:
    async with AsyncClient("127.0.0.1:1", retries=0, timeout=1) as client:
        with pytest.raises(InvalidArgument) as strategy:
            await client.import_space(b"", strategy="merge")
        assert strategy.value.field == "strategy"
        with pytest.raises(InvalidArgument) as role:
            await client.create_token(role="owner")
        assert role.value.field == "role"
        with pytest.raises(InvalidArgument) as action:
            await client.authorize("erase")
        assert action.value.field == "action"
        with pytest.raises(InvalidArgument):
            client.with_options(timeout=-1)


def test_a_reason_of_a_class_only_the_server_defines_keeps_its_reason() -> None:
    class ServerOnly(RateLimited):  # as storage's import budget is: not in engram.domain
        reason = "SERVER_ONLY_LIMIT"

    status_error = failed_call(ServerOnly("too many at once"))
    ServerOnly.reason = "RENAMED_AWAY"  # this process no longer knows the sent reason
    received = domain_error(status_error, "StorageService.ImportSpace")
    assert type(received) is RateLimited
    assert received.info_reason == "SERVER_ONLY_LIMIT"
    assert explain(received) == "RESOURCE_EXHAUSTED: too many at once [SERVER_ONLY_LIMIT]"


def test_the_change_feeds_errors_come_back_as_themselves_in_a_fresh_client() -> None:
    """A process that imported only engram.client (as `engram watch` does) still knows the
    feed's TOO_MANY_WATCHERS and CURSOR_EXPIRED."""
    script = (
        "import grpc, sys\n"
        "from engram.client.errors import domain_error\n"
        "from engram.v1 import storage_pb2\n"
        "assert 'engram.domain.changes' not in sys.modules\n"
        "status = bytes.fromhex(sys.argv[1])\n"
        "error = grpc.aio.AioRpcError(code=grpc.StatusCode.RESOURCE_EXHAUSTED,"
        " initial_metadata=grpc.aio.Metadata(), trailing_metadata=grpc.aio.Metadata("
        "('grpc-status-details-bin', status)), details=sys.argv[2])\n"
        "received = domain_error(error, 'StorageService.WatchSpace')\n"
        "print(type(received).__name__, received.info_reason)\n"
    )
    sent = TooManyWatchers("256 watchers already", retry_after_seconds=1)
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            to_rpc_status(sent).SerializeToString().hex(),
            sent.message,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["TooManyWatchers", "TOO_MANY_WATCHERS"]
