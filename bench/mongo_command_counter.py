"""Runs `engram ARGS...` with a PyMongo command listener counting the commands it sends.

    python bench/mongo_command_counter.py serve storage --port 50051

The counts, by "command collection", are written as JSON to $ENGRAM_BENCH_COMMAND_COUNTS
on SIGUSR1 and at exit (bench/storage_bench.py --count-commands reads them around each
phase). A benchmark helper, not part of engram.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import runpy
import signal
import sys
from pathlib import Path
from typing import Any

from pymongo import monitoring

COUNTS: collections.Counter[str] = collections.Counter()


class Counting(monitoring.CommandListener):
    def started(self, event: monitoring.CommandStartedEvent) -> None:
        target = event.command.get(event.command_name)
        COUNTS[f"{event.command_name} {target if isinstance(target, str) else ''}".strip()] += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def dump(*_: Any) -> None:
    out = Path(os.environ["ENGRAM_BENCH_COMMAND_COUNTS"])
    partial = out.with_suffix(".tmp")
    partial.write_text(json.dumps(COUNTS))
    partial.replace(out)


if __name__ == "__main__":
    monitoring.register(Counting())
    signal.signal(signal.SIGUSR1, dump)
    atexit.register(dump)
    sys.argv = ["engram", *sys.argv[1:]]
    runpy.run_module("engram", run_name="__main__")
