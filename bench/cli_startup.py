"""CPU time of `engram` client commands (issue 17: each at most 0.25 s), against an `engram
dev` in a subprocess: `--help`, `--version`, `ls`, `ls --json`, `read` and `write`. Each is
run `--runs` times as a fresh process; the CPU time (user + system, of the process and its
children) comes from the kernel's rusage of the reaped child, so the server's CPU is not in
it. Prints the median and the worst run per command, and the 12 slowest imports of
`engram --help` (python -X importtime) to show what start-up still pays for.

    flock /tmp/engram-bench.lock .venv/bin/python bench/cli_startup.py --runs 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import free_port, spawn

TARGET_SECONDS = 0.25
ENGRAM = [sys.executable, "-m", "engram"]
# As a user runs it: bytecode cached (a PYTHONDONTWRITEBYTECODE=1 shell would recompile every
# engram module on each call, ~0.05 s); each command runs once untimed to write the caches.
CLIENT_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_cpu(command: list[str], stdin: bytes = b"") -> float:
    """User + system CPU seconds of one run of `command`, from the rusage of the child as it is
    reaped (wait4), so nothing else's CPU is counted; a failing command raises."""
    process = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=CLIENT_ENV,
    )
    assert process.stdin is not None
    process.stdin.write(stdin)
    process.stdin.close()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {process.returncode}")
    return float(usage.ru_utime + usage.ru_stime)


def slowest_imports(count: int) -> list[tuple[float, str]]:
    result = subprocess.run(
        [*ENGRAM[:1], "-X", "importtime", *ENGRAM[1:], "--help"],
        env=CLIENT_ENV,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    rows = []
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|")
        if cumulative.strip().isdigit() and not name.startswith("  "):
            rows.append((int(cumulative) / 1e6, name.strip()))
    return sorted(rows, reverse=True)[:count]


def wait_serving(port: int, deadline: float) -> None:
    addr = f"127.0.0.1:{port}"
    while time.monotonic() < deadline:
        probe = subprocess.run(
            [*ENGRAM, "--addr", addr, "ls"], capture_output=True, timeout=60, check=False
        )
        if probe.returncode == 0:
            return
        time.sleep(1)
    raise TimeoutError("engram dev did not serve in time")


def main(runs: int) -> None:
    print(
        f"python {sys.version.split()[0]}, {runs} runs per command (after one untimed), "
        f"load {load()}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        env = {**os.environ, "ENGRAM_METRICS_PORT": "0", "ENGRAM_ACCESS_LOG": "false"}
        server = spawn(
            [*ENGRAM, "dev", "--port", str(port), "--data-dir", f"{tmp}/state"],
            env,
            Path(tmp) / "server.log",
        )
        try:
            wait_serving(port, time.monotonic() + 180)
            addr = ["--addr", f"127.0.0.1:{port}"]
            note = b"# bench\n\nA note written by bench/cli_startup.py.\n"
            run_cpu([*ENGRAM, *addr, "write", "bench.md"], note)
            commands: dict[str, tuple[list[str], bytes]] = {
                "engram --help": ([*ENGRAM, "--help"], b""),
                "engram --version": ([*ENGRAM, "--version"], b""),
                "engram ls": ([*ENGRAM, *addr, "ls"], b""),
                "engram ls --json": ([*ENGRAM, *addr, "ls", "--json"], b""),
                "engram read bench.md": ([*ENGRAM, *addr, "read", "bench.md"], b""),
                "engram write bench.md": ([*ENGRAM, *addr, "write", "bench.md"], note),
            }
            print(f"{'command':<24} {'median s':>9} {'worst s':>8}  target {TARGET_SECONDS} s")
            for label, (command, stdin) in commands.items():
                run_cpu(command, stdin)  # warm-up: bytecode caches written
                times = [run_cpu(command, stdin) for _ in range(runs)]
                verdict = "ok" if statistics.median(times) <= TARGET_SECONDS else "OVER"
                print(
                    f"{label:<24} {statistics.median(times):9.3f} {max(times):8.3f}  {verdict}",
                    flush=True,
                )
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=30)
    print("slowest top-level imports of `engram --help` (cumulative s, under -X importtime):")
    for seconds, name in slowest_imports(12):
        print(f"  {seconds:6.3f}  {name}")


def load() -> str:
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10, help="Runs per command (1 to 100).")
    arguments = parser.parse_args()
    main(max(1, min(100, arguments.runs)))
