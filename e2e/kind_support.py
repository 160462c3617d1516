"""A real kind cluster for the end-to-end suite: images from the project's Dockerfiles, the chart installed by Helm.

The session fixture ``kind_cluster`` builds (or reuses from the cache) the
offline node image, the operator image and the CPU trainer image, starts a kind
cluster of 1 control plane + 3 workers with ``railtrain dev up --kind``, and
installs ``helm/railtrain`` with the local operator image and two replicas (a
leader and a standby, the chart's high-availability setup), so the operator runs
in-cluster under the chart's ServiceAccount and ClusterRole. Where Docker
cannot run, every kind test is skipped with the reason (pytest -ra prints it).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]

OPERATOR_NAMESPACE = "railtrain-system"
RELEASE = "rt"
WORKERS = 3
FIRST_START_WORKERS = 1  # the session's first `dev up` (then `dev down`), which only has to show that a second start builds nothing
OPERATOR_REPLICAS = 2  # every kind test runs against a leader and a standby
LEASE = "railtrain-operator"  # operator/lease.py LEASE_NAME, in the release namespace


@dataclass
class KindE2E:
    """The running kind cluster: kubeconfig, kubectl, the images, and timings of its start (seconds)."""

    name: str
    kubeconfig: str
    kubectl_bin: str
    operator_image: str
    trainer_image: str
    node_image: str
    timings: dict[str, float] = field(default_factory=dict)
    node_image_ids: list[str] = field(default_factory=list)  # its Docker image ID before the first and after the second dev up

    def kubectl(self, *args: str, check: bool = True, timeout: float = 120, input: str | None = None) -> subprocess.CompletedProcess:
        """Run kubectl against the cluster; raises AssertionError with its stderr when ``check`` and it fails."""
        proc = subprocess.run([self.kubectl_bin, f"--kubeconfig={self.kubeconfig}", *args], capture_output=True, text=True, timeout=timeout, input=input)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
        return proc

    def job(self, name: str, namespace: str) -> dict:
        """The TrainingJob as a dict ({} when absent)."""
        out = self.kubectl("get", "trainingjob", name, "-n", namespace, "-o", "json", check=False)
        return json.loads(out.stdout) if out.returncode == 0 else {}

    def phase(self, name: str, namespace: str) -> str | None:
        return self.job(name, namespace).get("status", {}).get("phase")

    def pods(self, namespace: str, selector: str = "") -> list[dict]:
        args = ["get", "pods", "-n", namespace, "-o", "json"] + (["-l", selector] if selector else [])
        return json.loads(self.kubectl(*args).stdout)["items"]

    def operator_pods(self) -> list[dict]:
        """The chart's operator pods in the release namespace (terminating ones included)."""
        return self.pods(OPERATOR_NAMESPACE, "app.kubernetes.io/name=railtrain,app.kubernetes.io/instance=" + RELEASE)

    def lease_holder(self) -> str:
        """The pod name in the operator Lease's holderIdentity (``HOST/PID``, HOST being the pod's name); "" when nobody holds it."""
        out = self.kubectl("get", "lease", LEASE, "-n", OPERATOR_NAMESPACE, "-o", "jsonpath={.spec.holderIdentity}", check=False)
        return out.stdout.strip().split("/", 1)[0] if out.returncode == 0 else ""

    def helm(self, *args: str, timeout: float = 400) -> subprocess.CompletedProcess:
        """Run helm on the release's namespace of this cluster; returns the completed process (not checked)."""
        return subprocess.run([_helm(), *args, "--kubeconfig", self.kubeconfig, "--namespace", OPERATOR_NAMESPACE], capture_output=True, text=True, timeout=timeout)

    def diagnostics(self, namespace: str | None) -> str:
        """Operator logs, the namespace's pods, their logs and Events, as one text for a failure report."""
        parts = []
        def add(title: str, *args: str) -> None:
            out = self.kubectl(*args, check=False, timeout=60)
            parts.append(f"===== {title}\n{out.stdout}{out.stderr}")
        add("operator logs", "logs", "-n", OPERATOR_NAMESPACE, "-l", "app.kubernetes.io/name=railtrain", "--tail=200", "--all-containers")
        add("nodes", "get", "nodes", "-o", "wide")
        if namespace:
            add("trainingjobs", "get", "trainingjobs", "-n", namespace, "-o", "yaml")
            add("pods", "get", "pods", "-n", namespace, "-o", "wide")
            for pod in self.pods(namespace):
                n = pod["metadata"]["name"]
                add(f"logs {n}", "logs", "-n", namespace, n, "--tail=80", "--all-containers")
                add(f"previous logs {n}", "logs", "-n", namespace, n, "--tail=40", "--previous")
            add("events", "get", "events", "-n", namespace, "--sort-by=.lastTimestamp")
        add("kube-system pods", "get", "pods", "-n", "kube-system", "-o", "wide")
        return "\n".join(parts)


def _helm() -> str:
    return subprocess.run(["bash", str(REPO / "cli/controlplane/install-helm.sh")], capture_output=True, text=True, check=True).stdout.strip()


def skip_without_docker() -> None:
    """Skip the calling test with the reason (printed by pytest -ra) when Docker cannot run containers here."""
    from railtrain.cli.controlplane import kind

    reason = kind.docker_unavailable_reason()
    if reason:
        print(f"\nkind e2e skipped: {reason}")
        pytest.skip(f"kind e2e needs Docker: {reason}")


def build_app_images() -> tuple[str, str, Path, float]:
    """Build the operator and CPU trainer images from the Dockerfiles; returns (operator, trainer, CUDA-libs folder, seconds)."""
    from railtrain.cli.controlplane import kind

    skip_without_docker()
    t0 = time.monotonic()
    operator_image, trainer_image, cuda_libs = kind.ensure_app_images(REPO, quiet=False)
    return operator_image, trainer_image, cuda_libs, time.monotonic() - t0


def kind_cluster_session(app_images: tuple[str, str, Path, float], deletions: list) -> Iterator[KindE2E]:
    """Body of the session fixture ``kind_cluster`` (e2e/conftest.py).

    Starts a cluster twice with ``railtrain dev up --kind`` (the second start
    reuses the cached node image; its time is kept as ``second_dev_up``), then
    loads the images and installs the chart. The first start has one worker
    (``FIRST_START_WORKERS``): what it is there for, a start and a ``dev
    down`` before the start the tests use, needs no more, and a 2-node
    cluster boots in about half the time and CPU of a 4-node one. The cluster
    is deleted when the fixture using this ends (``kind_cluster`` is
    package-scoped: after the last test in ``e2e/`` that uses it, so it does
    not idle beside the rest of the suite): ``dev down`` is started in the
    background and appended to ``deletions`` as ``(name, process, its
    output file, start time)``, for :func:`wait_deleted` at the session's end.
    """
    from .conftest import RAILTRAIN, railtrain

    from railtrain.cli.controlplane import kind
    from railtrain.cli.controlplane.binaries import ensure_binaries

    skip_without_docker()
    operator_image, trainer_image, cuda_libs, seconds = app_images
    timings: dict[str, float] = {"app_images": seconds}
    t0 = time.monotonic()
    node_image = kind.ensure_node_image(quiet=False)
    timings["node_image"] = time.monotonic() - t0
    name = os.environ.get("RAILTRAIN_E2E_KIND_NAME") or f"e2e-{uuid.uuid4().hex[:6]}"
    up = ["dev", "up", "--kind", "--name", name, "--cuda-libs", str(cuda_libs)]
    image_id = lambda: subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", node_image], capture_output=True, text=True).stdout.strip()  # noqa: E731
    ids = [image_id()]
    outputs = {}
    for start, workers in (("first_dev_up", FIRST_START_WORKERS), ("second_dev_up", WORKERS)):
        if start == "second_dev_up":
            t0 = time.monotonic()
            railtrain("dev", "down", "--kind", "--name", name, timeout=600)
            timings["dev_down"] = time.monotonic() - t0
        t0 = time.monotonic()
        outputs[start] = railtrain(*up, "--nodes", str(workers), timeout=3600)
        timings[start] = time.monotonic() - t0
    ids.append(image_id())
    out = outputs["second_dev_up"].stdout
    kubeconfig = next(line.split("=", 1)[1].strip() for line in out.splitlines() if line.startswith("export KUBECONFIG="))
    cluster = KindE2E(name, kubeconfig, str(ensure_binaries(quiet=True) / "kubectl"), operator_image, trainer_image, node_image, timings, ids)
    try:
        t0 = time.monotonic()
        railtrain(*up, "--nodes", str(WORKERS), "--load", operator_image, "--load", trainer_image, timeout=3600)
        timings["load_images"] = time.monotonic() - t0
        repo, tag = operator_image.rsplit(":", 1)
        t0 = time.monotonic()
        subprocess.run(
            [_helm(), "upgrade", "--install", RELEASE, str(REPO / "helm" / "railtrain"), "--kubeconfig", kubeconfig,
             "--namespace", OPERATOR_NAMESPACE, "--create-namespace", "--set", f"image.repository={repo}", "--set", f"image.tag={tag}",
             "--set", "image.pullPolicy=Never", "--set", "crds.install=false", "--set", f"replicaCount={OPERATOR_REPLICAS}", "--wait", "--timeout", "5m"],
            capture_output=True, text=True, check=True, timeout=400,
        )  # fmt: skip
        timings["helm_install"] = time.monotonic() - t0
        print(f"\nkind e2e cluster {name}: " + ", ".join(f"{k} {v:.0f}s" for k, v in timings.items()))
        yield cluster
    except subprocess.CalledProcessError as err:
        raise AssertionError(f"helm install failed: {err.stderr}\n{cluster.diagnostics(None)}") from None
    finally:
        if not os.environ.get("RAILTRAIN_E2E_KEEP"):
            said = tempfile.TemporaryFile("w+")  # not a pipe: nobody reads it until the session ends
            down = subprocess.Popen([*RAILTRAIN, "dev", "down", "--kind", "--name", name], cwd=REPO, stdout=said, stderr=subprocess.STDOUT, text=True)
            deletions.append((name, down, said, time.monotonic()))


def wait_deleted(deletions: list, timeout: float = 600) -> None:
    """Wait for each background ``dev down`` of :func:`kind_cluster_session` and print how it ended (as the foreground one did: not checked).

    One still running after ``timeout`` seconds is killed.
    """
    for name, down, said, started in deletions:
        try:
            down.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            down.kill()
            down.wait()
        said.seek(0)
        ended = "deleted" if down.returncode == 0 else f"dev down exited {down.returncode}: {said.read().strip()[-2000:]}"
        said.close()
        print(f"\nkind e2e cluster {name} (in the background) {ended}, {time.monotonic() - started:.0f}s after the last kind test")


def kind_namespace(kind_cluster: KindE2E, request) -> Iterator[str]:
    """Body of the fixture ``kind_ns``: a fresh namespace; on a failed test the operator's and the namespace's logs and Events are printed."""
    from .conftest import wait_for

    name = f"e2e-{uuid.uuid4().hex[:6]}"
    kind_cluster.kubectl("create", "namespace", name)
    wait_for(lambda: "default" in kind_cluster.kubectl("get", "serviceaccounts", "-n", name).stdout, 60, "default ServiceAccount")
    yield name
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(kind_cluster.diagnostics(name))
    kind_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def write_job(tmp_path: Path, example: str, image: str, **spec_overrides) -> tuple[Path, dict]:
    """The example manifest with ``spec.image`` = ``image`` and the overrides, written to a file; returns (path, doc)."""
    doc = yaml.safe_load((REPO / example).read_text())
    doc["spec"]["image"] = image
    doc["spec"].update(spec_overrides)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path, doc
