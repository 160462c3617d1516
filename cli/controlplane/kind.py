"""``railtrain dev up|down --kind``: a real multi-node cluster in Docker, built offline.

kind (``sigs.k8s.io/kind``, unmodified) runs each node as a container of a node
image that railtrain assembles from its own cache (``install-kind.sh`` builds
the binaries and Debian root filesystems, ``kind-images.sh`` the images), so no
container registry is needed. Workers get ``railtrain.dev/rack``/``block``
labels and a fake ``nvidia.com/gpu`` capacity (patched into ``Node.status``,
the documented way to advertise an extended resource), so GPU-shaped gangs
schedule while the trainer runs on CPU.

On a host whose capability bounding set lacks CAP_SYS_RESOURCE, Docker 20.10
cannot start ``--privileged`` containers; there, and only there, kind runs with
``kind-docker.sh`` first on its PATH as ``docker`` (it swaps ``--privileged``
for explicit capabilities), and the nodes' containerd is told
``restrict_oom_score_adj = true`` (runc inside a node cannot lower
``oom_score_adj`` without that capability).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

import yaml

from .binaries import cache_root, ensure_binaries
from .nodes import GPU_RESOURCE, LABEL_BLOCK, LABEL_RACK

HERE = Path(__file__).resolve().parent
IMAGES_SCRIPT = HERE / "kind-images.sh"
DOCKER_WRAPPER = HERE / "kind-docker.sh"
KIND_VERSION = "v0.33.0"
CAP_SYS_RESOURCE = 24
"""Bit of CAP_SYS_RESOURCE in a capability mask (linux/capability.h)."""
NODES_PER_RACK = 2
RACKS_PER_BLOCK = 2
CUDA_LIBS_NODE_PATH = "/opt/railtrain-cuda-libs"
"""Where a worker sees the host's CUDA-library folder (kind extraMounts, read-only)."""
CUDA_LIBS_CONTAINER_PATH = "/opt/railtrain/lib/python3.11/site-packages/nvidia"
"""Where every container on such a node sees it: the trainer image's venv, where the nvidia-* wheels install."""
BASE_SPEC_NODE_PATH = "/etc/containerd/cri-base-railtrain.json"


class KindError(RuntimeError):
    """Docker or kind is unavailable, or a kind cluster did not come up."""


def lacks_cap_sys_resource(proc_status: str | None = None) -> bool:
    """Whether this process's capability bounding set lacks CAP_SYS_RESOURCE.

    Args:
        proc_status: text of ``/proc/self/status`` (read when None).

    Returns:
        True when bit 24 of ``CapBnd`` is clear; False when it is set or the
        field is absent (not Linux).
    """
    text = proc_status if proc_status is not None else Path("/proc/self/status").read_text()
    for line in text.splitlines():
        if line.startswith("CapBnd:"):
            return not (int(line.split()[1], 16) >> CAP_SYS_RESOURCE) & 1
    return False


def docker_unavailable_reason() -> str | None:
    """Why Docker cannot run containers here, as one sentence, or None when it can."""
    docker = shutil.which("docker")
    if not docker:
        return "docker is not installed (apt-get install docker.io)"
    try:
        proc = subprocess.run([docker, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "docker info did not answer within 30 s"
    if proc.returncode != 0 or not proc.stdout.strip():
        detail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"the Docker daemon is not reachable ({detail}); start dockerd"
    return None


def worker_labels(index: int) -> dict[str, str]:
    """Topology labels of the ``index``-th worker (0-based): two workers to a rack, two racks to a block."""
    if index < 0:
        raise ValueError(f"worker index must be >= 0, got {index}")
    return {LABEL_RACK: f"rack-{index // NODES_PER_RACK}", LABEL_BLOCK: f"block-{index // (NODES_PER_RACK * RACKS_PER_BLOCK)}"}


def kind_config(
    name: str, workers: int, image: str, *, restrict_oom_score_adj: bool, cuda_libs: Path | None = None, base_spec: Path | None = None,
) -> dict[str, Any]:
    """The kind ``Cluster`` config (``kind.x-k8s.io/v1alpha4``): one control plane and ``workers`` workers.

    Args:
        name: the cluster's name (kind prefixes node containers with it).
        workers: number of worker nodes (>= 1), labelled by :func:`worker_labels`.
        image: the node image for every node.
        restrict_oom_score_adj: add the containerd patch that a host without
            CAP_SYS_RESOURCE needs (see the module docstring).
        cuda_libs: a host folder holding ``nvidia/`` (the CUDA libraries the
            CPU trainer image leaves out); with ``base_spec`` (an OCI base
            spec from :func:`base_spec_with_cuda_libs`) every node mounts
            both and containerd starts each container from that spec.

    Returns:
        The config as a dict (dump it as YAML for ``kind create cluster --config``).

    Raises:
        ValueError: ``workers`` < 1.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    nodes: list[dict[str, Any]] = [{"role": "control-plane", "image": image}]
    nodes += [{"role": "worker", "image": image, "labels": worker_labels(i)} for i in range(workers)]
    config: dict[str, Any] = {"kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4", "name": name, "nodes": nodes}
    patches = []
    if restrict_oom_score_adj:
        patches.append('[plugins."io.containerd.grpc.v1.cri"]\n  restrict_oom_score_adj = true\n')
    if cuda_libs is not None and base_spec is not None:
        mounts = [
            {"hostPath": str(cuda_libs), "containerPath": CUDA_LIBS_NODE_PATH, "readOnly": True},
            {"hostPath": str(base_spec), "containerPath": BASE_SPEC_NODE_PATH, "readOnly": True},
        ]
        for node in nodes:  # the containerd patch reaches every node, so every node needs the files
            node["extraMounts"] = mounts
        patches.append(f'[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n  base_runtime_spec = "{BASE_SPEC_NODE_PATH}"\n')
    if patches:
        config["containerdConfigPatches"] = patches
    return config


def base_spec_with_cuda_libs(base_spec: dict[str, Any]) -> dict[str, Any]:
    """The node's OCI base spec plus a read-only bind of the CUDA-library folder at :data:`CUDA_LIBS_CONTAINER_PATH`.

    Args:
        base_spec: the node image's ``/etc/containerd/cri-base.json`` (not modified).

    Returns:
        A new spec whose ``mounts`` end with that bind mount.
    """
    mount = {"destination": CUDA_LIBS_CONTAINER_PATH, "type": "bind", "source": f"{CUDA_LIBS_NODE_PATH}/nvidia", "options": ["rbind", "ro"]}
    return {**base_spec, "mounts": [*base_spec.get("mounts", []), mount]}


def _run_locked(args: Sequence[str], lock_name: str, quiet: bool, timeout: float) -> str:
    """Run a build script under a file lock in the cache; returns its stdout's last line."""
    root = cache_root()
    (root / "kind").mkdir(parents=True, exist_ok=True)
    with open(root / "kind" / lock_name, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = subprocess.run(
            list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE if quiet else None, text=True,
            env={**os.environ, "RAILTRAIN_CACHE": str(root)}, timeout=timeout,
        )
    if proc.returncode != 0:
        detail = "\n".join((proc.stderr or "").splitlines()[-20:]) if quiet else "see its stderr above"
        raise KindError(f"{' '.join(args[:3])} exited with {proc.returncode}: {detail}")
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise KindError(f"{' '.join(args[:3])} printed nothing")
    return proc.stdout


def ensure_node_image(quiet: bool = False) -> str:
    """Build (once; cached by its inputs) the offline kind node image and return its name.

    Raises:
        KindError: Docker is unavailable or the build failed (a cold build
            needs Go, debootstrap and gcc, and takes several minutes).
    """
    if reason := docker_unavailable_reason():
        raise KindError(reason)
    ensure_binaries(quiet=quiet)
    return _run_locked(["bash", str(IMAGES_SCRIPT), "node"], ".node-image.lock", quiet, 3600).strip().splitlines()[-1]


def ensure_app_images(repo: Path, quiet: bool = False) -> tuple[str, str, Path]:
    """Build the operator and CPU trainer images from ``repo``'s Dockerfiles.

    Returns:
        (operator image, trainer image, the cache folder holding ``nvidia/``:
        the CUDA libraries the trainer image leaves out; pass it to
        :func:`kind_up` as ``cuda_libs``).

    Raises:
        KindError: Docker is unavailable or a build failed.
    """
    if reason := docker_unavailable_reason():
        raise KindError(reason)
    out = _run_locked(["bash", str(IMAGES_SCRIPT), "app", str(repo)], ".app-images.lock", quiet, 3600).strip().splitlines()
    return out[-3], out[-2], Path(out[-1])


def kind_binary() -> Path:
    """The cached kind executable (built by ``install-kind.sh``)."""
    path = cache_root() / "kind" / f"kind-{KIND_VERSION}" / "bin" / "kind"
    if not os.access(path, os.X_OK):
        raise KindError(f"{path} is missing; run cli/controlplane/install-kind.sh")
    return path


def kind_env() -> dict[str, str]:
    """Environment for kind: ``kind-docker.sh`` first on PATH as ``docker`` when the host lacks CAP_SYS_RESOURCE."""
    env = dict(os.environ)
    if not lacks_cap_sys_resource():
        return env
    real = shutil.which("docker")
    if not real:
        raise KindError("docker is not installed (apt-get install docker.io)")
    # One folder per checkout: the link names this checkout's script.
    wrapper_dir = cache_root() / "kind" / f"docker-wrapper-{hashlib.sha256(str(DOCKER_WRAPPER).encode()).hexdigest()[:8]}"
    wrapper_dir.mkdir(parents=True, exist_ok=True)
    link = wrapper_dir / "docker"
    if not link.is_symlink() or os.readlink(link) != str(DOCKER_WRAPPER):
        link.unlink(missing_ok=True)
        link.symlink_to(DOCKER_WRAPPER)
    env["PATH"] = f"{wrapper_dir}{os.pathsep}{env.get('PATH', '')}"
    env["RAILTRAIN_REAL_DOCKER"] = real
    return env


class KindCluster:
    """One kind cluster named ``name``; its kubeconfig lives in ``<cache>/clusters/kind-<name>/``."""

    def __init__(self, name: str = "railtrain") -> None:
        self.name = name
        self.state_dir = cache_root() / "clusters" / f"kind-{name}"
        self.kubeconfig = self.state_dir / "kubeconfig"

    def _kind(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(kind_binary()), *args], capture_output=True, text=True, env=kind_env(), timeout=timeout)
        if check and proc.returncode != 0:
            raise KindError(f"kind {' '.join(args[:3])} exited with {proc.returncode}: {proc.stderr.strip()[-2000:]}")
        return proc

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run the cached kubectl against this cluster; raises KindError when ``check`` and it fails."""
        kubectl = ensure_binaries(quiet=True) / "kubectl"
        proc = subprocess.run([str(kubectl), f"--kubeconfig={self.kubeconfig}", *args], capture_output=True, text=True, input=input, timeout=timeout)
        if check and proc.returncode != 0:
            raise KindError(f"kubectl {' '.join(args[:3])} exited with {proc.returncode}: {proc.stderr.strip()[-2000:]}")
        return proc

    def exists(self) -> bool:
        """Whether kind knows a cluster of this name."""
        return self.name in self._kind("get", "clusters", check=False).stdout.split()

    def worker_names(self) -> list[str]:
        """Names of the worker nodes, in order (``<name>-worker``, ``<name>-worker2``, ...)."""
        nodes = self._kind("get", "nodes", "--name", self.name).stdout.split()
        workers = [n for n in nodes if "-worker" in n]
        return sorted(workers, key=lambda n: int(n.rsplit("worker", 1)[1] or 1))

    def create(self, workers: int, gpus_per_node: int, image: str, cuda_libs: Path | None = None, timeout: float = 600) -> None:
        """Create the cluster, label and patch its workers, and wait for every node Ready.

        ``cuda_libs``: see :func:`kind_config`.

        Raises:
            KindError: kind failed or a node was not Ready within ``timeout`` seconds.
        """
        self.state_dir.mkdir(parents=True, exist_ok=True)
        config = self.state_dir / "kind-config.yaml"
        base_spec = None
        if cuda_libs is not None:
            if not (cuda_libs / "nvidia").is_dir():
                raise KindError(f"{cuda_libs} has no nvidia/ folder of CUDA libraries")
            spec = subprocess.run(["docker", "run", "--rm", "--entrypoint", "cat", image, "/etc/containerd/cri-base.json"], capture_output=True, text=True, check=True)
            base_spec = self.state_dir / "cri-base-railtrain.json"
            base_spec.write_text(json.dumps(base_spec_with_cuda_libs(json.loads(spec.stdout)), indent=2))
        cfg = kind_config(self.name, workers, image, restrict_oom_score_adj=lacks_cap_sys_resource(), cuda_libs=cuda_libs, base_spec=base_spec)
        config.write_text(yaml.safe_dump(cfg))
        self._kind("create", "cluster", "--name", self.name, "--config", str(config), "--kubeconfig", str(self.kubeconfig), "--retain", timeout=timeout)
        patch = json.dumps({"status": {"capacity": {GPU_RESOURCE: str(gpus_per_node)}}})
        workers_names = self.worker_names()
        self.wait_registered(workers_names, timeout)  # kind returns before every kubelet has registered its Node
        for node in workers_names:
            self.kubectl("patch", "node", node, "--subresource=status", "--type=merge", "-p", patch)
        self.wait_ready(workers + 1, timeout)

    def wait_registered(self, names: Sequence[str], timeout: float) -> None:
        """Poll until a Node object exists for each of ``names``; raises KindError naming the missing ones at the deadline."""
        deadline = time.monotonic() + timeout
        missing = list(names)
        while time.monotonic() < deadline:
            listed = self.kubectl("get", "nodes", "-o", "name", check=False).stdout.split()
            missing = [n for n in names if f"node/{n}" not in listed]
            if not missing:
                return
            time.sleep(1)
        raise KindError(f"kind cluster {self.name}: nodes not registered after {timeout:.0f}s: {', '.join(missing)}")

    def wait_ready(self, count: int, timeout: float) -> None:
        """Poll until ``count`` nodes report Ready; raises KindError naming the laggards at the deadline."""
        deadline = time.monotonic() + timeout
        not_ready: list[str] = []
        while time.monotonic() < deadline:
            items = json.loads(self.kubectl("get", "nodes", "-o", "json").stdout)["items"]
            not_ready = [
                n["metadata"]["name"] for n in items
                if not any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
            ]  # fmt: skip
            if len(items) >= count and not not_ready:
                return
            time.sleep(1)
        raise KindError(f"kind cluster {self.name}: nodes not Ready after {timeout:.0f}s: {', '.join(not_ready) or 'too few nodes'}")

    def load_images(self, images: Iterable[str], nodes: Sequence[str] = ()) -> None:
        """Copy local Docker images into the nodes' containerd (``kind load docker-image``)."""
        images = list(images)
        if images:
            extra = ["--nodes", ",".join(nodes)] if nodes else []
            self._kind("load", "docker-image", "--name", self.name, *extra, *images, timeout=1800)

    def install_crds(self, files: Iterable[Path]) -> None:
        """Apply the CRD files and wait until each is Established."""
        for f in files:
            self.kubectl("apply", "--server-side", "-f", str(f))
            crd = yaml.safe_load(f.read_text())["metadata"]["name"]
            self.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")

    def delete(self) -> bool:
        """Delete the cluster and its state folder; returns whether it existed."""
        existed = self.exists()
        if existed:
            self._kind("delete", "cluster", "--name", self.name, "--kubeconfig", str(self.kubeconfig), timeout=300)
        shutil.rmtree(self.state_dir, ignore_errors=True)
        return existed


def kind_up(
    workers: int = 3, gpus_per_node: int = 8, name: str = "railtrain", images: Sequence[str] = (), cuda_libs: Path | None = None, quiet: bool = True,
) -> Path:
    """Start (or reuse) the kind cluster ``name``: node image, cluster, labels, GPUs, images, CRD.

    Args:
        workers: worker nodes (>= 1), besides the control plane.
        gpus_per_node: fake ``nvidia.com/gpu`` capacity of each worker (>= 0).
        name: kind cluster name.
        images: local Docker images to load into every worker.
        cuda_libs: a host folder with ``nvidia/`` to give every container on
            the workers (:func:`kind_config`); only when the cluster is created.
        quiet: keep the image builds' progress off stderr.

    Returns:
        Path of the cluster's kubeconfig.

    Raises:
        ValueError: ``workers`` < 1 or ``gpus_per_node`` < 0.
        KindError: Docker is unavailable, a build failed, or the cluster did
            not come up; a cluster of the same name with a different number
            of workers is already running.
    """
    if workers < 1 or gpus_per_node < 0:
        raise ValueError(f"workers must be >= 1 and gpus_per_node >= 0, got {workers}, {gpus_per_node}")
    image = ensure_node_image(quiet=quiet)
    cluster = KindCluster(name)
    if cluster.exists():
        existing = len(cluster.worker_names())
        if existing != workers:
            raise KindError(f"kind cluster {name!r} is already running with {existing} workers, not {workers}; run `railtrain dev down --kind` first")
        if not cluster.kubeconfig.exists():
            cluster.state_dir.mkdir(parents=True, exist_ok=True)
            cluster.kubeconfig.write_text(cluster._kind("get", "kubeconfig", "--name", name).stdout)
    else:
        try:
            cluster.create(workers, gpus_per_node, image, cuda_libs)
        except BaseException:
            cluster.delete()
            raise
    from .dev import _crd_files

    cluster.load_images(images, cluster.worker_names())
    cluster.install_crds(_crd_files())
    return cluster.kubeconfig


def kind_down(name: str = "railtrain") -> bool:
    """Delete the kind cluster ``name``; returns whether it existed."""
    return KindCluster(name).delete()
