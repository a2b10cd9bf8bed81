"""What a fault (bench/loadlib/faults.py) plugs into a fixed-rate run.

The runner calls, for each fault of the run:

* `start(deployment)` once the generator process is sending (the deployment can kill and
  start an engram process by name, stop and start a backend, and lists every pid);
* `poll(elapsed)` about every 0.2 s while the generator runs (`elapsed`: seconds since the
  generator started), where a fault acts on its own timeline (kill at 10 s, restart ...);
* `finish(summary)` after the generator ended and before the loss check, with the run's
  summary (per-RPC figures, freshness samples with their times); it returns what the fault
  measured (recovery time, ...), which goes into the run's JSON under `faults`.
"""

from __future__ import annotations

from typing import Any, Protocol

from loadlib.deploy import Deployment


class Fault(Protocol):
    name: str

    def start(self, deployment: Deployment) -> None: ...

    def poll(self, elapsed: float) -> None: ...

    def finish(self, summary: dict[str, Any]) -> dict[str, Any]: ...
