"""Client channels: one factory for every internal gRPC client, with TLS and keepalive.

Imports only grpc, so the typed client (`engram.client`) and the CLI use it too.

An address is one `host:port`, a list of replicas' `ip:port` (a sequence or one string
"127.0.0.1:50061,127.0.0.1:50062"), or a gRPC target with a resolver scheme that names
several (`dns:///engram-storage-headless:50051`, `ipv4:10.0.0.1:50051,10.0.0.2:50051`).
Several replicas share one channel with gRPC's `round_robin` balancing: each call goes to
the next connected replica, a replica whose connection failed is left out until it is back.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

MIB = 1024 * 1024
# Targets whose resolver may answer several addresses: those are balanced round-robin.
BALANCED_SCHEMES = ("dns:", "ipv4:", "ipv6:")

Addresses = str | Sequence[str]


@dataclass(frozen=True, slots=True)
class ChannelTarget:
    """What grpc is given for an address or a list of replicas: the target string and the
    channel options it needs (round_robin balancing for several replicas)."""

    target: str
    options: tuple[tuple[str, str | int], ...] = ()

    @property
    def balanced(self) -> bool:
        return bool(self.options)


def channel_target(addresses: Addresses) -> ChannelTarget:
    """The gRPC target for `addresses` (see the module's docstring). Raises ValueError for an
    empty list, an entry without a port, or a list that mixes host names, IPv4 and IPv6:
    gRPC balances a fixed list only over IP literals; replicas behind a name are reached with
    a `dns:` target whose name resolves to each of them (a headless Kubernetes Service)."""
    if isinstance(addresses, str):
        text = addresses.strip()
        if text.startswith(BALANCED_SCHEMES):
            return ChannelTarget(text, (_ROUND_ROBIN,))
        entries = [entry.strip() for entry in text.split(",")]
    else:
        entries = [entry.strip() for entry in addresses]
    entries = [entry for entry in entries if entry]
    if not entries:
        raise ValueError("no address given: expected host:port or a list of ip:port")
    if len(entries) == 1:
        return ChannelTarget(entries[0])
    families = {_ip_family(entry) for entry in entries}
    if families == {4}:
        return ChannelTarget("ipv4:" + ",".join(entries), (_ROUND_ROBIN,))
    if families == {6}:
        return ChannelTarget("ipv6:" + ",".join(entries), (_ROUND_ROBIN,))
    raise ValueError(
        f"addresses {', '.join(entries)} mix IPv4 and IPv6; list replicas of one family"
    )


_ROUND_ROBIN: tuple[str, str | int] = ("grpc.lb_policy_name", "round_robin")


def _ip_family(entry: str) -> int:
    host, colon, port = entry.rpartition(":")
    if not colon or not port.isdigit():
        raise ValueError(f"address {entry!r} has no port: expected ip:port")
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]")).version
    except ValueError:
        raise ValueError(
            f"address {entry!r} of a list is not an IP literal: list replicas as ip:port, "
            "or give one dns:///name:port target whose name resolves to each replica"
        ) from None


@dataclass(frozen=True, slots=True)
class ClientTls:
    """TLS of a client channel: the CA to trust (None = the system's roots), a client
    certificate and key for mTLS, and the name to check in the server's certificate when
    it differs from the address's host."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("a client certificate needs its key, and a key its certificate")

    def credentials(self) -> grpc.ChannelCredentials:
        """Reads the files now; raises OSError naming a file that cannot be read."""
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca_file),
            private_key=_read(self.key_file),
            certificate_chain=_read(self.cert_file),
        )


@dataclass(frozen=True, slots=True)
class ChannelConfig:
    """How a process's channels to other engram services are opened."""

    tls: ClientTls | None = None
    # HTTP/2 pings on an idle connection find a dead peer (a killed pod, a dropped NAT
    # entry) before a call does; 0 = no pings.
    keepalive_seconds: float = 60.0
    keepalive_timeout_seconds: float = 20.0
    max_message_bytes: int = 16 * MIB


def channel_options(config: ChannelConfig) -> list[tuple[str, str | int]]:
    options: list[tuple[str, str | int]] = [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", config.max_message_bytes),
    ]
    if config.keepalive_seconds > 0:
        options += [
            ("grpc.keepalive_time_ms", int(config.keepalive_seconds * 1000)),
            ("grpc.keepalive_timeout_ms", int(config.keepalive_timeout_seconds * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            # Pings also on a connection without calls (the default stops after two).
            ("grpc.http2.max_pings_without_data", 0),
        ]
    if config.tls is not None and config.tls.server_name:
        options.append(("grpc.ssl_target_name_override", config.tls.server_name))
    return options


def tls_name_options(target: ChannelTarget, tls: ClientTls | None) -> list[tuple[str, str]]:
    """The name checked in the servers' certificates when a TLS channel has several replicas
    given as IP literals (an `ipv4:`/`ipv6:` list), whose default authority is no host: the
    replicas' one IP address when they share it (several ports on one host); `server_name`
    when set. Raises ValueError for replicas at different addresses without a server name,
    which every call would otherwise fail at the certificate check."""
    if tls is None or tls.server_name or not target.target.startswith(("ipv4:", "ipv6:")):
        return []
    hosts = {
        entry.strip().rsplit(":", 1)[0].strip("[]")
        for entry in target.target.split(":", 1)[1].split(",")
        if entry.strip()
    }
    if len(hosts) == 1:
        return [("grpc.ssl_target_name_override", hosts.pop())]
    raise ValueError(
        f"replicas at {', '.join(sorted(hosts))} over TLS need the name their certificates "
        "carry: set ENGRAM_TLS_SERVER_NAME (ClientTls(server_name=...) in the client)"
    )


def open_channel(
    addr: Addresses,
    config: ChannelConfig,
    extra_options: list[tuple[str, str | int]] | None = None,
    *,
    interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
) -> grpc.aio.Channel:
    """A grpc.aio channel to `addr` (one address or several replicas, balanced round-robin):
    TLS when `config.tls` is set, plaintext otherwise; `interceptors` wrap every call (the
    servers pass tracing's). Raises ValueError for an address list `channel_target` refuses."""
    target = channel_target(addr)
    options = [
        *channel_options(config),
        *target.options,
        *tls_name_options(target, config.tls),
        *(extra_options or []),
    ]
    if config.tls is None:
        return grpc.aio.insecure_channel(target.target, options=options, interceptors=interceptors)
    return grpc.aio.secure_channel(
        target.target, config.tls.credentials(), options=options, interceptors=interceptors
    )


def open_sync_channel(
    addr: Addresses,
    config: ChannelConfig,
    extra_options: list[tuple[str, str | int]] | None = None,
) -> grpc.Channel:
    """The blocking twin of `open_channel` (the blocking client)."""
    target = channel_target(addr)
    options = [
        *channel_options(config),
        *target.options,
        *tls_name_options(target, config.tls),
        *(extra_options or []),
    ]
    if config.tls is None:
        return grpc.insecure_channel(target.target, options=options)
    return grpc.secure_channel(target.target, config.tls.credentials(), options=options)


def _read(path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as error:
        raise OSError(f"cannot read TLS file {path}: {error.strerror or error}") from None
