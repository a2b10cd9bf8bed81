"""An internal hop over mTLS, as a cluster runs it: `engram serve workspace` (on FerretDB)
serving TLS to the agent and calling StorageService and SearchService over mTLS with its
own client certificate; without that certificate the hop is refused."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from engram.app.embedded import embedded_engram
from engram.app.production import workspace_on_mongo
from engram.client import ClientTls, EngramClient, Space
from engram.domain.errors import Unavailable
from tests.support.backends import RealBackends
from tests.support.certs import TestCa
from tests.support.settings import server_settings
from tests.support.tokens import TEST_JWT_SECRET, mint, service_token

pytestmark = [pytest.mark.e2e, pytest.mark.real_backend]

AGENT = Space(name="agent")


async def test_workspace_reaches_storage_and_search_over_mtls(
    tmp_path: Path, real_backends: RealBackends
) -> None:
    ca = TestCa(tmp_path)
    server = ca.issue("server", server=True)
    workspace_client = ca.issue("workspace", server=False)
    mtls = {
        "tls_cert_file": server.cert,
        "tls_key_file": server.key,
        "tls_client_ca_file": ca.path,
    }
    async with embedded_engram(
        server_settings(tmp_path / "engram", jwt_secret=TEST_JWT_SECRET, **mtls),
        require_auth=True,
    ) as backend:
        address = f"127.0.0.1:{backend.port}"
        common: dict[str, Any] = {
            "jwt_secret": TEST_JWT_SECRET,
            "mongo_uri": real_backends.url("mongo"),
            "mongo_db": f"engram_tls_{uuid.uuid4().hex[:12]}",
            "storage_addr": address,
            "search_addr": address,
            "service_token": service_token("workspace"),
            # The workspace's own port: TLS for agents, no client certificates asked.
            "tls_cert_file": server.cert,
            "tls_key_file": server.key,
            "tls_ca_file": ca.path,
        }
        with_cert = server_settings(
            tmp_path / "workspace",
            tls_client_cert_file=workspace_client.cert,
            tls_client_key_file=workspace_client.key,
            **common,
        )
        without_cert = server_settings(tmp_path / "workspace-nocert", **common)
        agent_tls = ClientTls(ca_file=ca.path)
        token = mint("ann", "acme", "member")
        async with workspace_on_mongo(with_cert) as workspace:
            async with EngramClient(
                f"127.0.0.1:{workspace.port}", token=token, space=AGENT, tls=agent_tls, retries=0
            ) as agent:
                written = await agent.memory_write("over mTLS", target="notes/tls.md", append=False)
                assert (await agent.memory_read(written.path)).content == "over mTLS"
        async with workspace_on_mongo(without_cert) as refused:
            async with EngramClient(
                f"127.0.0.1:{refused.port}",
                token=token,
                space=AGENT,
                tls=agent_tls,
                retries=0,
                timeout=15,
            ) as agent:
                with pytest.raises(Unavailable):
                    await agent.memory_read("MEMORY.md")
