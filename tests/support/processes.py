"""Live processes whose command line mentions a marker (a test's tmp dir, say): what a test
checks is gone after a backend or a deployment stopped."""

from __future__ import annotations

import os
from pathlib import Path


def processes_mentioning(marker: str) -> list[tuple[int, str]]:
    """(pid, command line) of every live, non-zombie process but this one whose command line
    contains `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            raw = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state == b"Z":
            continue
        cmdline = raw.replace(b"\0", b" ").decode("utf-8", "replace")
        if marker in cmdline:
            found.append((int(entry), cmdline[:200]))
    return found
