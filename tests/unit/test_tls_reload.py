"""The server's certificate fetcher: unchanged files keep the configuration, changed ones
load again, and files unreadable mid-rotation keep the last good one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engram.runtime.tls import ReloadingCertificates, ServerTls
from tests.support.certs import TestCa

pytestmark = pytest.mark.unit


def test_reload_follows_the_files(tmp_path: Path) -> None:
    ca = TestCa(tmp_path)
    pair = ca.issue("server", server=True)
    fetcher = ReloadingCertificates(ServerTls(pair.cert, pair.key, ca.path))
    assert fetcher() is None  # nothing changed

    staging = tmp_path / "next"
    staging.mkdir()
    renewed = ca.issue("server", server=True, into=staging)
    os.replace(renewed.cert, pair.cert)
    os.replace(renewed.key, pair.key)
    assert fetcher() is not None
    assert fetcher() is None

    pair.key.unlink()  # mid-rotation: the old configuration stays
    assert fetcher() is None


def test_an_unreadable_file_at_start_names_it(tmp_path: Path) -> None:
    ca = TestCa(tmp_path)
    pair = ca.issue("server", server=True)
    with pytest.raises(OSError, match="missing.pem"):
        ReloadingCertificates(ServerTls(pair.cert, pair.key, tmp_path / "missing.pem"))
