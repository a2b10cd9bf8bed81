"""Client channels: one factory for every internal gRPC client, with TLS and keepalive.

Imports only grpc, so the typed client (`engram.client`) and the CLI use it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

MIB = 1024 * 1024


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


def open_channel(
    addr: str,
    config: ChannelConfig,
    extra_options: list[tuple[str, str | int]] | None = None,
    *,
    interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
) -> grpc.aio.Channel:
    """A grpc.aio channel to `addr`: TLS when `config.tls` is set, plaintext otherwise;
    `interceptors` wrap every call (the servers pass tracing's)."""
    options = [*channel_options(config), *(extra_options or [])]
    if config.tls is None:
        return grpc.aio.insecure_channel(addr, options=options, interceptors=interceptors)
    return grpc.aio.secure_channel(
        addr, config.tls.credentials(), options=options, interceptors=interceptors
    )


def open_sync_channel(addr: str, config: ChannelConfig) -> grpc.Channel:
    """The blocking twin of `open_channel` (the CLI)."""
    options = channel_options(config)
    if config.tls is None:
        return grpc.insecure_channel(addr, options=options)
    return grpc.secure_channel(addr, config.tls.credentials(), options=options)


def _read(path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as error:
        raise OSError(f"cannot read TLS file {path}: {error.strerror or error}") from None
