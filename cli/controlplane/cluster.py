"""A real Kubernetes control plane on this machine, with KWOK for nodes.

:class:`LocalCluster` drives ``kwokctl create cluster --runtime binary``: etcd,
kube-apiserver, kube-controller-manager, kube-scheduler and the kwok
controller (``--manage-all-nodes``) run as local processes, each in its own
session with a pidfile, all under one state folder
``<cache>/clusters/<name>/`` (pki, etcd data, logs, pids, kubeconfig.yaml).
Ports are free loopback ports picked by the kernel, and starts are serialised
by a lock, so several clusters (a test session, a ``dev up``) run side by side.

Pods are simulated by KWOK Stages: kwok's defaults (bound pods become Running)
plus railtrain's (``stages.yaml``): patching the label :data:`LABEL_KWOK_EXIT`
on a Running pod ends it, ``"0"`` as Succeeded, ``"<n>"`` as Failed with exit
code ``n`` and the termination message from :data:`ANNOTATION_KWOK_MESSAGE`;
:data:`LABEL_KWOK_TRAINER_EXIT` ends only its ``trainer`` container (the pod
stays Running with its sidecars, as a kubelet reports a pod whose sidecar runs on);
labelling a Node :data:`LABEL_KWOK_NOT_READY` ``"true"`` makes KWOK report it
``Ready=False`` (reason ``KubeletNotReady``) and stop updating its status until
the label goes, when KWOK reports it Ready again.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TypeVar

import yaml

from .binaries import cache_root, ensure_binaries
from .kwokctl import kwokctl_config
from .nodes import gpu_node, node_schedulable, ordinal_ip
from .processes import kill_processes, pid_alive

LABEL_KWOK_EXIT = "railtrain.dev/kwok-exit"
"""Pod label a test patches to end a Running pod: ``"0"`` succeeds, else fails."""
ANNOTATION_KWOK_MESSAGE = "railtrain.dev/kwok-message"
"""Pod annotation: the termination message KWOK reports when the pod ends."""
LABEL_KWOK_TRAINER_EXIT = "railtrain.dev/kwok-trainer-exit"
"""Pod label a test patches to end only the Running pod's ``trainer`` container with that exit code; its sidecars keep running and so does the pod."""
LABEL_KWOK_NOT_READY = "railtrain.dev/kwok-not-ready"
"""Node label a test sets to ``"true"`` to make a Node NotReady (and removes to make it Ready again)."""
LABEL_KWOK_EVICT = "railtrain.dev/kwok-evict"
"""Pod label: ``"limit"`` has KWOK's kubelet evict the Running pod for exceeding its own limits (stages.yaml)."""
KWOK_REFUSING_NODES = ("refuses-gpu-0", "refuses-gpu-1")
"""Node names whose KWOK kubelet refuses every pod at admission (OutOfnvidia.com/gpu; stages.yaml)."""

_WATCHDOG_PID = "railtrain-watchdog.pid"

T = TypeVar("T")


class ClusterError(RuntimeError):
    """The local control plane failed to start, or stopped answering."""


def stop_process(proc: "subprocess.Popen[Any] | None", grace: float = 20.0) -> None:
    """End a child process politely: SIGTERM, then SIGKILL if it is still there after ``grace`` seconds.

    Args:
        proc: the child (``None`` or one already ended: nothing to do).
        grace: seconds between SIGTERM and SIGKILL.

    Raises:
        subprocess.TimeoutExpired: the child outlived SIGKILL by 10 s (a process stuck in the kernel).
    """
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def wait_until(check: Callable[[], T], timeout: float, what: str, interval: float = 0.2) -> T:
    """Poll ``check()`` until it returns a truthy value, with a deadline.

    Exceptions raised by ``check`` count as "not yet" (the last one is chained
    to the timeout), except ``TypeError``/``AttributeError``/``NameError``
    (bugs) and :class:`ClusterError` (hopeless), which propagate at once.

    Returns:
        The first truthy value ``check()`` returned.

    Raises:
        TimeoutError: ``timeout`` seconds passed; the message names ``what``.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except (TypeError, AttributeError, NameError, ClusterError):
            raise  # a bug in check(), or a cluster that cannot become ready
        except Exception as exc:  # noqa: BLE001 - anything else is "not yet"
            last_error = exc
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}") from last_error
        time.sleep(interval)


START_TRIES = 3
"""How many times :meth:`LocalCluster.start` tries when a component's port was taken before it listened."""
PORT_TAKEN = "address already in use"
"""The error a component logs when its port was taken (Go's ``net.Listen``)."""


class LocalCluster:
    """One local control plane named ``name``, with its state in ``state_dir``.

    Args:
        name: cluster name; the state folder is ``<state_root>/clusters/<name>``.
        state_root: defaults to :func:`~railtrain.cli.controlplane.binaries.cache_root`.
        bin_dir: folder with the binaries; defaults to :func:`ensure_binaries`.
        node_monitor_grace_period_s: kube-controller-manager's
            ``--node-monitor-grace-period``; long, so that a busy machine
            delaying KWOK's heartbeats never turns nodes NotReady (or evicts
            their pods). Tests that need a NotReady node label it
            :data:`LABEL_KWOK_NOT_READY`.

    Raises:
        ValueError: ``name`` is not a DNS-1123 label (it names folders,
            kubeconfig contexts and process arguments).
    """

    def __init__(
        self,
        name: str = "railtrain",
        *,
        state_root: Path | None = None,
        bin_dir: Path | None = None,
        node_monitor_grace_period_s: int = 3600,
    ) -> None:
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name):
            raise ValueError(f"cluster name must be a DNS-1123 label, got {name!r}")
        self.name = name
        self.state_root = Path(state_root) if state_root else cache_root()
        self.state_dir = self.state_root / "clusters" / name
        self._bin_dir = Path(bin_dir) if bin_dir else None
        self.node_monitor_grace_period_s = node_monitor_grace_period_s

    def __repr__(self) -> str:
        return f"LocalCluster({self.name!r}, state_dir={str(self.state_dir)!r})"

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def kubeconfig(self) -> Path:
        """Path of the admin kubeconfig (client certificates, 127.0.0.1 server)."""
        return self.state_dir / "kubeconfig.yaml"

    @property
    def bin_dir(self) -> Path:
        """Folder of the control-plane binaries (built on first use)."""
        if self._bin_dir is None:
            self._bin_dir = ensure_binaries()
        return self._bin_dir

    # --- lifecycle -----------------------------------------------------------
    def start(self, timeout: float = 180.0, owner_pid: int | None = None) -> "LocalCluster":
        """Create and start the cluster, replacing any leftover of the same name.

        Waits until ``/readyz`` answers ok and the ``default`` ServiceAccount
        exists in namespace ``default`` (the ServiceAccount admission plugin
        rejects pods in a namespace until its ``default`` account exists).

        Args:
            timeout: seconds for kwokctl plus the readiness wait.
            owner_pid: if given, a detached watchdog stops the cluster as soon
                as that process is gone, even if it dies without cleaning up.

        Returns:
            ``self``.

        Raises:
            ClusterError: kwokctl failed or the cluster never became ready;
                its processes are killed, its state folder is kept, and the
                message carries the tail of each component's log.
            railtrain.cli.controlplane.binaries.BinariesError: no binaries.

        A component that could not bind its port ("address already in use": the kernel gave kwokctl a free port,
        and an outgoing connection of another process took it before the component listened) is not this
        cluster's fault: the start is tried again with new ports, up to :data:`START_TRIES` times.
        """
        for attempt in range(1, START_TRIES + 1):
            try:
                return self._start_once(timeout, owner_pid)
            except ClusterError as exc:
                if attempt == START_TRIES or PORT_TAKEN not in str(exc):
                    raise

    def _start_once(self, timeout: float, owner_pid: int | None) -> "LocalCluster":
        """One try of :meth:`start`."""
        bin_dir = self.bin_dir
        self.stop()
        self.state_dir.mkdir(parents=True)
        if owner_pid is not None:
            self._start_watchdog(owner_pid)
        config = self.state_dir / "railtrain-kwokctl.yaml"
        deadline = time.monotonic() + timeout
        # One start at a time on this machine: a port is only taken once its
        # component listens, so two starts must not pick ports in between.
        lock_path = cache_root() / "controlplane" / ".start.lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(lock_path, "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                config.write_text(yaml.safe_dump_all(kwokctl_config(bin_dir, self.node_monitor_grace_period_s), sort_keys=False))
                proc = self._kwokctl("create", "cluster", "--config", str(config), "--timeout", f"{int(timeout)}s", "--kubeconfig", "")
                if proc.returncode != 0:
                    raise ClusterError(f"kwokctl create cluster failed:\n{proc.stdout}")
                try:
                    wait_until(self._ready, max(1.0, deadline - time.monotonic()), "the API server and the default ServiceAccount")
                except TimeoutError as exc:
                    raise ClusterError(f"{self} did not become ready: {exc}") from exc
        except ClusterError as exc:
            # Kill the processes but keep the state folder: its logs explain the failure.
            kill_processes(list(self.pids().values()), marker=str(self.state_dir))
            exc.args = (f"{exc.args[0]}\nlogs in {self.state_dir / 'logs'}:\n{self.logs_tail()}",)
            raise
        return self

    def stop(self) -> None:
        """Stop every process of the cluster and delete its state folder.

        Asks kwokctl first (when this object knows the binaries), then SIGKILLs
        the process group of every pidfile left, so it also works from a fresh
        process (``dev down``). Safe to call on a cluster that is not running.
        """
        if not self.state_dir.exists():
            return
        pids = list(self.pids().values())
        if self._bin_dir is not None and (self.state_dir / "kwok.yaml").exists():
            # --kubeconfig names the file to drop the cluster's context from;
            # kwokctl refuses an empty one here, so point it at the cluster's own.
            self._kwokctl("delete", "cluster", "--kubeconfig", str(self.kubeconfig))
        try:
            pids.append(int((self.state_dir / _WATCHDOG_PID).read_text()))
        except (OSError, ValueError):
            pass
        kill_processes(pids, marker=str(self.state_dir))
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def pids(self) -> dict[str, int]:
        """Component name -> pid, from the pidfiles kwokctl wrote."""
        out = {}
        for path in sorted((self.state_dir / "pids").glob("*.pid")):
            try:
                out[path.stem] = int(path.read_text().strip())
            except (OSError, ValueError):
                continue
        return out

    def is_running(self) -> bool:
        """Whether the state folder exists and every component process is alive."""
        pids = self.pids()
        return bool(pids) and self.kubeconfig.exists() and all(pid_alive(p) for p in pids.values())

    # --- clients -------------------------------------------------------------
    def api_client(self):
        """A new ``kubernetes.client.ApiClient`` configured from :attr:`kubeconfig`."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        """Run the cluster's own kubectl against this cluster; returns the completed process.

        Raises:
            ClusterError: ``check`` is true and kubectl failed; the message
                carries its stderr (for example the API server's rejection).
        """
        proc = subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
        )
        if check and proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} exited with {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def install_crds(self, paths: Iterable[Path], timeout: float = 60.0) -> list[str]:
        """Apply every CustomResourceDefinition in ``paths`` and wait until each is Established.

        Other kinds of documents in those files are skipped. Uses server-side
        apply, so large schemas do not hit the last-applied annotation limit.
        Install CRDs once per cluster: the garbage collector re-reads API
        discovery only every 30 s, so fresh kinds are not collected at once.

        Returns:
            The names of the CRDs applied.

        Raises:
            ClusterError: the API server rejected a CRD (the message says why).
            TimeoutError: a CRD was not Established within ``timeout`` s.
        """
        from kubernetes import client

        crds = [
            doc
            for path in paths
            for doc in yaml.safe_load_all(Path(path).read_text())
            if doc and doc.get("kind") == "CustomResourceDefinition"
        ]
        if not crds:
            return []
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(crds))
        names = [crd["metadata"]["name"] for crd in crds]
        with self.api_client() as api:
            ext = client.ApiextensionsV1Api(api)

            def established() -> bool:
                for name in names:
                    conditions = ext.read_custom_resource_definition(name).status.conditions or []
                    if not any(c.type == "Established" and c.status == "True" for c in conditions):
                        return False
                return True

            wait_until(established, timeout, f"CRDs {', '.join(names)} Established")
        return names

    # --- nodes ---------------------------------------------------------------
    def add_gpu_nodes(
        self,
        count: int,
        gpus_per_node: int = 8,
        labels: Mapping[str, str] | None = None,
        name_prefix: str = "gpu-node",
        *,
        timeout: float = 60.0,
        **shape: Any,
    ) -> list[str]:
        """Create ``count`` fake GPU nodes and wait until pods can schedule there.

        Node ``i`` is named ``<name_prefix>-<i>`` and built by
        :func:`~railtrain.cli.controlplane.nodes.gpu_node` with ``index=i``,
        ``gpus=gpus_per_node``, ``labels`` (overriding the defaults
        ``kubernetes.io/hostname``, ``railtrain.dev/rack=<name_prefix>-rack-<k>``
        and ``railtrain.dev/block=<name_prefix>-block-<k>``), a distinct
        InternalIP, and any of its keyword arguments in ``shape``
        (``nodes_per_rack``, ``racks_per_block``, ``cpu``, ``memory``, ``pods``, ``taints``).

        Returns:
            The node names, in index order.

        Raises:
            ValueError: ``count`` < 1, or a bad node shape.
            the kubernetes client's API error: a node could not be created
                (409 if a node of that name exists).
            TimeoutError: the nodes were not Ready and free of the
                ``node.kubernetes.io/not-ready`` taint within ``timeout`` s.
        """
        from kubernetes import client

        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        names = [f"{name_prefix}-{i}" for i in range(count)]
        shape.setdefault("topology_prefix", f"{name_prefix}-")
        with self.api_client() as api:
            core = client.CoreV1Api(api)
            first = len(core.list_node().items)
            manifests = [
                gpu_node(name, i, gpus=gpus_per_node, labels=labels, internal_ip=ordinal_ip(first + i), **shape)
                for i, name in enumerate(names)
            ]
            for manifest in manifests:
                core.create_node(manifest)

            def all_schedulable() -> bool:
                nodes = {n.metadata.name: n for n in core.list_node().items}
                return all(name in nodes and node_schedulable(nodes[name]) for name in names)

            wait_until(all_schedulable, timeout, f"nodes {names[0]}..{names[-1]} Ready and untainted")
        return names

    # --- internals -----------------------------------------------------------
    def _kwokctl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.bin_dir / "kwokctl"), *args, "--name", self.name],
            env={**os.environ, "KWOK_WORKDIR": str(self.state_root)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            stdin=subprocess.DEVNULL,
        )

    def _ready(self) -> bool:
        from kubernetes import client

        dead = [name for name, pid in self.pids().items() if not pid_alive(pid)]
        if dead:
            raise ClusterError(f"{', '.join(dead)} exited during startup")
        if self.kubectl("get", "--raw", "/readyz", check=False).stdout.strip() != "ok":
            return False
        with self.api_client() as api:
            client.CoreV1Api(api).read_namespaced_service_account("default", "default")
        return True

    def _start_watchdog(self, owner_pid: int) -> None:
        proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "railtrain.cli.controlplane.watchdog", str(owner_pid), str(self.state_dir)],
            cwd="/",
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        (self.state_dir / _WATCHDOG_PID).write_text(str(proc.pid))

    def logs_tail(self, lines: int = 15) -> str:
        """The last ``lines`` lines of every component log, for error messages."""
        parts = []
        for log in sorted((self.state_dir / "logs").glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.name}\n" + "\n".join(tail))
        return "\n".join(parts)
