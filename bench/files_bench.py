"""`engram pull` and `engram push` of a space of N documents against `engram dev` in a
subprocess: wall time, the CLI's CPU time and the server's, for a first pull, a pull with
nothing to do, a push with nothing to do and a push of K edited files.

    flock /tmp/engram-bench.lock .venv/bin/python bench/files_bench.py [--docs 2000] [--edits 100]
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from benchlib import free_port, spawn
from cli_startup import wait_serving

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engram.client import Client, Space  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
SPACE = Space(name="bench")
# Every step's CLI run is capped (the bench never hangs on a stuck server).
STEP_TIMEOUT = 600


def archive(docs: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for i in range(docs):
            data = (f"# note {i}\n\n" + "lorem ipsum dolor sit amet " * 40 + "\n").encode()
            info = tarfile.TarInfo(f"notes/d{i % 20}/note-{i}.md")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def server_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def wait_until_indexed(client: Client, *, cap: float = 600.0) -> float:
    """Waits (at most `cap` s) until the index backlog is empty, so the indexer's work on the
    imported documents is not counted as pull's or push's."""
    started = time.perf_counter()
    while time.perf_counter() - started < cap:
        if client.with_options(timeout=30).index_status().backlog == 0:
            break
        time.sleep(1.0)
    return time.perf_counter() - started


def step(name: str, command: list[str], pid: int) -> None:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_before = server_cpu(pid)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=STEP_TIMEOUT)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cli_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    print(
        f"| {name} | {wall:.2f} | {cli_cpu:.2f} | {server_cpu(pid) - server_before:.2f} | "
        f"{done.returncode} | {summary.split(': ', 1)[-1]} |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--edits", type=int, default=100)
    args = parser.parse_args()
    print(f"load average before: {Path('/proc/loadavg').read_text().strip()}")
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        env = {**os.environ, "ENGRAM_ACCESS_LOG": "false", "ENGRAM_METRICS_PORT": "0"}
        process = spawn(
            [sys.executable, "-m", "engram", "dev", "--port", str(port)]
            + ["--data-dir", f"{tmp}/state"],
            env,
            Path(tmp) / "server.log",
        )
        try:
            addr = f"127.0.0.1:{port}"
            wait_serving(port, time.monotonic() + 120)
            with Client(addr, space=SPACE, stream_timeout=STEP_TIMEOUT) as client:
                result = client.import_space(archive(args.docs), strategy="overwrite")
                print(f"space private:bench: {result.written} documents, {result.bytes} bytes")
                waited = wait_until_indexed(client)
            print(f"index backlog empty after {waited:.0f} s")
            print(f"load average at the first step: {Path('/proc/loadavg').read_text().strip()}")
            work = Path(tmp) / "work"
            cli = [sys.executable, "-m", "engram"]
            common = ["--addr", addr]
            print("| step | wall s | CLI CPU s | server CPU s | exit | result |")
            print("|---|---|---|---|---|---|")
            step("pull (first)", [*cli, "pull", str(work), "-n", "bench", *common], process.pid)
            step("pull (nothing new)", [*cli, "pull", str(work), *common], process.pid)
            step("push (nothing changed)", [*cli, "push", str(work), *common], process.pid)
            edited = sorted(work.rglob("*.md"))[: args.edits]
            for file in edited:
                with file.open("a", encoding="utf-8") as handle:
                    handle.write("one more line\n")
            step(f"push ({len(edited)} edited)", [*cli, "push", str(work), *common], process.pid)
        finally:
            process.terminate()
            process.wait(timeout=30)


if __name__ == "__main__":
    main()
