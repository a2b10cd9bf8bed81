"""helm/engram: lint, offline Kubernetes schema validation, and what the rendered manifests
promise (probes, security, disruption and scaling, network policy, every setting)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from pydantic import SecretStr

from engram.runtime.settings import Settings
from tests.deploy.chart import (
    CHART,
    NAMESPACE,
    PRODUCTION_VALUES,
    Helm,
    Manifest,
    NetworkPolicies,
    Peer,
    of_kind,
    processes,
)

GRPC_SERVICES = ["storage", "quota", "authz", "indexer", "search", "workspace", "maintenance"]
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest the
# installed kubernetes-validate ships schemas for.
KUBERNETES_VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
# Custom resources: no schema ships with Kubernetes; checked by their own tests below.
CUSTOM_KINDS = {"ServiceMonitor"}
SECRET_VALUES = {
    "mongodb": {
        "services": {
            name: {"uri": f"mongodb://engram-{name}:pw@mongo:27017/?replicaSet=rs0"}
            for name in GRPC_SERVICES
        }
    },
    "qdrant": {"url": "http://qdrant:6333", "apiKey": "qdrant-key"},
    "auth": {"jwtSecret": "jwt-secret", "serviceToken": "service-token", "jwks": '{"keys": []}'},
    "embedder": {"provider": "openai", "openaiApiKey": "openai-key"},
    "mcp": {"enabled": True, "hosted": False, "token": "mcp-token"},
    "dreaming": {"llmApiKey": "llm-key"},
}
# Settings the chart sets itself from typed values (config may not set them).
CHART_OWNED = {
    "ENGRAM_GRPC_HOST",
    "ENGRAM_GRPC_PORT",
    "ENGRAM_METRICS_HOST",
    "ENGRAM_METRICS_PORT",
    "ENGRAM_JWKS_PATH",
}


def _is_secret(name: str) -> bool:
    annotation = Settings.model_fields[name].annotation
    return SecretStr in getattr(annotation, "__args__", (annotation,))


def _pod(deployment: Manifest) -> dict[str, Any]:
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def _container(deployment: Manifest) -> dict[str, Any]:
    (container,) = _pod(deployment)["containers"]
    return dict(container)


def _labels(docs: list[Manifest], component: str) -> dict[str, str]:
    labels: dict[str, str] = of_kind(docs, "Deployment")[component]["spec"]["template"]["metadata"][
        "labels"
    ]
    return labels


# --- lint and schemas ------------------------------------------------------------------------


@pytest.mark.parametrize("values", [[], [PRODUCTION_VALUES]], ids=["default", "production"])
def test_helm_lint_strict_passes(helm: Helm, values: list[Path]) -> None:
    args = ["lint", "--strict", str(CHART)]
    for path in values:
        args += ["--values", str(path)]
    result = helm.run(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("which", ["default", "production"])
def test_rendered_manifests_validate_against_kubernetes_schemas(
    which: str, version: str, request: pytest.FixtureRequest
) -> None:
    docs: list[Manifest] = request.getfixturevalue(f"{which}_docs")
    checked = 0
    for doc in docs:
        if doc["kind"] in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} on {version}: {error.message}")
        checked += 1
    assert checked >= 6 * 6, "Deployment, Service, ConfigMap, PDB, NetworkPolicy per service"


TOGGLES = {
    "everything-off": {
        "networkPolicy": {"enabled": False},
        "tests": {"enabled": False},
        "serviceAccount": {"create": False},
        "preStopSleepSeconds": 0,
        **{
            name: {"autoscaling": {"enabled": False}, "pdb": {"create": False}}
            for name in ("storage", "search", "indexer")
        },
        "authz": {"pdb": {"create": False}},
        "quota": {"enabled": False},
        "workspace": {"enabled": False},
        "maintenance": {"enabled": False},
    },
    "closed-network": {"networkPolicy": {"publicServices": [], "metricsFrom": [], "clients": []}},
    "secrets-in-values": {**SECRET_VALUES, "storage": {"remoteQuota": True}},
}


@pytest.mark.parametrize("toggles", list(TOGGLES), ids=list(TOGGLES))
def test_other_switches_render_valid_manifests(helm: Helm, tmp_path: Path, toggles: str) -> None:
    docs = helm.render(overrides=TOGGLES[toggles], tmp=tmp_path)
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSIONS[0], strict=True)
    deployments = of_kind(docs, "Deployment")
    if toggles == "everything-off":
        assert set(deployments) == {"storage", "authz", "indexer", "search"}
        assert {d["kind"] for d in docs} == {"Deployment", "Service", "ConfigMap", "Secret"}
        for deployment in deployments.values():
            assert deployment["spec"]["replicas"] == 2
            assert _pod(deployment)["serviceAccountName"] == "default"
    if toggles == "closed-network":
        rules = NetworkPolicies.of(docs)
        client = Peer(labels={"engram-client": "true"})
        storage = _pod_peer(docs, "storage")
        assert not rules.allows(client, storage, 50051)
        assert not rules.allows(Peer(labels={"app": "prometheus"}), storage, 9464)
        assert rules.allows(_pod_peer(docs, "workspace"), storage, 50051)
        authz = next(p for p in rules.policies if p["metadata"]["name"] == "engram-authz")
        # Only the helm test pod may still call authz: no rule admits anyone else.
        assert len(authz["spec"]["ingress"]) == 1
    if toggles == "secrets-in-values":
        (secret,) = [d for d in docs if d["kind"] == "Secret"]
        assert set(secret["data"]) == {
            "ENGRAM_JWT_SECRET", "jwks.json", "ENGRAM_SERVICE_TOKEN",
            "ENGRAM_QDRANT_API_KEY", "ENGRAM_OPENAI_API_KEY", "ENGRAM_TOKEN", "ENGRAM_LLM_API_KEY",
            *(f"ENGRAM_MONGO_URI_{name.upper()}" for name in GRPC_SERVICES),
        }  # fmt: skip
        for deployment in deployments.values():
            for var in _container(deployment)["env"]:
                assert set(var) == {"name", "valueFrom"}, "secrets only by reference"


def test_production_values_render_every_kind(production_docs: list[Manifest]) -> None:
    kinds = {doc["kind"] for doc in production_docs}
    assert kinds >= {
        "Deployment",
        "Service",
        "ConfigMap",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ServiceMonitor",
        "ServiceAccount",
        "Pod",
    }
    assert "Secret" not in kinds, "auth.existingSecret: the chart creates no Secret"
    assert set(of_kind(production_docs, "Deployment")) == {*GRPC_SERVICES, "mcp"}


# --- processes: command, probes, security ------------------------------------------------------


@pytest.mark.parametrize("which", ["default", "production"])
def test_each_service_runs_engram_serve_with_its_own_config(
    which: str, request: pytest.FixtureRequest
) -> None:
    docs: list[Manifest] = request.getfixturevalue(f"{which}_docs")
    found = processes(docs)
    for service in GRPC_SERVICES:
        assert found[service].argv == ["engram", "serve", service]
        assert found[service].env["ENGRAM_GRPC_HOST"] == "0.0.0.0"
        assert found[service].env["ENGRAM_METRICS_HOST"] == "0.0.0.0"
    if which == "production":
        argv = found["mcp"].argv
        assert argv[:8] == [
            "engram",
            "mcp",
            "--transport",
            "http",
            "--host",
            "0.0.0.0",
            "--port",
            "8765",
        ]
        # Hosted: each request's own token and space; the space below is /mcp's, its tenant
        # the caller's.
        assert argv[8:] == [
            "--session", "slack",
            "--hosted", "--issuer", "https://id.example.com",
            "--resource-url", f"http://engram-mcp.{NAMESPACE}.svc:8765/mcp",
            "--visibility", "bot", "--name", "memory", "--project", "support",
            "--bot", "triage",
        ]  # fmt: skip
        assert found["mcp"].env["ENGRAM_ADDR"] == f"engram-workspace.{NAMESPACE}.svc:50051"
        assert found["mcp"].env["ENGRAM_AUTHZ_ADDR"] == f"engram-authz.{NAMESPACE}.svc:50051"
        assert "ENGRAM_TOKEN" not in found["mcp"].env


def test_grpc_readiness_and_backend_independent_liveness(default_docs: list[Manifest]) -> None:
    for service in GRPC_SERVICES:
        container = _container(of_kind(default_docs, "Deployment")[service])
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        # Readiness follows grpc.health.v1 (NOT_SERVING while a needed backend is down).
        assert container["readinessProbe"]["grpc"] == {"port": ports["grpc"], "service": ""}
        # Liveness and startup must not restart pods during a backend outage: /healthz
        # answers 200 while the process runs.
        for probe in ("livenessProbe", "startupProbe"):
            assert container[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        # Endpoints drop the pod before SIGTERM makes it refuse calls.
        assert container["lifecycle"]["preStop"]["sleep"]["seconds"] == 5
        assert ports["metrics"] == 9464


def test_pods_are_locked_down(production_docs: list[Manifest]) -> None:
    dockerfile = (CHART.parents[1] / "deploy" / "docker" / "Dockerfile").read_text()
    (image_user,) = re.findall(r"^USER (\d+):(\d+)$", dockerfile, re.M)
    for name, deployment in of_kind(production_docs, "Deployment").items():
        pod = _pod(deployment)
        assert pod["automountServiceAccountToken"] is False, name
        context = pod["securityContext"]
        assert context["runAsNonRoot"] is True
        assert (str(context["runAsUser"]), str(context["runAsGroup"])) == image_user
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        container = _container(deployment)
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False
        assert security["readOnlyRootFilesystem"] is True
        assert security["capabilities"] == {"drop": ["ALL"]}
        # The only writable paths are the image's volume and /tmp, both emptyDirs.
        volumes = {v["name"]: v for v in pod["volumes"]}
        writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
        assert writable == {"/tmp", "/var/lib/engram"}
        for mount in container["volumeMounts"]:
            if not mount.get("readOnly"):
                assert "emptyDir" in volumes[mount["name"]]
        assert container["resources"]["requests"]["memory"]
        assert container["resources"]["limits"]["memory"]
        assert container["image"].startswith("registry.example.com/platform/engram@sha256:")
        spread = pod["topologySpreadConstraints"]
        assert {c["topologyKey"] for c in spread} == {
            "topology.kubernetes.io/zone",
            "kubernetes.io/hostname",
        }
        for constraint in spread:
            assert constraint["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == name


def test_jwks_is_mounted_read_only_where_tokens_are_checked(
    production_docs: list[Manifest],
) -> None:
    for name, deployment in of_kind(production_docs, "Deployment").items():
        mounts = {m["mountPath"]: m for m in _container(deployment)["volumeMounts"]}
        env = processes(production_docs)[name].env
        if name == "mcp":
            assert "/etc/engram/jwks" not in mounts and "ENGRAM_JWKS_PATH" not in env
            continue
        assert mounts["/etc/engram/jwks"]["readOnly"] is True
        assert env["ENGRAM_JWKS_PATH"] == "/etc/engram/jwks/jwks.json"
        jwks = next(v for v in _pod(deployment)["volumes"] if v["name"] == "jwks")
        assert jwks["secret"]["secretName"] == "engram-credentials"


def test_workspace_templates_are_mounted_from_a_config_map(production_docs: list[Manifest]) -> None:
    workspace = of_kind(production_docs, "Deployment")["workspace"]
    mounts = {m["mountPath"]: m for m in _container(workspace)["volumeMounts"]}
    assert mounts["/etc/engram/templates"]["readOnly"] is True
    volume = next(v for v in _pod(workspace)["volumes"] if v["name"] == "templates")
    templates = of_kind(production_docs, "ConfigMap")["templates"]
    assert volume["configMap"]["name"] == templates["metadata"]["name"]
    assert templates["data"]["SOUL.md"].startswith("# SOUL.md")
    env = processes(production_docs)["workspace"].env
    assert env["ENGRAM_WORKSPACE_TEMPLATES"] == "/etc/engram/templates"
    for name in ("storage", "search", "mcp"):
        assert "/etc/engram/templates" not in str(of_kind(production_docs, "Deployment")[name])


# --- disruption and scaling -------------------------------------------------------------------


@pytest.mark.parametrize("which", ["default", "production"])
def test_hpa_for_storage_search_indexer_and_a_pdb_for_every_service(
    which: str, request: pytest.FixtureRequest
) -> None:
    docs: list[Manifest] = request.getfixturevalue(f"{which}_docs")
    deployments = of_kind(docs, "Deployment")
    hpas = of_kind(docs, "HorizontalPodAutoscaler")
    # The hosted MCP server (production values) scales too: no token or state is per pod
    # but its sessions, which the Service keeps on one replica (ClientIP affinity).
    hosted_mcp = {"mcp"} if which == "production" else set()
    assert set(hpas) == {"storage", "search", "indexer", *hosted_mcp}
    if hosted_mcp:
        assert of_kind(docs, "Service")["mcp"]["spec"]["sessionAffinity"] == "ClientIP"
    for name, hpa in hpas.items():
        target = hpa["spec"]["scaleTargetRef"]
        assert (target["kind"], target["name"]) == (
            "Deployment",
            deployments[name]["metadata"]["name"],
        )
        assert hpa["spec"]["minReplicas"] >= 2
        assert "replicas" not in deployments[name]["spec"], "the HPA owns the replica count"
        assert any(m["resource"]["name"] == "cpu" for m in hpa["spec"]["metrics"])
    for name in set(deployments) - set(hpas):
        assert deployments[name]["spec"]["replicas"] >= 1
    pdbs = of_kind(docs, "PodDisruptionBudget")
    assert set(pdbs) == set(deployments)
    for name, pdb in pdbs.items():
        assert (
            pdb["spec"]["selector"]["matchLabels"]
            == deployments[name]["spec"]["selector"]["matchLabels"]
        )
        assert ("minAvailable" in pdb["spec"]) != ("maxUnavailable" in pdb["spec"])
    if which == "production":
        assert pdbs["quota"]["spec"]["minAvailable"] == 2
        assert of_kind(docs, "HorizontalPodAutoscaler")["storage"]["spec"]["maxReplicas"] == 12


def test_config_change_rolls_the_pods(helm: Helm, tmp_path: Path) -> None:
    def checksum(overrides: dict[str, Any]) -> str:
        docs = helm.render(overrides=overrides, tmp=tmp_path)
        annotations = of_kind(docs, "Deployment")["search"]["spec"]["template"]["metadata"][
            "annotations"
        ]
        return str(annotations["checksum/config"])

    base = checksum({})
    assert checksum({"config": {"ENGRAM_SEARCH_CANDIDATE_DEPTH": 80}}) != base
    assert checksum({}) == base


def test_search_workers_share_each_pod(helm: Helm, tmp_path: Path) -> None:
    found = processes(helm.render(overrides={"search": {"workers": 3}}, tmp=tmp_path))
    assert found["search"].argv == ["engram", "serve", "search", "--workers", "3"]
    assert found["storage"].argv == ["engram", "serve", "storage"]


# --- network policy ---------------------------------------------------------------------------


def test_tls_mounts_the_secret_and_probes_readiness_over_http(helm: Helm, tmp_path: Path) -> None:
    """Kubernetes' gRPC probe speaks plaintext only: with TLS on, readiness is /readyz."""
    tls = {"tls": {"enabled": True, "existingSecret": "engram-tls", "mtls": True}}
    docs = helm.render(
        overrides={**tls, "mcp": {"enabled": True, "issuer": "https://id.example.com"}},
        tmp=tmp_path,
    )
    found = processes(docs)
    for name, deployment in of_kind(docs, "Deployment").items():
        container = _container(deployment)
        assert {"name": "tls", "mountPath": "/etc/engram/tls", "readOnly": True} in container[
            "volumeMounts"
        ], name
        volume = next(v for v in _pod(deployment)["volumes"] if v["name"] == "tls")
        assert volume["secret"]["secretName"] == "engram-tls"
        if name in GRPC_SERVICES:
            assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
            assert found[name].env["ENGRAM_TLS_CERT_FILE"] == "/etc/engram/tls/tls.crt"
            assert found[name].env["ENGRAM_TLS_CLIENT_CA_FILE"] == "/etc/engram/tls/ca.crt"
    # Callers trust the CA and present the pod's certificate: every service looks personal
    # tokens up at authz, which alone makes no calls.
    for name in ("storage", "quota", "indexer", "search", "workspace", "maintenance", "mcp"):
        if name in found:
            assert found[name].env["ENGRAM_TLS_CA_FILE"] == "/etc/engram/tls/ca.crt", name
            assert found[name].env["ENGRAM_TLS_CLIENT_CERT_FILE"] == "/etc/engram/tls/tls.crt"
    assert "ENGRAM_TLS_INTERNAL" not in found["authz"].env
    (test_pod,) = [d for d in docs if d["kind"] == "Pod"]
    command = test_pod["spec"]["containers"][0]["command"]
    assert command[command.index("--ca") + 1] == "/etc/engram/tls/ca.crt" and "--cert" in command
    values = tmp_path / "tls.yaml"
    values.write_text(yaml.safe_dump(tls))
    notes = _notes(helm, tmp_path / "notes", [values])
    assert f"engram --ca ca.crt --tls-server-name engram-storage.{NAMESPACE}.svc" in notes


def _pod_peer(docs: list[Manifest], component: str) -> Peer:
    return Peer(labels=_labels(docs, component))


def test_only_callers_reach_internal_services(default_docs: list[Manifest]) -> None:
    rules = NetworkPolicies.of(default_docs)
    pod = {name: _pod_peer(default_docs, name) for name in GRPC_SERVICES}
    allowed = {
        ("workspace", "storage"),
        ("workspace", "search"),
        ("indexer", "storage"),
        # Search waits for positions through the indexer, which owns the progress rows.
        ("search", "indexer"),
        # Storage charges quota at the quota service, which owns the counters.
        ("storage", "quota"),
        # Quota and maintenance reach documents through storage only (issue 34); the
        # maintenance worker reconciles counters through quota.
        ("quota", "storage"),
        ("maintenance", "storage"),
        ("maintenance", "quota"),
        # Every service looks personal access tokens up at authz, which alone reads them.
        *((caller, "authz") for caller in GRPC_SERVICES if caller != "authz"),
    }
    for source in GRPC_SERVICES:
        for destination in GRPC_SERVICES:
            if source == destination:
                continue
            expected = (source, destination) in allowed
            assert rules.allows(pod[source], pod[destination], 50051) is expected, (
                source,
                destination,
            )


def test_in_process_quota_closes_storage_to_quota(helm: Helm, tmp_path: Path) -> None:
    """`storage.remoteQuota: false` (one hop less; storage then reads the quota collections
    itself) takes the quota service out of storage's wiring and network policy."""
    docs = helm.render(overrides={"storage": {"remoteQuota": False}}, tmp=tmp_path)
    rules = NetworkPolicies.of(docs)
    assert not rules.allows(_pod_peer(docs, "storage"), _pod_peer(docs, "quota"), 50051)
    storage = processes(docs)["storage"]
    assert "ENGRAM_QUOTA_ADDR" not in storage.env
    # Still the service principal: storage records its audit rows at authz.
    assert "ENGRAM_SERVICE_TOKEN" in storage.secret_refs
    alone = helm.render(
        overrides={"storage": {"remoteQuota": False}, "authz": {"enabled": False}}, tmp=tmp_path
    )
    assert "ENGRAM_SERVICE_TOKEN" not in processes(alone)["storage"].secret_refs


def test_services_look_tokens_up_at_authz(helm: Helm, tmp_path: Path) -> None:
    """Only authz is given what it takes to read personal access tokens' hashes; the others
    ask it, and a service that calls nothing but authz needs no service token to do so."""
    docs = helm.render(overrides={"auth": {"serviceToken": "t"}}, tmp=tmp_path)
    found = processes(docs)
    for name in ("storage", "quota", "indexer", "search", "workspace", "maintenance"):
        assert found[name].env["ENGRAM_AUTHZ_ADDR"] == f"engram-authz.{NAMESPACE}.svc:50051"
    assert "ENGRAM_AUTHZ_ADDR" not in found["authz"].env
    assert found["storage"].env["ENGRAM_SERVICE_TOKEN"] == "t"


def test_search_reads_no_database_with_authz_deployed(helm: Helm, tmp_path: Path) -> None:
    """Issue 34: search asks authz for tokens and the indexer for index progress (as the
    service principal), so it is given no MongoDB credentials and may not reach MongoDB;
    without authz it reads tokens on MongoDB again."""
    docs = helm.render(overrides=SECRET_VALUES, tmp=tmp_path)
    search = processes(docs)["search"]
    assert search.env["ENGRAM_INDEXER_ADDR"] == f"engram-indexer.{NAMESPACE}.svc:50051"
    assert search.env["ENGRAM_SERVICE_TOKEN"] == "service-token"
    assert search.env["ENGRAM_AUTHZ_ADDR"] == f"engram-authz.{NAMESPACE}.svc:50051"
    assert "ENGRAM_MONGO_URI" not in search.env and "ENGRAM_MONGO_DB" not in search.env
    assert "ENGRAM_JWT_SECRET" in search.env, "search still checks JWTs itself"
    rules = NetworkPolicies.of(docs)
    pod = _pod_peer(docs, "search")
    assert rules.allows(pod, _pod_peer(docs, "indexer"), 50051)
    assert not rules.allows(pod, Peer(ip="10.1.2.3"), 27017)

    alone = helm.render(overrides={"authz": {"enabled": False}}, tmp=tmp_path)
    search = processes(alone)["search"]
    assert "ENGRAM_AUTHZ_ADDR" not in search.env
    assert "ENGRAM_MONGO_DB" in search.env and "ENGRAM_INDEXER_ADDR" in search.env
    assert NetworkPolicies.of(alone).allows(_pod_peer(alone, "search"), Peer(ip="10.1.2.3"), 27017)


def test_quota_and_maintenance_reach_documents_through_storage(helm: Helm, tmp_path: Path) -> None:
    """Quota (Reconcile's stored usage) and maintenance (its jobs) call StorageService as the
    service principal; maintenance reconciles at quota, even with storage.remoteQuota off."""
    docs = helm.render(
        overrides={"auth": {"serviceToken": "t"}, "storage": {"remoteQuota": False}}, tmp=tmp_path
    )
    found = processes(docs)
    storage = f"engram-storage.{NAMESPACE}.svc:50051"
    for name in ("quota", "maintenance"):
        assert found[name].env["ENGRAM_STORAGE_ADDR"] == storage, name
        assert found[name].env["ENGRAM_SERVICE_TOKEN"] == "t", name
    assert found["maintenance"].env["ENGRAM_QUOTA_ADDR"] == f"engram-quota.{NAMESPACE}.svc:50051"
    rules = NetworkPolicies.of(docs)
    for name in ("quota", "maintenance"):
        assert rules.allows(_pod_peer(docs, name), _pod_peer(docs, "storage"), 50051), name
    assert rules.allows(_pod_peer(docs, "maintenance"), _pod_peer(docs, "quota"), 50051)


def test_clients_reach_public_services_only(
    default_docs: list[Manifest], production_docs: list[Manifest]
) -> None:
    rules = NetworkPolicies.of(default_docs)
    client = Peer(labels={"engram-client": "true"})
    stranger = Peer(labels={"app": "something-else"})
    for service in ["storage", "search", "workspace", "authz", "quota", "maintenance"]:
        assert rules.allows(client, _pod_peer(default_docs, service), 50051), service
        assert not rules.allows(stranger, _pod_peer(default_docs, service), 50051), service
    assert not rules.allows(client, _pod_peer(default_docs, "indexer"), 50051)
    production = NetworkPolicies.of(production_docs)
    agent = Peer(labels={"app": "agent"}, namespace="agents")
    assert production.allows(agent, _pod_peer(production_docs, "mcp"), 8765)
    assert production.allows(agent, _pod_peer(production_docs, "storage"), 50051)
    assert not production.allows(
        Peer(labels={"engram-client": "true"}), _pod_peer(production_docs, "storage"), 50051
    )
    # The hosted MCP server calls the workspace service and authz (the callers' tokens),
    # nothing else.
    mcp = _pod_peer(production_docs, "mcp")
    assert production.allows(mcp, _pod_peer(production_docs, "workspace"), 50051)
    assert production.allows(mcp, _pod_peer(production_docs, "authz"), 50051)
    assert not production.allows(mcp, _pod_peer(production_docs, "storage"), 50051)


def test_helm_test_pod_reaches_every_service(default_docs: list[Manifest]) -> None:
    rules = NetworkPolicies.of(default_docs)
    (test_pod,) = [d for d in default_docs if d["kind"] == "Pod"]
    tester = Peer(labels=test_pod["metadata"]["labels"])
    for service in GRPC_SERVICES:
        assert rules.allows(tester, _pod_peer(default_docs, service), 50051), service


def test_egress_only_to_each_services_backends(
    default_docs: list[Manifest], production_docs: list[Manifest]
) -> None:
    rules = NetworkPolicies.of(default_docs)
    anywhere = Peer(ip="10.1.2.3")
    needs = {
        "storage": {27017, 4222},
        "quota": {27017},
        "authz": {27017},
        "workspace": {27017},
        "indexer": {27017, 4222, 9200, 6333, 6334},
        # Tokens at authz, index progress at the indexer: no MongoDB.
        "search": {9200, 6333, 6334},
        "maintenance": {27017, 4222, 9200, 6333, 6334},
    }
    for service, ports in needs.items():
        pod = _pod_peer(default_docs, service)
        for port in (27017, 4222, 9200, 6333, 6334, 443, 11434, 5432):
            assert rules.allows(pod, anywhere, port) is (port in ports), (service, port)
        dns = Peer(labels={"k8s-app": "kube-dns"}, namespace="kube-system")
        assert rules.allows(pod, dns, 53, "UDP") and rules.allows(pod, dns, 53, "TCP")
        assert not rules.allows(
            pod, Peer(labels={"k8s-app": "kube-dns"}, namespace="default"), 53, "UDP"
        )
    production = NetworkPolicies.of(production_docs)
    search = _pod_peer(production_docs, "search")
    assert production.allows(search, Peer(ip="10.20.4.5"), 9200)
    assert not production.allows(search, Peer(ip="10.99.4.5"), 9200), (
        "OpenSearch narrowed to its CIDR"
    )
    mongo = Peer(labels={"app": "mongo"}, namespace="mongodb")
    assert not production.allows(search, mongo, 27017)
    storage = _pod_peer(production_docs, "storage")
    assert production.allows(storage, mongo, 27017)
    assert not production.allows(storage, Peer(labels={"app": "mongo"}, namespace="other"), 27017)


def test_metrics_scraped_through_service_monitors(production_docs: list[Manifest]) -> None:
    monitors = of_kind(production_docs, "ServiceMonitor")
    services = of_kind(production_docs, "Service")
    assert set(monitors) == set(GRPC_SERVICES)
    for name, monitor in monitors.items():
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        assert (
            monitor["spec"]["selector"]["matchLabels"].items()
            <= services[name]["metadata"]["labels"].items()
        )
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
        assert any(p["name"] == "metrics" for p in services[name]["spec"]["ports"])
    rules = NetworkPolicies.of(production_docs)
    prometheus = Peer(labels={"app": "prometheus"}, namespace="monitoring")
    assert rules.allows(prometheus, _pod_peer(production_docs, "search"), 9464)
    assert not rules.allows(
        Peer(labels={"engram-client": "true"}), _pod_peer(production_docs, "search"), 9464
    )


# --- settings ---------------------------------------------------------------------------------


def test_every_engram_setting_is_settable_from_values(helm: Helm, tmp_path: Path) -> None:
    """Each `Settings` field: a secret through the Secret, a chart-owned one through typed
    values, any other through `config`; and each process's environment is valid Settings."""
    config = {
        f"ENGRAM_{name.upper()}": f"value-of-{name}"
        for name in Settings.model_fields
        if not _is_secret(name) and f"ENGRAM_{name.upper()}" not in CHART_OWNED
    }
    docs = helm.render(overrides={**SECRET_VALUES, "config": config}, tmp=tmp_path)
    found = processes(docs)
    for name in Settings.model_fields:
        variable = f"ENGRAM_{name.upper()}"
        if variable in config:
            for service in GRPC_SERVICES:
                assert found[service].env[variable] == config[variable], (service, variable)
        else:
            assert any(variable in p.env for p in found.values()), f"{variable} is not settable"
    # Each service its own MongoDB credentials and database (mongodb.perService).
    for name in ("storage", "quota", "authz", "indexer", "workspace", "maintenance"):
        assert found[name].env["ENGRAM_MONGO_URI"] == (
            f"mongodb://engram-{name}:pw@mongo:27017/?replicaSet=rs0"
        ), name
    assert found["indexer"].env["ENGRAM_SERVICE_TOKEN"] == "service-token"
    assert found["search"].env["ENGRAM_OPENAI_API_KEY"] == "openai-key"
    assert found["mcp"].env["ENGRAM_TOKEN"] == "mcp-token"
    # Least privilege: no MongoDB URI or JWT secret where they are not needed.
    assert (
        "ENGRAM_MONGO_URI" not in found["mcp"].env and "ENGRAM_JWT_SECRET" not in found["mcp"].env
    )
    assert "ENGRAM_SERVICE_TOKEN" not in found["authz"].env  # it calls no other service
    assert "ENGRAM_MONGO_URI" not in found["search"].env
    assert "ENGRAM_QDRANT_API_KEY" not in found["storage"].env


def test_one_shared_mongodb_uri_is_an_option_for_simple_installs(
    helm: Helm, tmp_path: Path
) -> None:
    shared = "mongodb://engram:pw@mongo:27017/"
    docs = helm.render(
        overrides={"mongodb": {"perService": False, "uri": shared, "database": "simple"}},
        tmp=tmp_path,
    )
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    assert "ENGRAM_MONGO_URI" in secret["data"]
    assert not [k for k in secret["data"] if k.startswith("ENGRAM_MONGO_URI_")]
    found = processes(docs)
    for name in ("storage", "quota", "authz", "indexer", "workspace", "maintenance"):
        assert found[name].env["ENGRAM_MONGO_URI"] == shared, name
        assert found[name].env["ENGRAM_MONGO_DB"] == "simple", name


@pytest.mark.parametrize("which", ["default", "production"])
def test_each_process_environment_is_valid_settings(
    which: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs: list[Manifest] = request.getfixturevalue(f"{which}_docs")
    for name, process in processes(docs).items():
        if name == "mcp":
            continue
        for variable in [v for v in list(__import__("os").environ) if v.startswith("ENGRAM_")]:
            monkeypatch.delenv(variable)
        for variable, value in process.env.items():
            monkeypatch.setenv(variable, value)
        settings = Settings()
        assert settings.grpc_host == "0.0.0.0" and settings.grpc_port == 50051, name
        if which == "production":
            # Search reads no database (tokens at authz, progress at the indexer).
            # Each service in a database of its own (search reads none).
            wanted = "engram" if name == "search" else f"engram_prod_{name}"
            assert settings.mongo_db == wanted, name
            assert settings.jwt_audience == "engram"
            if name == "indexer":
                assert settings.storage_addr == f"engram-storage.{NAMESPACE}.svc:50051"
                assert settings.indexer_concurrency == 16
                assert settings.qdrant_url == "http://qdrant.qdrant.svc:6333"
            if name in ("quota", "maintenance"):
                assert settings.storage_addr == f"engram-storage.{NAMESPACE}.svc:50051"
            if name == "maintenance":
                assert settings.quota_addr == f"engram-quota.{NAMESPACE}.svc:50051"
            if name == "workspace":
                assert settings.search_addr == f"engram-search.{NAMESPACE}.svc:50051"
                assert settings.log_level == "DEBUG", "<service>.config wins over config"
            assert settings.quota_tenant_total == 10 * 2**30


# --- invalid values ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"image": {"pullPolicy": "Sometimes"}}, r"pullPolicy.*(Always|value must be one of)"),
        ({"storage": {"replicas": 3}}, r"storage.*additional properties 'replicas' not allowed"),
        ({"nats": {"url": "http://nats:4222"}}, r"nats.*url"),
        ({"embedder": {"provider": "cohere"}}, r"provider.*(local|value must be one of)"),
        (
            {"config": {"LOG_LEVEL": "DEBUG"}},
            r"/config.*additional properties 'LOG_LEVEL' not allowed",
        ),
        (
            {"search": {"containerPorts": {"grpc": 70000, "metrics": 9464}}},
            r"grpc.*(maximum|65535)",
        ),
        ({"mcp": {"space": {"visibility": "public", "name": "x"}}}, r"visibility"),
        ({"mcp": {"enabled": True}}, r"mcp\.issuer: the URL of the server issuing"),
        ({"mcp": {"issuer": "id.example.com"}}, r"issuer"),
        (
            {"config": {"ENGRAM_JWT_SECRET": "x"}},
            r"config\.ENGRAM_JWT_SECRET cannot be set there: set auth\.jwtSecret",
        ),
        (
            {"indexer": {"config": {"ENGRAM_GRPC_PORT": 1}}},
            r"indexer\.config\.ENGRAM_GRPC_PORT cannot be set there",
        ),
        (
            {"search": {"autoscaling": {"targetCPU": None}}},
            r"search\.autoscaling: set targetCPU or targetMemory",
        ),
        (
            {"storage": {"autoscaling": {"minReplicas": 5, "maxReplicas": 3}}},
            r"minReplicas \(5\) is above maxReplicas \(3\)",
        ),
        ({"tls": {"enabled": True}}, r"tls.*existingSecret"),
        ({"search": {"workers": 0}}, r"search.*workers.*[Mm]inimum"),
    ],
    ids=[
        "pull-policy",
        "typo",
        "nats-scheme",
        "provider",
        "config-name",
        "port",
        "visibility",
        "hosted-mcp-without-issuer",
        "issuer-not-a-url",
        "secret-in-config",
        "owned-port",
        "hpa-no-target",
        "hpa-min-above-max",
        "tls-without-secret",
        "no-search-worker",
    ],
)
def test_invalid_values_are_rejected_with_a_clear_message(
    helm: Helm, tmp_path: Path, overrides: dict[str, Any], message: str
) -> None:
    result = helm.template(overrides=overrides, tmp=tmp_path)
    assert result.returncode != 0
    assert re.search(message, result.stderr, re.S), result.stderr


# --- documentation ----------------------------------------------------------------------------


def _leaves(values: Any, prefix: str = "") -> list[str]:
    if isinstance(values, dict) and values:
        return [leaf for key, value in values.items() for leaf in _leaves(value, f"{prefix}{key}.")]
    return [prefix.rstrip(".")]


def test_every_value_is_documented_with_a_param(helm: Helm) -> None:
    """bitnami's convention: each value (or an object it belongs to) has `## @param`."""
    text = (CHART / "values.yaml").read_text()
    documented = set(re.findall(r"^\s*## @param (\S+)", text, re.M))
    values = yaml.safe_load(text)
    for leaf in _leaves(values):
        parts = leaf.split(".")
        prefixes = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        assert prefixes & documented, f"{leaf} has no ## @param"
    for name in documented:
        node: Any = values
        for part in name.split("."):
            assert isinstance(node, dict) and part in node, f"@param {name} names no value"
            node = node[part]


def _notes(helm: Helm, tmp_path: Path, values: list[Path]) -> str:
    """NOTES.txt as `helm install` prints it (rendered through a wrapper in a copy of the
    chart: `helm template` does not render NOTES.txt, and install needs a cluster)."""
    chart = tmp_path / "engram"
    shutil.copytree(CHART, chart)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "files" / "notes.txt")
    (chart / "templates" / "notes-check.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n"
        '  notes: {{ tpl (.Files.Get "files/notes.txt") . | toJson }}\n'
    )
    args = ["template", "engram", str(chart), "-n", NAMESPACE]
    for path in values:
        args += ["--values", str(path)]
    result = helm.run(*args, "--show-only", "templates/notes-check.yaml")
    assert result.returncode == 0, result.stderr
    return str(yaml.safe_load(result.stdout)["data"]["notes"])


def test_notes_say_how_to_reach_it_and_what_is_missing(helm: Helm, tmp_path: Path) -> None:
    notes = _notes(helm, tmp_path / "default", [])
    for service in GRPC_SERVICES:
        assert f"engram-{service}.{NAMESPACE}.svc:50051" in notes
    assert f"helm test engram --namespace {NAMESPACE}" in notes
    assert "WARNING: no MongoDB URI for storage, quota, authz, indexer, workspace" in notes
    production = _notes(helm, tmp_path / "production", [PRODUCTION_VALUES])
    assert "WARNING" not in production
    assert f"engram-mcp.{NAMESPACE}.svc:8765  (MCP streamable HTTP, path /mcp)" in production
