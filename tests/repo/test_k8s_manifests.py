"""The Kubernetes manifests in infra/k8s render (kustomize, through `kubectl kustomize`),
every object is valid against the Kubernetes schemas (kubernetes-validate, offline), and
the objects fit together: selectors find their pods, the NetworkPolicies let clients
reach the gateways only, Tamto's pods reach each other and Prometheus the metrics ports,
referenced ConfigMaps and Secrets exist or are the documented ones an operator makes,
every setting a Tamto pod is given is one its service reads, and every Tamto service is
probed on its gRPC health service.

`kubectl` (with its built-in kustomize) is on the project's machines; without it the
test skips, saying so.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tamto_auth.config import AuthConfig
from tamto_gateway.config import GatewayConfig
from tamto_router.config import RouterConfig
from tamto_storage.config import StorageConfig
from tamto_testing.needs import missing

from .infra_queries import ROOT

K8S = ROOT / "infra" / "k8s"
KUSTOMIZATIONS = ("base", "overlays/dev", "overlays/production")
#: The oldest Kubernetes the manifests are for (gRPC probes are GA since 1.27) and the
#: newest kubernetes-validate knows.
VERSIONS = ("1.29", kubernetes_validate.latest_version())
#: Secrets the manifests use but do not make (infra/README.md, "Kubernetes").
OPERATOR_SECRETS = {"tamto-cluster", "tamto-tls", "tamto-admin-key"}
SERVICES = {
    "gateway": GatewayConfig,
    "router": RouterConfig,
    "storage": StorageConfig,
    "auth": AuthConfig,
}
WORKLOADS = ("Deployment", "StatefulSet")

Obj = dict[str, Any]


def render(kustomization: str) -> list[Obj]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        missing("kubectl not installed (its kustomize renders infra/k8s)")
    done = subprocess.run(
        [kubectl, "kustomize", str(K8S / kustomization)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return [o for o in yaml.safe_load_all(done.stdout) if o]


@pytest.fixture(scope="module", params=KUSTOMIZATIONS)
def objects(request: pytest.FixtureRequest) -> list[Obj]:
    return render(str(request.param))


def of_kind(objects: list[Obj], *kinds: str) -> Iterator[Obj]:
    return (o for o in objects if o["kind"] in kinds)


def pod_labels(objects: list[Obj]) -> list[dict[str, str]]:
    return [w["spec"]["template"]["metadata"]["labels"] for w in of_kind(objects, *WORKLOADS)]


def selects(selector: Obj, labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels and In expressions) matches `labels`."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        assert expr["operator"] == "In", expr
        if labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def tamto_containers(objects: list[Obj]) -> Iterator[tuple[str, Obj]]:
    """(service, container) of every Tamto service's workload."""
    for workload in of_kind(objects, *WORKLOADS):
        component = workload["spec"]["template"]["metadata"]["labels"]
        service = component["app.kubernetes.io/component"]
        if service in SERVICES:
            yield service, workload["spec"]["template"]["spec"]["containers"][0]


def test_every_object_is_valid_against_the_kubernetes_schemas(objects: list[Obj]) -> None:
    assert objects
    for version in VERSIONS:
        for obj in objects:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                name = f"{obj['kind']}/{obj['metadata']['name']}"
                raise AssertionError(f"{name} (Kubernetes {version}): {exc.message}") from None


def test_the_services_and_their_shape(objects: list[Obj]) -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    for kind, name in (
        ("StatefulSet", "tamto-storage"),
        ("StatefulSet", "tamto-router"),
        ("StatefulSet", "tamto-auth"),
        ("StatefulSet", "tamto-etcd"),
        ("StatefulSet", "tamto-nats"),
        ("Deployment", "tamto-gateway"),
        ("HorizontalPodAutoscaler", "tamto-gateway"),
        ("Service", "tamto-gateway"),
    ):
        assert (kind, name) in kinds
    assert all(o["metadata"].get("namespace", "tamto") == "tamto" for o in objects)
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for _, container in tamto_containers(objects):
        assert container["image"].endswith(f":{version}"), "images are the workspace's version"
    [storage] = [
        o for o in of_kind(objects, "StatefulSet") if o["metadata"]["name"] == "tamto-storage"
    ]
    assert storage["spec"]["volumeClaimTemplates"], "storage nodes need their own volumes"


def test_selectors_find_their_pods(objects: list[Obj]) -> None:
    pods = pod_labels(objects)
    for obj in of_kind(objects, "Service", "PodDisruptionBudget", "NetworkPolicy"):
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        spec = obj["spec"]
        selector = (
            {"matchLabels": spec["selector"]}
            if obj["kind"] == "Service"
            else spec.get("selector", spec.get("podSelector"))
        )
        assert any(selects(selector, labels) for labels in pods), f"{name} selects no pod"
    for workload in of_kind(objects, *WORKLOADS):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert selects(workload["spec"]["selector"], labels), workload["metadata"]["name"]
    workloads = {(w["kind"], w["metadata"]["name"]) for w in of_kind(objects, *WORKLOADS)}
    for hpa in of_kind(objects, "HorizontalPodAutoscaler"):
        target = hpa["spec"]["scaleTargetRef"]
        assert (target["kind"], target["name"]) in workloads


def test_referenced_config_maps_and_secrets_exist(objects: list[Obj]) -> None:
    config_maps = {o["metadata"]["name"] for o in of_kind(objects, "ConfigMap")}
    secrets = {o["metadata"]["name"] for o in of_kind(objects, "Secret")} | OPERATOR_SECRETS
    for workload in of_kind(objects, *WORKLOADS):
        spec = workload["spec"]["template"]["spec"]
        for container in spec["containers"]:
            for source in container.get("envFrom", []):
                assert source["configMapRef"]["name"] in config_maps
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref is not None:
                    assert ref["name"] in secrets, f"{workload['metadata']['name']}: {ref}"
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                assert volume["secret"]["secretName"] in secrets


def admitted(policies: list[Obj], source: dict[str, str], same_namespace: bool) -> Any:
    """Whether `policies` let a pod labelled `source` reach (pod labels, port)."""

    def peer_matches(peer: Obj) -> bool:
        if "namespaceSelector" not in peer and not same_namespace:
            return False
        return selects(peer.get("podSelector", {}), source)

    def check(target: dict[str, str], port: int) -> bool:
        for policy in policies:
            if not selects(policy["spec"]["podSelector"], target):
                continue
            for rule in policy["spec"].get("ingress", []):
                peers = rule.get("from")
                ports = [p["port"] for p in rule.get("ports", [])]
                if (peers is None or any(map(peer_matches, peers))) and (
                    not ports or port in ports
                ):
                    return True
        return False

    return check


def test_network_policies_let_in_clients_peers_and_prometheus_only(objects: list[Obj]) -> None:
    policies = list(of_kind(objects, "NetworkPolicy"))
    assert any(p["spec"]["podSelector"] == {} for p in policies), "no default deny"
    pods = {labels["app.kubernetes.io/component"]: labels for labels in pod_labels(objects)}
    client = admitted(policies, {"app": "shop"}, same_namespace=False)
    peer = admitted(policies, pods["gateway"], same_namespace=True)
    prometheus = admitted(policies, {"app.kubernetes.io/name": "prometheus"}, False)
    assert client(pods["gateway"], 7400)
    for name, port in (("auth", 7401), ("router", 7402), ("storage", 7403), ("etcd", 2379)):
        assert not client(pods[name], port), f"a client reaches {name}"
        assert peer(pods[name], port), f"a gateway cannot reach {name}"
        assert not prometheus(pods[name], port), f"prometheus reaches {name}'s {port}"
    for name in SERVICES:
        assert prometheus(pods[name], 9090), f"prometheus cannot scrape {name}"
        assert not client(pods[name], 9090), f"a client reaches {name}'s metrics"


def test_every_setting_given_to_a_tamto_pod_is_one_its_service_reads(
    objects: list[Obj],
) -> None:
    """A misspelt TAMTO_ variable would be ignored in silence (README, Configuration)."""
    shared = {o["metadata"]["name"]: o["data"] for o in of_kind(objects, "ConfigMap")}
    for service, container in tamto_containers(objects):
        fields = {f.name.upper() for f in dataclasses.fields(SERVICES[service])}
        names = {e["name"] for e in container["env"]} | {
            key
            for source in container.get("envFrom", [])
            for key in shared[source["configMapRef"]["name"]]
        }
        for name in sorted(n for n in names if n.startswith("TAMTO_")):
            setting = name.removeprefix(f"TAMTO_{service.upper()}_").removeprefix("TAMTO_")
            assert setting in fields, f"{service}: {name} is no setting of {service}"


def test_every_tamto_service_is_probed_on_its_health_service(objects: list[Obj]) -> None:
    tls = any(
        v.get("secret", {}).get("secretName") == "tamto-tls"
        for w in of_kind(objects, *WORKLOADS)
        for v in w["spec"]["template"]["spec"].get("volumes", [])
    )
    services = set()
    for service, container in tamto_containers(objects):
        services.add(service)
        [grpc_port] = [p["containerPort"] for p in container["ports"] if p["name"] == "grpc"]
        port = str(grpc_port)
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["TAMTO_PORT"] == port
        [metrics] = [p["containerPort"] for p in container["ports"] if p["name"] == "metrics"]
        [config] = [o["data"] for o in of_kind(objects, "ConfigMap")]
        assert config["TAMTO_METRICS_PORT"] == str(metrics)
        assert "TAMTO_INSTANCE_ID" in env
        assert "TAMTO_ADVERTISE_HOST" in env
        for probe in ("readinessProbe", "livenessProbe"):
            # Kubernetes' gRPC probes do not speak TLS: with TLS they check the port.
            check = container[probe]["tcpSocket" if tls else "grpc"]
            assert check["port"] == grpc_port, f"{service} {probe}"
        assert container["resources"]["requests"], service
    assert services == set(SERVICES)
