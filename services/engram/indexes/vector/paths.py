"""File-system helpers of the embedded vector index: directory names and atomic JSON files."""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any


def collection_dir_name(model_id: str) -> str:
    """A file-system-safe directory name, unique per model id."""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", model_id)[:64]
    digest = hashlib.sha256(model_id.encode("utf-8")).hexdigest()[:12]
    return f"{readable}-{digest}"


def atomic_write_json(path: Path, content: dict[str, Any]) -> None:
    """Writes `content` to `path` so a reader sees the old file or the new, never half."""
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(content, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
