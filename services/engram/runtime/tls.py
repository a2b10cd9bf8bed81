"""Server TLS and mTLS from files, reloaded when the files change (no restart).

gRPC asks the fetcher for a configuration at every new handshake; it compares the files'
modification times and sizes with the last ones it loaded and reads them again only when
they changed, so a certificate renewed on disk (cert-manager, a rotated Kubernetes Secret)
is served to new connections while open connections keep theirs.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc

log = logging.getLogger(__name__)

_Stamp = tuple[tuple[int, int] | None, ...]


@dataclass(frozen=True, slots=True)
class ServerTls:
    """The server's certificate chain and key; with `client_ca_file`, clients must present
    a certificate signed by that CA (mTLS)."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None

    @property
    def files(self) -> tuple[Path, ...]:
        return (self.cert_file, self.key_file, *filter(None, [self.client_ca_file]))


class ReloadingCertificates:
    """The certificate-configuration fetcher of `grpc.dynamic_ssl_server_credentials`."""

    def __init__(self, tls: ServerTls) -> None:
        self._tls = tls
        self._lock = threading.Lock()
        # Raises OSError at startup: a server must not start with unreadable files.
        self._stamp = self._stat()
        self.initial = self._load()

    def __call__(self) -> grpc.ServerCertificateConfiguration | None:
        """None keeps the current configuration (gRPC's contract for the fetcher)."""
        with self._lock:
            try:
                stamp = self._stat()
                if stamp == self._stamp:
                    return None
                configuration = self._load()
            except OSError as error:
                # Mid-rotation (a file replaced, its pair not yet): keep serving the old one.
                log.warning("TLS files unreadable, keeping the loaded certificate: %s", error)
                return None
            self._stamp = stamp
            log.info("TLS certificate reloaded", extra={"cert_file": str(self._tls.cert_file)})
            return configuration

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(
            self.initial,
            # gRPC documents None as "keep the current one"; types-grpcio's stub omits it.
            self,  # type: ignore[arg-type]
            require_client_authentication=self._tls.client_ca_file is not None,
        )

    def _stat(self) -> _Stamp:
        stamps: list[tuple[int, int] | None] = []
        for path in self._tls.files:
            result = os.stat(path)
            stamps.append((result.st_mtime_ns, result.st_size))
        return tuple(stamps)

    def _load(self) -> grpc.ServerCertificateConfiguration:
        tls = self._tls
        pair = (_read(tls.key_file), _read(tls.cert_file))
        client_ca = _read(tls.client_ca_file) if tls.client_ca_file is not None else None
        return grpc.ssl_server_certificate_configuration([pair], root_certificates=client_ca)


def server_credentials(tls: ServerTls) -> grpc.ServerCredentials:
    """Credentials that follow the files on disk; OSError names a file that is unreadable."""
    return ReloadingCertificates(tls).credentials()


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise OSError(f"cannot read TLS file {path}: {error.strerror or error}") from None
