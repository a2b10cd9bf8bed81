"""Settings for servers started inside tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engram.runtime.settings import Settings


def server_settings(data_dir: Path, **overrides: Any) -> Settings:
    """An in-test server: ephemeral port, no metrics port, quiet logs."""
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "grpc_port": 0,
        "metrics_port": 0,
        "access_log": False,
    }
    values.update(overrides)
    return Settings(**values)
