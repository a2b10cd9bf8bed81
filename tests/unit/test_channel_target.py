"""Address lists become one round-robin gRPC target; a single address is left as it is."""

from __future__ import annotations

import pytest

from engram.client import EngramClient
from engram.domain.errors import InvalidArgument
from engram.runtime.channels import ClientTls, channel_target, tls_name_options

ROUND_ROBIN = (("grpc.lb_policy_name", "round_robin"),)


def test_one_address_is_passed_through_unbalanced() -> None:
    target = channel_target("storage.engram.svc:50051")
    assert (target.target, target.options, target.balanced) == (
        "storage.engram.svc:50051",
        (),
        False,
    )


@pytest.mark.parametrize(
    "addresses",
    [
        ["127.0.0.1:50061", "127.0.0.1:50062"],
        "127.0.0.1:50061,127.0.0.1:50062",
        " 127.0.0.1:50061 , 127.0.0.1:50062 ,",
    ],
)
def test_ipv4_replicas_share_one_round_robin_target(addresses: str | list[str]) -> None:
    target = channel_target(addresses)
    assert target.target == "ipv4:127.0.0.1:50061,127.0.0.1:50062"
    assert target.options == ROUND_ROBIN and target.balanced


def test_ipv6_replicas_and_resolver_targets_are_balanced() -> None:
    assert channel_target(["[::1]:1", "[::1]:2"]).target == "ipv6:[::1]:1,[::1]:2"
    for given in ("dns:///engram-storage-headless:50051", "ipv4:10.0.0.1:1,10.0.0.2:1"):
        target = channel_target(given)
        assert (target.target, target.options) == (given, ROUND_ROBIN)


@pytest.mark.parametrize(
    ("addresses", "says"),
    [
        ([], "no address"),
        ("storage-0:50051,storage-1:50051", "not an IP literal"),
        ("127.0.0.1:1,127.0.0.1", "no port"),
        (["127.0.0.1:1", "[::1]:2"], "mix IPv4 and IPv6"),
    ],
)
def test_lists_grpc_cannot_balance_are_refused(addresses: str | list[str], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        channel_target(addresses)


def test_the_client_refuses_a_bad_list_as_invalid_argument() -> None:
    with pytest.raises(InvalidArgument) as refused:
        EngramClient(["storage-0:50051", "storage-1:50051"])
    assert refused.value.field == "addr"


def test_the_cli_refuses_a_bad_list_with_an_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    import typer

    from engram.cli.client import engram_client

    with pytest.raises(typer.Exit) as exited, engram_client("storage-0:50051,storage-1:50051", ""):
        pass
    assert exited.value.exit_code == 2
    assert "not an IP literal" in capsys.readouterr().err


def test_replicas_on_one_host_over_tls_check_that_hosts_name() -> None:
    """An ipv4: list has no host to check certificates against: replicas on one address
    (several ports) are checked against it, so TLS to 127.0.0.1 replicas works."""
    target = channel_target("127.0.0.1:50061,127.0.0.1:50062")
    assert tls_name_options(target, ClientTls()) == [("grpc.ssl_target_name_override", "127.0.0.1")]
    v6 = channel_target(["[::1]:50061", "[::1]:50062"])
    assert tls_name_options(v6, ClientTls()) == [("grpc.ssl_target_name_override", "::1")]


def test_replicas_at_different_addresses_over_tls_need_a_server_name() -> None:
    target = channel_target(["10.0.0.5:50051", "10.0.0.6:50051"])
    with pytest.raises(ValueError, match="ENGRAM_TLS_SERVER_NAME"):
        tls_name_options(target, ClientTls())
    named = ClientTls(server_name="engram-storage")
    assert tls_name_options(target, named) == []  # channel_options sets the override
    assert tls_name_options(target, None) == []  # plaintext: nothing to check
    assert tls_name_options(channel_target("storage:50051"), ClientTls()) == []
