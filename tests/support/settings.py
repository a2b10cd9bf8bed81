"""Settings for servers started inside tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engram.runtime.settings import Settings


def server_settings(data_dir: Path, **overrides: Any) -> Settings:
    """An in-test server: ephemeral port, no metrics port, quiet logs, no scheduled
    maintenance (RunJob still runs jobs)."""
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "grpc_port": 0,
        "metrics_port": 0,
        "access_log": False,
        # Scheduled maintenance jobs would change a test's data behind its back; the tests
        # of the schedule turn it on.
        "maintenance_schedule": False,
    }
    values.update(overrides)
    return Settings(**values)
