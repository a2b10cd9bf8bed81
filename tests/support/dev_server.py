"""`engram dev --auth` in its own process, with its memory read from /proc: for the tests and
benchmarks that send it hostile or large inputs and check what it keeps."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.tokens import TEST_JWT_SECRET


class ProcessMemory:
    """A live process's resident memory, read from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def _status(self, field: str) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise AssertionError(f"no {field} in /proc status")

    def rss(self) -> int:
        return self._status("VmRSS")

    def reset_peak(self) -> None:
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")

    def peak(self) -> int:
        return self._status("VmHWM")


class DevServer(ProcessMemory):
    def __init__(self, process: subprocess.Popen[str], port: int) -> None:
        super().__init__(process.pid)
        self.process = process
        self.port = port

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_dev_server(data_dir: Path, **env: str) -> DevServer:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    process = subprocess.Popen(
        [sys.executable, "-m", "engram", "dev", "--auth", "--port", str(port)]
        + ["--data-dir", str(data_dir)],
        env={
            **os.environ,
            "ENGRAM_METRICS_PORT": "0",
            "ENGRAM_JWT_SECRET": TEST_JWT_SECRET,
            "ENGRAM_ACCESS_LOG": "false",
            **env,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if "serving on" in line:
            break
    else:
        raise AssertionError("engram dev did not start")
    return DevServer(process, port)


@contextmanager
def dev_server(data_dir: Path, **env: str) -> Iterator[DevServer]:
    running = start_dev_server(data_dir, **env)
    try:
        yield running
    finally:
        running.stop()
