"""helm/engram rendered with `helm template`, and what the tests read from the manifests.

`processes()` turns the rendered Deployments back into what each pod runs (argv and the
environment from its ConfigMap and Secret), the way a test can start the same processes
on loopback; `NetworkPolicies.allows()` evaluates the rendered policies for one connection.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "engram"
PRODUCTION_VALUES = CHART / "ci" / "production-values.yaml"
RELEASE = "engram"
NAMESPACE = "memory"

Manifest = dict[str, Any]


def helm_binary() -> Path | None:
    """$ENGRAM_HELM, else the version `make helm-install` builds (Makefile's HELM_VERSION)."""
    if os.environ.get("ENGRAM_HELM"):
        return Path(os.environ["ENGRAM_HELM"])
    match = re.search(r"^HELM_VERSION := (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert match, "HELM_VERSION is not in the Makefile"
    cache = Path(os.environ.get("CACHE", Path.home() / ".cache" / "engram"))
    built = cache / "bin" / f"helm-v{match.group(1)}" / "helm"
    if built.is_file():
        return built
    found = shutil.which("helm")
    return Path(found) if found else None


@dataclass
class Helm:
    binary: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.binary), *args], capture_output=True, text=True, timeout=120, check=False
        )

    def template(
        self,
        values: Sequence[Path] = (),
        overrides: Mapping[str, Any] | None = None,
        *,
        tmp: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
        for path in values:
            args += ["--values", str(path)]
        if overrides is not None:
            assert tmp is not None, "overrides are written to a values file under tmp"
            extra = tmp / f"overrides-{len(list(tmp.glob('overrides-*')))}.yaml"
            extra.write_text(yaml.safe_dump(dict(overrides)))
            args += ["--values", str(extra)]
        return self.run(*args)

    def render(
        self,
        values: Sequence[Path] = (),
        overrides: Mapping[str, Any] | None = None,
        *,
        tmp: Path | None = None,
    ) -> list[Manifest]:
        result = self.template(values, overrides, tmp=tmp)
        assert result.returncode == 0, result.stderr
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def of_kind(docs: Iterable[Manifest], kind: str) -> dict[str, Manifest]:
    """Manifests of one kind by their component label (or name when they have none)."""
    found: dict[str, Manifest] = {}
    for doc in docs:
        if doc["kind"] == kind:
            labels = doc["metadata"].get("labels", {})
            found[labels.get("app.kubernetes.io/component", doc["metadata"]["name"])] = doc
    return found


@dataclass
class Process:
    """What one Deployment's container runs."""

    component: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    # Variables from the Secret: name -> (secret, key); values filled in when rendered.
    secret_refs: dict[str, tuple[str, str]] = field(default_factory=dict)


def processes(docs: Sequence[Manifest]) -> dict[str, Process]:
    config_maps = {
        d["metadata"]["name"]: d.get("data") or {} for d in docs if d["kind"] == "ConfigMap"
    }
    secrets = {
        d["metadata"]["name"]: {
            k: base64.b64decode(v).decode() for k, v in (d.get("data") or {}).items()
        }
        for d in docs
        if d["kind"] == "Secret"
    }
    found: dict[str, Process] = {}
    for component, deployment in of_kind(docs, "Deployment").items():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        process = Process(component, [*container.get("command", []), *container.get("args", [])])
        for source in container.get("envFrom", []):
            process.env.update(config_maps[source["configMapRef"]["name"]])
        for var in container.get("env", []):
            if "value" in var:
                process.env[var["name"]] = var["value"]
                continue
            ref = var["valueFrom"]["secretKeyRef"]
            process.secret_refs[var["name"]] = (ref["name"], ref["key"])
            value = secrets.get(ref["name"], {}).get(ref["key"])
            if value is not None:
                process.env[var["name"]] = value
        found[component] = process
    return found


def _selected(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    if selector is None:
        return False
    if selector.get("matchExpressions"):
        raise NotImplementedError("matchExpressions")
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


@dataclass(frozen=True)
class Peer:
    """One end of a connection: a pod (labels, namespace labels) or an address."""

    labels: Mapping[str, str] = field(default_factory=dict)
    namespace: str = NAMESPACE
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    ip: str | None = None


def _peer_matches(rule_peer: Mapping[str, Any], peer: Peer) -> bool:
    if "ipBlock" in rule_peer:
        if peer.ip is None:
            return False
        block = rule_peer["ipBlock"]
        address = ipaddress.ip_address(peer.ip)
        return address in ipaddress.ip_network(block["cidr"]) and not any(
            address in ipaddress.ip_network(e) for e in block.get("except", [])
        )
    if peer.ip is not None:
        return False
    namespace_labels = {"kubernetes.io/metadata.name": peer.namespace, **peer.namespace_labels}
    if "namespaceSelector" in rule_peer:
        if not _selected(rule_peer["namespaceSelector"], namespace_labels):
            return False
    elif peer.namespace != NAMESPACE:
        return False
    return "podSelector" not in rule_peer or _selected(rule_peer["podSelector"], peer.labels)


def _port_matches(rule: Mapping[str, Any], port: int, protocol: str) -> bool:
    ports = rule.get("ports")
    if not ports:
        return True
    return any(
        p.get("protocol", "TCP") == protocol
        and (p.get("port") is None or int(p["port"]) <= port <= int(p.get("endPort", p["port"])))
        for p in ports
    )


def _rules_allow(
    rules: Sequence[Mapping[str, Any]], key: str, peer: Peer, port: int, protocol: str
) -> bool:
    for rule in rules:
        if not _port_matches(rule, port, protocol):
            continue
        peers = rule.get(key)
        if not peers or any(_peer_matches(p, peer) for p in peers):
            return True
    return False


@dataclass
class NetworkPolicies:
    policies: list[Manifest]

    @classmethod
    def of(cls, docs: Sequence[Manifest]) -> NetworkPolicies:
        return cls([d for d in docs if d["kind"] == "NetworkPolicy"])

    def allows(self, source: Peer, destination: Peer, port: int, protocol: str = "TCP") -> bool:
        """Both the source's egress and the destination's ingress admit the connection
        (a pod that no policy selects for a direction is open in that direction)."""
        return self._admits(source, destination, port, protocol, "Egress", "egress", "to") and (
            self._admits(destination, source, port, protocol, "Ingress", "ingress", "from")
        )

    def _admits(
        self, pod: Peer, other: Peer, port: int, protocol: str, kind: str, key: str, peer_key: str
    ) -> bool:
        if pod.ip is not None:
            return True  # an address outside the cluster: no policy of ours applies there
        selecting = [
            p
            for p in self.policies
            if p["metadata"]["namespace"] == pod.namespace
            and kind in p["spec"].get("policyTypes", ["Ingress"])
            and _selected(p["spec"]["podSelector"], pod.labels)
        ]
        if not selecting:
            return True
        return any(
            _rules_allow(p["spec"].get(key) or [], peer_key, other, port, protocol)
            for p in selecting
        )
