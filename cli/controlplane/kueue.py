"""Stock Kueue (sigs.k8s.io/kueue) as a local process beside a local control plane, for tests and benchmarks.

``bench/install-kueue.sh`` builds the ``kueue`` binary from the Go module proxy
into the railtrain cache (``~/.cache/railtrain/kueue/kueue-<version>``) with the
CRDs and webhook manifests of the same module next to it. :class:`LocalKueue`
runs it off-cluster, as /work/shared/KUEUE.md records a run that worked:

* a CA and a serving certificate for ``127.0.0.1`` made with ``openssl``;
  internal certificate management off, webhooks served on 127.0.0.1;
* the CRDs applied server-side with their conversion webhooks, and the webhook
  configurations (job, pod, workload, clusterqueue, resourceflavor, cohort
  only) rewritten from a Service to ``https://127.0.0.1:<port>``; the pod
  webhooks limited to namespaces labelled :data:`NS_LABEL`, so the pods of
  other namespaces (railtrain's among them) pay no webhook round trip;
* ``integrations.frameworks`` and ``integrations.externalFrameworks`` as given:
  the tests list ``TrainingJob.v1alpha1.railtrain.dev`` (:data:`TRAININGJOB_FRAMEWORK`),
  whose Workloads railtrain's operator writes itself.

The queue objects (Topology, ResourceFlavor, ClusterQueue, LocalQueue) are
built by the small functions below and applied with :meth:`LocalKueue.apply`,
retried while Kueue's webhooks (failurePolicy Fail) are not answering yet.
Nothing of Kueue is changed.

Used by ``bench/kueue_local.py`` and the cluster-tier tests (``tests/kueue/``).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import yaml

from railtrain.cli.controlplane.binaries import cache_root
from railtrain.cli.controlplane.cluster import ClusterError, LocalCluster, stop_process, wait_until

REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / "bench" / "install-kueue.sh"
VERSION = os.environ.get("RAILTRAIN_KUEUE_VERSION", "v0.17.0")
GROUP, API = "kueue.x-k8s.io", "v1beta2"
"""Kueue's API group and the version written here (v0.17.0 serves v1beta1 and v1beta2; v1beta2 is its storage version)."""
NS_LABEL = "railtrain.dev/bench-kueue"
"""Namespaces whose pods Kueue's pod webhook sees (the bench's plain-pod groups)."""
TRAININGJOB_FRAMEWORK = "TrainingJob.v1alpha1.railtrain.dev"
"""The TrainingJob's entry in Kueue's ``integrations.externalFrameworks``."""
CONVERTED = {"localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters"}
KEEP_WEBHOOKS = {"job", "pod", "workload", "clusterqueue", "resourceflavor", "cohort"}
METRICS_CERTS = Path("/etc/kueue/metrics/certs")
"""Kueue v0.17.0 exits without a certificate here when internal cert management is off (even with metrics off)."""


def cached_root() -> Path | None:
    """The Kueue cache folder when the binary is already built, else None (never builds)."""
    root = cache_root() / "kueue" / f"kueue-{VERSION}"
    return root if (root / ".complete").exists() else None


def ensure_kueue() -> tuple[Path | None, str]:
    """Build Kueue with ``install-kueue.sh`` unless cached.

    Returns:
        (the cache folder, "") when it is there; (None, reason) when Go or the
        module proxy cannot serve it (the script's exit 3), so the caller can
        skip with that reason.

    Raises:
        RuntimeError: the build itself failed (with the script's last output).
    """
    root = cached_root()
    if root:
        return root, ""
    proc = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True)
    if proc.returncode == 3:
        return None, proc.stderr.strip().splitlines()[-1]
    if proc.returncode != 0:
        raise RuntimeError(f"install-kueue.sh exited with {proc.returncode}:\n{proc.stderr[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1]), ""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_certs(folder: Path) -> bytes:
    """Write ``ca.crt`` and a serving ``tls.crt``/``tls.key`` (SAN 127.0.0.1, localhost) into ``folder``; return the CA PEM.

    Raises:
        subprocess.CalledProcessError: ``openssl`` failed.
    """
    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)

    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=railtrain-kueue-ca")
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=localhost")
    ssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "tls.crt", "-days", "2", "-extfile", "san.ext")
    return (folder / "ca.crt").read_bytes()


# --- queue objects ----------------------------------------------------------------

def topology(name: str, levels: Sequence[str]) -> dict[str, Any]:
    """A Kueue ``Topology`` named ``name`` with node-label ``levels``, widest first."""
    return {"apiVersion": f"{GROUP}/{API}", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": level} for level in levels]}}


def resource_flavor(name: str, node_labels: Mapping[str, str], topology_name: str | None = None,
                    tolerations: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """A ``ResourceFlavor`` over the nodes carrying ``node_labels`` (TAS when ``topology_name`` is given)."""
    spec: dict[str, Any] = {"nodeLabels": dict(node_labels)}
    if topology_name:
        spec["topologyName"] = topology_name
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    return {"apiVersion": f"{GROUP}/{API}", "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def cluster_queue(name: str, flavor: str, quotas: Mapping[str, Any], namespace_selector: Mapping[str, Any] | None = None,
                  preemption: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A ``ClusterQueue`` with one flavor and ``quotas`` (resource name → nominal quota, e.g. ``{"nvidia.com/gpu": 16}``),
    and ``spec.preemption`` when given (e.g. ``{"withinClusterQueue": "LowerPriority"}``)."""
    spec: dict[str, Any] = {"namespaceSelector": dict(namespace_selector or {}), "resourceGroups": [{
        "coveredResources": list(quotas),
        "flavors": [{"name": flavor, "resources": [{"name": r, "nominalQuota": q} for r, q in quotas.items()]}]}]}
    if preemption:
        spec["preemption"] = dict(preemption)
    return {"apiVersion": f"{GROUP}/{API}", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(name: str, namespace: str, cluster_queue_name: str) -> dict[str, Any]:
    """A ``LocalQueue`` ``namespace/name`` feeding ``cluster_queue_name``."""
    return {"apiVersion": f"{GROUP}/{API}", "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue_name}}


def workload_priority_class(name: str, value: int) -> dict[str, Any]:
    """A ``WorkloadPriorityClass`` of ``value``."""
    return {"apiVersion": f"{GROUP}/{API}", "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}



def inline_kubeconfig(path: Path) -> str:
    """The kubeconfig at ``path`` with every certificate and key file it names read into its ``*-data`` field (base64),
    as MultiKueue requires of a worker cluster's kubeconfig (no file paths); returns the YAML text."""
    config = yaml.safe_load(path.read_text())
    for section, key in (("clusters", "cluster"), ("users", "user")):
        for entry in config.get(section) or []:
            body = entry.get(key) or {}
            for field in ("certificate-authority", "client-certificate", "client-key"):
                if body.get(field):
                    body[f"{field}-data"] = base64.b64encode(Path(body.pop(field)).read_bytes()).decode()
    return yaml.safe_dump(config)


def multikueue_objects(name: str, kubeconfig: Path) -> list[dict[str, Any]]:
    """The manager's MultiKueue objects for one worker cluster, all named ``name``: a ``MultiKueueCluster`` reading the
    worker's kubeconfig from ``kubeconfig`` (a path on the manager's machine), a ``MultiKueueConfig`` listing it and an
    ``AdmissionCheck`` of MultiKueue's controller using that configuration."""
    return [
        {"apiVersion": f"{GROUP}/{API}", "kind": "MultiKueueCluster", "metadata": {"name": name},
         "spec": {"clusterSource": {"kubeConfig": {"locationType": "Path", "location": str(kubeconfig)}}}},
        {"apiVersion": f"{GROUP}/{API}", "kind": "MultiKueueConfig", "metadata": {"name": name}, "spec": {"clusters": [name]}},
        {"apiVersion": f"{GROUP}/{API}", "kind": "AdmissionCheck", "metadata": {"name": name},
         "spec": {"controllerName": f"{GROUP}/multikueue", "parameters": {"apiGroup": GROUP, "kind": "MultiKueueConfig", "name": name}}},
    ]


def kubectl_input(docs: Iterable[Mapping[str, Any]]) -> str:
    """``docs`` as one JSON ``v1`` List for ``kubectl apply -f -``.

    Not YAML: PyYAML writes a string such as ``8e123456`` (a random label value) unquoted, since YAML 1.1 reads it as a
    string, while kubectl's YAML 1.2 reads it as a number, and the API refuses a number where a string belongs. JSON
    says which is which.
    """
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [dict(d) for d in docs]})

class LocalKueue:
    """Kueue's manager against ``cluster`` as a local process.

    Args:
        cluster: the running local control plane.
        root: the Kueue cache folder (:func:`ensure_kueue`).
        log_path: where the manager's output goes.
        frameworks: Kueue's built-in integrations to enable (``integrations.frameworks``).
        external_frameworks: GVKs whose owners write their own Workloads (``integrations.externalFrameworks``).
        fair_sharing: turn on Kueue's fair sharing (the configuration's ``fairSharing`` section, default strategies).

    Attributes:
        wait_for_pods_ready: Kueue's ``waitForPodsReady`` section (e.g. ``{"timeout": "10s"}``), or None for none; read
            at each :meth:`start` and :meth:`restart`.
        multikueue_frameworks: GVKs MultiKueue's generic adapter dispatches to worker clusters (``multiKueue.externalFrameworks``,
            e.g. :data:`TRAININGJOB_FRAMEWORK`); empty for none; read at each :meth:`start` and :meth:`restart`.
    """

    def __init__(self, cluster: LocalCluster, root: Path, log_path: Path, frameworks: Sequence[str] = ("batch/job", "pod"),
                 external_frameworks: Sequence[str] = (), fair_sharing: bool = False):
        self.cluster, self.root, self.log_path = cluster, root, log_path
        self.fair_sharing = fair_sharing
        self.frameworks, self.external = list(frameworks), list(external_frameworks)
        self.tmp = Path(tempfile.mkdtemp(prefix="railtrain-kueue-"))
        self.port, self.health = free_port(), free_port()
        self.proc: subprocess.Popen | None = None
        self.placed_metrics_certs = False
        self.wait_for_pods_ready: dict[str, Any] | None = None
        self.multikueue_frameworks: list[str] = []

    def start(self, timeout: float = 180) -> None:
        """Certificates, CRDs, webhooks, then the manager process, until it is ready.

        Raises:
            TimeoutError: the manager was not ready within ``timeout`` s (the log tail is in the message).
            ClusterError: the manager exited while starting.
        """
        ca = base64.b64encode(make_certs(self.tmp)).decode()
        url = f"https://127.0.0.1:{self.port}"
        self._install_crds(url, ca)
        self._install_webhooks(url, ca)
        if not (METRICS_CERTS / "tls.crt").exists():
            METRICS_CERTS.mkdir(parents=True, exist_ok=True)
            for name in ("tls.crt", "tls.key"):
                (METRICS_CERTS / name).write_bytes((self.tmp / name).read_bytes())
            self.placed_metrics_certs = True
        (self.tmp / "config.yaml").write_text(yaml.safe_dump(self._config()))
        self.cluster.kubectl("create", "namespace", "kueue-system", check=False)
        self._launch(timeout)

    def _launch(self, timeout: float) -> None:
        """Start the manager process (configuration, certificates and webhooks in place) and wait until it is ready."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [str(self.root / "bin" / "kueue"), "--config", str(self.tmp / "config.yaml"), "--feature-gates=VisibilityOnDemand=false"],
                stdout=log, stderr=subprocess.STDOUT, env=os.environ | {"KUBECONFIG": str(self.cluster.kubeconfig)},
            )
        try:
            wait_until(self._ready, timeout, "the Kueue manager ready")
        except ClusterError:
            raise
        except BaseException:
            raise TimeoutError(f"Kueue did not come up; its log ends:\n{self.tail()}") from None

    def kill(self) -> None:
        """SIGKILL the manager (a crash: its webhooks stop answering; its objects and configuration stay)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def restart(self, timeout: float = 180) -> None:
        """Start the manager again after :meth:`kill` (as its Deployment would), until it is ready.

        Raises:
            TimeoutError: not ready within ``timeout`` s; ClusterError: it exited while starting.
        """
        self.kill()
        (self.tmp / "config.yaml").write_text(yaml.safe_dump(self._config()))
        self._launch(timeout)

    def _config(self) -> dict[str, Any]:
        """Kueue's ``Configuration`` (config.kueue.x-k8s.io/v1beta2) for an off-cluster run."""
        integrations: dict[str, Any] = {"frameworks": self.frameworks}
        if self.external:
            integrations["externalFrameworks"] = self.external
        extra: dict[str, Any] = {"waitForPodsReady": dict(self.wait_for_pods_ready)} if self.wait_for_pods_ready else {}
        if self.multikueue_frameworks:
            extra["multiKueue"] = {"externalFrameworks": [{"name": f} for f in self.multikueue_frameworks]}
        if self.fair_sharing:
            extra["fairSharing"] = {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]}
        return extra | {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": "kueue-system",
            "manageJobsWithoutQueueName": False,
            "managedJobsNamespaceSelector": {"matchLabels": {NS_LABEL: "true"}},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": self.port, "certDir": str(self.tmp)},
            "leaderElection": {"leaderElect": False},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health}"},
            "integrations": integrations,
        }

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise ClusterError(f"Kueue exited with {self.proc.returncode}:\n{self.tail()}")  # wait_until stops at once
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health}/readyz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def _install_crds(self, url: str, ca: str) -> None:
        docs = []
        for path in sorted((self.root / "crd").glob("*.yaml")):
            for crd in yaml.safe_load_all(path.read_text()):
                if not crd or crd.get("kind") != "CustomResourceDefinition":
                    continue
                if crd["spec"]["names"]["plural"] in CONVERTED:  # Kueue's kustomize patches add these conversion webhooks
                    crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                        "clientConfig": {"url": f"{url}/convert", "caBundle": ca}, "conversionReviewVersions": ["v1"]}}
                docs.append(crd)
        path = self.tmp / "crds.yaml"
        path.write_text(yaml.safe_dump_all(docs))
        self.cluster.install_crds([path], timeout=120)  # Kueue exits at start if a kind is not served yet

    def _install_webhooks(self, url: str, ca: str) -> None:
        docs = []
        for doc in yaml.safe_load_all((self.root / "webhook" / "manifests.yaml").read_text()):
            if not doc or not doc.get("kind", "").endswith("WebhookConfiguration"):
                continue
            kept = []
            for hook in doc.get("webhooks") or []:
                if hook["name"].removesuffix(".kb.io")[1:] not in KEEP_WEBHOOKS:
                    continue
                hook["clientConfig"] = {"url": url + hook["clientConfig"]["service"]["path"], "caBundle": ca}
                if hook["name"][1:].startswith("pod."):
                    hook["namespaceSelector"] = {"matchLabels": {NS_LABEL: "true"}}
                kept.append(hook)
            doc["metadata"]["name"] = "railtrain-bench-" + doc["metadata"]["name"]
            doc["webhooks"] = kept
            docs.append(doc)
        self.cluster.kubectl("apply", "-f", "-", input=kubectl_input(docs))

    def apply(self, docs: Iterable[Mapping[str, Any]], timeout: float = 60) -> None:
        """``kubectl apply`` the Kueue objects ``docs``, retried while the webhooks (failurePolicy Fail) are not answering yet.

        Raises:
            TimeoutError: still refused after ``timeout`` s (kubectl's stderr).
        """
        deadline = time.monotonic() + timeout
        text = kubectl_input(docs)
        while True:
            proc = self.cluster.kubectl("apply", "-f", "-", input=text, check=False)
            if proc.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(proc.stderr)
            time.sleep(1)

    def check(self) -> None:
        """Raise RuntimeError with the log tail if the manager has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"Kueue exited with {self.proc.returncode}:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the manager's log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        """Stop the manager, remove the webhook configurations and any metrics certificate this run placed."""
        stop_process(self.proc, grace=20)
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            self.cluster.kubectl("delete", kind, f"railtrain-bench-{kind.split('webhook')[0]}-webhook-configuration",
                                 "--ignore-not-found", check=False)
        if self.placed_metrics_certs:
            for name in ("tls.crt", "tls.key"):
                (METRICS_CERTS / name).unlink(missing_ok=True)
