"""The chart and the settings reference agree on who needs what: each backend, peer,
service-token and TLS-client setting the chart gives a Deployment is one that process reads
(by deploy/settings_reference.py's reading of the wiring), and the reverse."""

from __future__ import annotations

from pathlib import Path

from tests.deploy.chart import Helm, processes
from tests.support.scripts import load_script

reference = load_script("deploy/settings_reference.py")
WIRING = [
    "mongo_uri",
    "nats_url",
    "opensearch_url",
    "opensearch_index",
    "qdrant_url",
    "qdrant_api_key",
    "embedder_provider",
    "openai_api_key",
    "storage_addr",
    "search_addr",
    "quota_addr",
    "authz_addr",
    "indexer_addr",
    "service_token",
    "tls_internal",
    "tls_ca_file",
    "tls_client_cert_file",
    "tls_client_key_file",
]
# Settings a process reads only where the chart does not deploy what replaces them: search
# reads tokens (and, without ENGRAM_INDEXER_ADDR, index progress) on MongoDB only when
# there is no authz to ask.
WITHOUT_AUTHZ = {("mongo_uri", "search")}


def test_the_chart_gives_each_process_the_wiring_it_reads(helm: Helm, tmp_path: Path) -> None:
    values = {
        "mongodb": {
            "services": {
                name: {"uri": f"mongodb://engram-{name}:pw@mongo:27017/"}
                for name in (
                    "storage",
                    "quota",
                    "authz",
                    "indexer",
                    "search",
                    "workspace",
                    "maintenance",
                )
            }
        },
        "nats": {"url": "nats://nats:4222"},
        "opensearch": {"url": "http://opensearch:9200"},
        "qdrant": {"url": "http://qdrant:6333", "apiKey": "qdrant-key"},
        "auth": {"jwtSecret": "jwt-secret", "serviceToken": "service-token"},
        "embedder": {"provider": "openai", "openaiApiKey": "openai-key"},
        "storage": {"remoteQuota": True},
        "tls": {"enabled": True, "existingSecret": "engram-tls", "mtls": True},
    }
    found = processes(helm.render(overrides=values, tmp=tmp_path))
    read = reference.readers()
    for setting in WIRING:
        variable = f"ENGRAM_{setting.upper()}"
        given = sorted(name for name, process in found.items() if variable in process.env)
        readers = sorted(
            name for name in read[setting] if name != "dev" and (setting, name) not in WITHOUT_AUTHZ
        )
        assert given == readers, f"{variable}: the chart gives {given}, read by {readers}"
    alone = processes(helm.render(overrides={**values, "authz": {"enabled": False}}, tmp=tmp_path))
    for setting, name in WITHOUT_AUTHZ:
        assert name in read[setting]
        assert f"ENGRAM_{setting.upper()}" in alone[name].env, (setting, name)
