"""Trainer runs on this host for the trainer tests: the shared flags and helpers, and, for the
checkpoint-tier tests, gangs of simulated nodes.

Each "node" is one ``torchrun`` configured only by the pod contract
(``contract.pod_env``), as the operator launches it, with its own memory-tier
and local-tier directories, so node-local files really are invisible to the
other node. Memory-tier directories live under ``/dev/shm`` (tmpfs), like a
node's RAM.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Iterator

from railtrain.cli.local import free_ports
from railtrain.crds import contract

DATA = "pkg://email/*.py"
COMMON = ["--data", DATA, "--preset", "tiny", "--seq-len", "64", "--batch-size", "8", "--warmup-steps", "8", "--threads", "1"]
RUN_TIMEOUT_S = 240
SHM = Path("/dev/shm") if Path("/dev/shm").is_dir() else None


@dataclass
class Run:
    """Outcome of one run: exit codes, node 0's output, loss per step."""

    rcs: list[int]
    stdout: str
    losses: dict[int, float]
    outputs: list[str] = field(default_factory=list)


@dataclass
class Layout:
    """Where a gang keeps its checkpoints: ``<root>/persistent`` shared, ``memory/node-<i>`` and ``local/node-<i>`` per node.

    ``memory_root`` is a tmpfs directory when the host has one.
    """

    root: Path
    memory_root: Path

    @classmethod
    def create(cls, root: Path) -> "Layout":
        memory = (SHM / f"railtrain-test-{uuid.uuid4().hex[:10]}") if SHM else root / "memory"
        return cls(root, memory)

    @property
    def persistent(self) -> Path:
        return self.root / "persistent"

    def memory(self, node: int) -> Path:
        return self.memory_root / f"node-{node}"

    def local(self, node: int) -> Path:
        return self.root / "local" / f"node-{node}"

    def copy_to(self, root: Path, skip_steps: tuple[int, ...] = ()) -> "Layout":
        """A copy of every tier under a new root (``skip_steps`` left out): one scenario's starting point."""
        other = Layout.create(root)
        ignore = shutil.ignore_patterns(*(f"step-{s}" for s in skip_steps))
        for src, dst in ((self.root / "persistent", other.persistent), (self.root / "local", other.root / "local"), (self.memory_root, other.memory_root)):
            if src.exists():
                shutil.copytree(src, dst, ignore=ignore)
        return other

    def remove(self) -> None:
        shutil.rmtree(self.memory_root, ignore_errors=True)


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without the pod contract's variables, plus ``extra``."""
    names = {v for k, v in vars(contract).items() if k.startswith("ENV_")}
    env = {k: v for k, v in os.environ.items() if k not in names}
    env.update(extra or {})
    return env


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, below the kernel's ephemeral range (:func:`railtrain.cli.local.free_ports`):
    a port the kernel hands out (bind to port 0) may be taken by one of gloo's outgoing connections, from this or
    another xdist worker, before torchrun binds it (EADDRINUSE, seen in a fresh-clone run of stop 36)."""
    return free_ports(1)[0]


def read_losses(path: Path) -> dict[int, float]:
    """Loss per step from a ``--metrics-file`` (JSON lines); empty if the file does not exist."""
    if not path.exists():
        return {}
    return {rec["step"]: rec["loss"] for rec in map(json.loads, path.read_text().splitlines())}


def max_diff(a: dict[int, float], b: dict[int, float], steps: range) -> float:
    """The largest absolute difference of two runs' losses over ``steps`` (nats); KeyError if a run lacks a step."""
    return max(abs(a[s] - b[s]) for s in steps)


@dataclass(frozen=True)
class Tiers:
    """Which tiers a run uses: ``(interval, keep)`` each, ``None`` for off."""

    memory: tuple[int, int] | None = None
    local: tuple[int, int] | None = None
    persistent: tuple[int, int] | None = None


def pod_template(layout: Layout, tiers: Tiers, nnodes: int, nproc: int, fsdp: bool = True) -> contract.PodEnvironment:
    """Node 0's pod contract; :func:`node_env` adapts it to each node."""
    world = nnodes * nproc
    env = contract.PodEnvironment(
        job_name="tiers", namespace="test", nnodes=nnodes, node_rank=0, procs_per_node=nproc, rdzv_addr="127.0.0.1",
        rdzv_port=free_port(), parallelism=contract.format_parallelism(1, world, 1, 1) if fsdp else contract.format_parallelism(world, 1, 1, 1),
        metrics_port=0,
    )  # fmt: skip
    if tiers.persistent:
        env = replace(env, checkpoint_dir=str(layout.persistent), checkpoint_interval=tiers.persistent[0], checkpoint_keep=tiers.persistent[1])
    if tiers.memory:
        env = replace(env, checkpoint_memory_dir="set per node", checkpoint_memory_interval=tiers.memory[0], checkpoint_memory_keep=tiers.memory[1])
    if tiers.local:
        env = replace(env, checkpoint_local_dir="set per node", checkpoint_local_interval=tiers.local[0], checkpoint_local_keep=tiers.local[1])
    return env


def node_env(pod: contract.PodEnvironment, layout: Layout, node: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of node ``node``: the contract with its own node-local directories."""
    mine = replace(
        pod,
        node_rank=node,
        checkpoint_memory_dir=str(layout.memory(node)) if pod.checkpoint_memory_dir else "",
        checkpoint_local_dir=str(layout.local(node)) if pod.checkpoint_local_dir else "",
    )
    return clean_env(contract.pod_env(mine) | (extra or {}))


def torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "-m", "railtrain.trainer", *COMMON, *args]


class Gang:
    """The torchrun processes of one run, one per node, started together.

    Node 0's output (where rank 0 logs) comes through a pipe, read as it
    arrives; the other nodes write to files in ``workdir``.
    """

    def __init__(self, workdir: Path, pod: contract.PodEnvironment, layout: Layout, args: list[str], extra: dict[str, str] | None = None) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.metrics = workdir / f"metrics-{uuid.uuid4().hex[:6]}.jsonl"
        self.logs: list[IO[str]] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        self._out = b""
        for node in range(pod.nnodes):
            log = (workdir / f"node{node}-{self.metrics.stem}.log").open("w+")
            cmd = torchrun(*args, "--metrics-file", str(self.metrics))
            sink: int | IO[str] = subprocess.PIPE if node == 0 else log
            self.procs.append(subprocess.Popen(cmd, cwd=workdir, env=node_env(pod, layout, node, extra), stdout=sink, stderr=subprocess.STDOUT))
            self.logs.append(log)

    def output(self, node: int = 0) -> str:
        if node == 0:
            return self._out.decode(errors="replace")
        self.logs[node].flush()
        return Path(self.logs[node].name).read_text()

    def _read(self, timeout: float | None) -> bool:
        """Append what node 0 printed within ``timeout`` seconds; False at end of output."""
        pipe = self.procs[0].stdout
        assert pipe is not None
        ready, _, _ = select.select([pipe], [], [], timeout)
        if not ready:
            return True
        chunk = os.read(pipe.fileno(), 1 << 16)
        self._out += chunk
        return bool(chunk)

    def wait(self) -> Run:
        while self._read(RUN_TIMEOUT_S):
            pass
        rcs = [p.wait(timeout=RUN_TIMEOUT_S) for p in self.procs]
        outputs = [self.output(n) for n in range(len(self.procs))]
        for log in self.logs:
            log.close()
        return Run(rcs, outputs[0], read_losses(self.metrics), outputs)

    def wait_for(self, text: str, deadline_s: float = RUN_TIMEOUT_S) -> None:
        """Read node 0's output as it comes until it contains ``text`` (an AssertionError after ``deadline_s``)."""
        end = time.monotonic() + deadline_s
        while text not in self.output(0):
            if time.monotonic() > end or not self._read(max(0.0, end - time.monotonic())):
                raise AssertionError(f"{text!r} did not appear:\n{self.output(0)}")

    def kill(self) -> None:
        """SIGKILL every process of the gang, torchrun and its workers (each in its own session), as if the nodes died."""
        for proc in self.procs:
            for pid in [*descendants(proc.pid), proc.pid]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in self.procs:
            proc.wait(timeout=30)
        while self._read(5):
            pass
        for log in self.logs:
            log.close()


def run_gang(workdir: Path, pod: contract.PodEnvironment, layout: Layout, *args: str) -> Run:
    """Start a gang, wait for it, and insist every node exited 0."""
    run = Gang(workdir, pod, layout, list(args)).wait()
    assert run.rcs == [0] * pod.nnodes, f"nodes exited {run.rcs}:\n" + "\n----\n".join(run.outputs)
    return run


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc), children first."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []

    def walk(p: int) -> Iterator[int]:
        for child in parents.get(p, []):
            yield from walk(child)
            yield child

    out.extend(walk(pid))
    return out


def scrape(port: int) -> dict[str, float]:
    """``/metrics`` of ``127.0.0.1:port`` as ``{"name{labels}": value}``."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            out[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
    return out
