"""The `engram` CLI against a running all-in-one server: every storage command."""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engram.app.embedded import EmbeddedEngram
from engram.cli.app import app

pytestmark = pytest.mark.e2e


class Cli:
    def __init__(self, port: int) -> None:
        self.addr = f"127.0.0.1:{port}"
        self.runner = CliRunner()

    async def __call__(self, *args: str, stdin: str | None = None, ok: bool = True) -> str:
        result = await asyncio.to_thread(
            self.runner.invoke,
            app,
            [*args, "--addr", self.addr],
            input=stdin,
        )
        text = result.output + (result.stderr if result.stderr_bytes else "")
        assert "Traceback" not in text
        if ok:
            assert result.exit_code == 0, text
        else:
            assert result.exit_code != 0, text
        return text


@pytest.fixture
def cli(engram: EmbeddedEngram) -> Cli:
    return Cli(engram.port)


async def test_write_read_ls_rm(cli: Cli, tmp_path: Path) -> None:
    source = tmp_path / "memory.md"
    source.write_text("# Memory\n\nlikes tea\n")
    assert "created MEMORY.md v1" in await cli("write", "MEMORY.md", "--file", str(source))
    await cli("write", "daily/2026-01-01.md", stdin="[09:00:00] up\n")
    assert "v2" in await cli(
        "write", "daily/2026-01-01.md", "--append", stdin="[10:00:00] coffee\n"
    )
    assert await cli("read", "MEMORY.md") == "# Memory\n\nlikes tea\n"
    assert "[10:00:00] coffee" in await cli("read", "daily/2026-01-01.md")
    tree = await cli("ls")
    assert "MEMORY.md" in tree and "daily/" in tree and "2026-01-01.md" in tree
    assert "2 document(s)" in tree
    assert "deleted MEMORY.md" in await cli("rm", "MEMORY.md")
    assert "NOT_FOUND" in await cli("read", "MEMORY.md", ok=False)


async def test_other_spaces_by_flags(cli: Cli) -> None:
    await cli(
        "write",
        "notes.md",
        "--visibility",
        "bot",
        "--project",
        "p1",
        "--bot",
        "b1",
        "--name",
        "runs",
        stdin="bot memory",
    )
    assert (
        await cli("read", "notes.md", "-v", "bot", "--project", "p1", "--bot", "b1", "-n", "runs")
        == "bot memory\n"
    )
    refused = await cli("write", "x.md", "-v", "bot", "--project", "p1", stdin="x", ok=False)
    assert "space.bot is required" in refused


async def test_errors_print_the_server_message(cli: Cli) -> None:
    refused = await cli("write", "./MEMORY.md", stdin="x", ok=False)
    assert 'use "MEMORY.md"' in refused and "INVALID_ARGUMENT" in refused
    secret = await cli("write", "k.md", stdin="AKIAQ3EGUK5EXAMPLE7Z", ok=False)
    assert "AWS access key id" in secret and "AKIAQ3EGUK5EXAMPLE7Z" not in secret


async def test_unreachable_server_is_explained() -> None:
    cli = Cli(1)
    text = await cli("read", "MEMORY.md", ok=False)
    assert "UNAVAILABLE" in text and "is the server running" in text


async def test_du_history_export_import(cli: Cli, tmp_path: Path) -> None:
    await cli("write", "a.md", stdin="one")
    await cli("write", "a.md", stdin="two")
    usage = await cli("du")
    assert "space" in usage and "tenant" in usage and "64.0 MiB" in usage
    history = await cli("history", "a.md")
    assert "current" in history and "1" in history and "2" in history
    assert await cli("read", "a.md", "--version", "1") == "one\n"
    archive = tmp_path / "space.tar.gz"
    assert "exported" in await cli("export", "--out", str(archive))
    with tarfile.open(archive) as tar:
        assert tar.getnames() == ["a.md"]
    imported = await cli("import", "--in", str(archive), "--strategy", "rename", "-n", "copy")
    assert "1 created" in imported
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("a.md")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"new"))
    (tmp_path / "clash.tar.gz").write_bytes(buffer.getvalue())
    renamed = await cli("import", "--in", str(tmp_path / "clash.tar.gz"), "--strategy", "rename")
    assert "a.md -> a-2.md" in renamed


async def test_token_quota_and_audit_commands(tmp_path: Path) -> None:
    from engram.app.embedded import embedded_engram
    from engram.authz.dev_identity import dev_token
    from tests.support.settings import server_settings

    async with embedded_engram(server_settings(tmp_path / "auth"), require_auth=True) as engram:
        cli = Cli(engram.port)
        admin = dev_token(engram.core.jwt_secret)
        refused = await cli("ls", ok=False)
        assert "UNAUTHENTICATED" in refused
        assert "ACT_AS_DISABLED" in await cli(
            "token", "create", "--role", "viewer", "--user", "carl", "--token", admin, ok=False
        )
        created = await cli("token", "create", "--role", "viewer", "--token", admin)
        token = created.strip().splitlines()[-1]
        token_id = created.split("token id ")[1].split(",")[0].strip()
        assert token.startswith(f"egm_{token_id}_")
        await cli("write", "MEMORY.md", "--token", admin, stdin="hello")
        assert await cli("read", "MEMORY.md", "--token", token) == "hello\n"
        assert "MEMBER_ROLE_REQUIRED" in await cli(
            "write", "x.md", "--token", token, stdin="x", ok=False
        )
        assert "revoked" in await cli("token", "revoke", token_id, "--token", admin)
        assert "UNAUTHENTICATED" in await cli("read", "MEMORY.md", "--token", token, ok=False)
        kept = await cli(
            "token", "create", "-d", "nightly job", "--days", "7", "--json", "--token", admin
        )
        kept_id = json.loads(kept)["token_id"]
        listed = json.loads(await cli("--token", admin, "token", "list", "--json"))["tokens"]
        assert [(t["token_id"], t["role"], t["revoked"]) for t in listed] == [
            (token_id, "viewer", True),
            (kept_id, "member", False),
        ]
        assert listed[1]["description"] == "nightly job" and listed[1]["user"]
        assert listed[1]["expires_at"].endswith("Z") and listed[0]["revoked_at"].endswith("Z")
        table = await cli("token", "list", "--token", admin)
        assert token_id in table and kept_id in table and "nightly job" in table
        assert "revoked" in table and "active" in table
        assert "2 token(s)" in table
        assert all(len(line) <= 80 for line in table.splitlines())
        member = json.loads(kept)["token"]
        assert "PERMISSION_DENIED" in await cli("token", "list", "--token", member, ok=False)
        # Decimal and binary units both read (pydantic's ByteSize): 2GB = 2e9 bytes.
        assert "set to 1.9 GiB" in await cli("quota", "set", "local", "2GB", "--token", admin)
        assert "set to 2.0 GiB" in await cli("quota", "set", "local", "2GiB", "--token", admin)
        shown = await cli("quota", "show", "--token", admin)
        assert "2.0 GiB" in shown and "override" in shown
        assert "no drift" in await cli("quota", "reconcile", "--token", admin)
        await cli(
            "write", "rules.md", "-v", "global", "-n", "handbook", "--token", admin, stdin="be kind"
        )
        audit = await cli("audit", "--token", admin)
        assert "memory.global" in audit and "_write" in audit and "rules.md" in audit
        # Orgs: the team joins one, the ceiling (1 GiB) is below its own quota (2 GiB), so
        # it is the effective one; the global write above is attributed to the team.
        joined = await cli("quota", "org-join", "local", "acme-corp", "--token", admin)
        assert "local is in org acme-corp" in joined
        assert "ceiling of org acme-corp set to 1.0 GiB" in await cli(
            "quota", "org-set", "1GiB", "--token", admin
        )
        shown = json.loads(await cli("quota", "show", "--json", "--token", admin))
        assert (shown["org"], shown["org_quota_bytes"]) == ("acme-corp", 1 << 30)
        assert shown["quota_bytes"] == 2 << 30 and shown["effective_quota_bytes"] == 1 << 30
        assert shown["org_used_bytes"] == shown["used_bytes"] > 0
        assert shown["global_attributed_bytes"] == len("be kind")
        table = await cli("quota", "show", "--token", admin)
        assert "org acme-corp" in table and "effective" in table and "attributed" in table
        assert "cannot read" in await cli(
            "quota", "set", "local", "lots", "--token", admin, ok=False
        )
