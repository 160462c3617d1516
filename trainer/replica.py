"""Replica groups (``spec.faultTolerance``): the data-parallel dimension across groups on torchft's Manager.

A job with replica groups runs one torchrun world per group (DDP inside it, as without groups). Across groups,
torchft (PyPI ``torchft``, pinned by the ``ft`` extra) keeps a quorum of live groups at every step through one
Lighthouse: :class:`ReplicaSync` holds this process's ``torchft.Manager`` and gives the trainer four calls per step:

1. :meth:`ReplicaSync.start_step`: the step's quorum (synchronous). A group that is behind the quorum's newest step
   heals here: it fetches a live peer's model, optimizer and step over torchft's HTTP transport and loads them
   (:meth:`ReplicaSync.state_dict` / ``load_state_dict`` callbacks). No quorum of ``minReplicas`` groups within
   ``quorumTimeoutSeconds`` raises :class:`~railtrain.trainer.health.verdict.HealthVerdict` ``QuorumLost``.
   A process's first quorum waits longer, ``quorumTimeoutSeconds`` plus the gang's start-up allowance
   (``hang_warmup_s``): the groups' pods start at different times (scheduling, image pulls, torch's import), and a
   group that is merely slow to start must not fail the job before it ever trained. The hang watchdog is told how
   long a quorum may last (:meth:`ReplicaSync.longest_start_s`): a group waiting for its peers is not hung.
2. :meth:`ReplicaSync.allreduce_gradients`: each gradient averaged over the groups in the quorum, one
   ``manager.allreduce`` per gradient. torchft's own ``DistributedDataParallel`` wrapper is not used: in a drill
   on these CPUs it crashed the surviving groups when a peer died (docs/fault-tolerance.md;
   ``assert fut._fut`` in ``torchft/ddp.py``), while per-gradient ``manager.allreduce`` survived it; the tests
   of ``tests/cli/test_local_replica_groups.py`` kill a group under this path.
3. :meth:`ReplicaSync.should_commit`: every group votes; the optimizer steps only when it returns True. A step
   whose all-reduce lost a peer returns False and the trainer runs the same step again (no step is skipped).

4. :meth:`ReplicaSync.gather`: at the health checks' fingerprint interval, each rank's parameter fingerprint is
   compared with its counterparts in the other groups (the SDC check across groups,
   :meth:`~railtrain.trainer.health.monitor.HealthMonitor.check_fingerprints`).

Any layout inside a group heals rank by rank: the groups' layouts are identical, so rank ``r`` of every group holds
the same part of the model (an FSDP or tensor-parallel shard, a pipeline stage, the replica a context-parallel rank
keeps), and the gradient average, a heal's state and the fingerprints carry rank ``r``'s local part (:func:`local`).

May import torch and torchft (imported only when a job has replica groups); never kopf.
"""

from __future__ import annotations

import datetime
import os
import socket
from typing import Any, Callable, Mapping

import torch
from torch import nn

from railtrain.crds import verdicts
from railtrain.crds.replica_groups import ReplicaGroupEnv
from railtrain.trainer.health.verdict import HealthVerdict

COLLECTIVE_TIMEOUT_S = 60.0
"""Seconds a cross-group all-reduce, ``should_commit`` or a heal's transfer may take (torchft's ``timeout``; its
own variable ``TORCHFT_TIMEOUT_SEC`` wins). A peer that dies mid-all-reduce usually fails it at once (its
connections reset); this bounds the case where it hangs instead."""


TIMEOUT_ENV = "TORCHFT_TIMEOUT_SEC"
"""torchft's own variable for its ``timeout``; railtrain's process group across groups takes it too (:func:`collective_timeout`)."""


def collective_timeout(environ: Mapping[str, str]) -> float:
    """Seconds of :data:`COLLECTIVE_TIMEOUT_S`, or ``TORCHFT_TIMEOUT_SEC`` when set (a positive number), for both the
    Manager and the gloo process group across groups (the group's gloo timeout is what ends an all-reduce on a stale
    process group: docs/fault-tolerance.md, "The Lighthouse lost").

    Raises:
        ValueError: ``TORCHFT_TIMEOUT_SEC`` is set but not a positive number (one sentence naming it).
    """
    raw = environ.get(TIMEOUT_ENV)
    if not raw:
        return COLLECTIVE_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if value <= 0:
        raise ValueError(f"{TIMEOUT_ENV} must be a positive number of seconds, got {raw!r}")
    return value


LIGHTHOUSE_RETRY_S = 1.0
"""About how often a group's manager asks again for a quorum its Lighthouse did not answer (the Lighthouse was lost
mid-request and is being restarted): torchft's manager server sleeps ``quorum_timeout / (retries + 1)`` after a failed
request, then reconnects and asks again (:func:`quorum_retries`)."""


def quorum_retries(quorum_timeout_seconds: float) -> int:
    """torchft's ``quorum_retries`` for a quorum timeout: one retry per :data:`LIGHTHOUSE_RETRY_S` of it (at least 1).
    The Manager is built with the longest timeout it will use (its first quorum's): later, shorter quorums then
    ask again more often than once a second, never less.

    torchft's default is 0: a quorum request the Lighthouse dropped (it died mid-request) is then never answered, and
    every group waits out ``quorumTimeoutSeconds`` although a new Lighthouse serves within seconds (measured:
    docs/fault-tolerance.md, "The Lighthouse lost"). With retries the manager server sleeps
    ``quorum_timeout / (retries + 1)`` (about 1 s here), reconnects and asks the new Lighthouse; the rank still gives
    up at ``quorumTimeoutSeconds`` (``QuorumLost``), whatever the retries.
    """
    return max(1, int(quorum_timeout_seconds / LIGHTHOUSE_RETRY_S))


def group_data_slice(env: ReplicaGroupEnv, dp_rank: int, dp_degree: int) -> tuple[int, int]:
    """This rank's data-parallel ``(rank, degree)`` over the whole job: group ``g``'s ranks take slices
    ``g × dp_degree … (g + 1) × dp_degree − 1`` of ``R × dp_degree``, so no two groups train on the same batch.

    Args:
        env: the replica-group variables.
        dp_rank, dp_degree: the rank's data-parallel coordinate and degree inside its group.
    """
    return env.group * dp_degree + dp_rank, env.groups * dp_degree


class ReplicaSync:
    """This process's torchft Manager for the replica dimension (see the module's docstring for the per-step calls).

    Args:
        env: the replica-group variables (:func:`railtrain.crds.replica_groups.read_replica_group_env`).
        rank, world_size: this process's rank and the size of its group's torchrun world.
        state_dict: returns the state a healing peer receives (model, optimizer, step).
        load_state_dict: loads such a state (called on the training thread by torchft, during :meth:`start_step`).
        log: prints one line (the trainer's rank-0 log).
        environ: the process environment (``MASTER_ADDR``/``MASTER_PORT`` of the group's torchrun store).
        start_allowance_s: seconds this process's first quorum waits on top of ``quorumTimeoutSeconds`` for the
            other groups to start (the trainer passes the health settings' ``hang_warmup_s``, the gang's own
            start-up allowance; 600 s by default).

    Raises:
        ImportError: torchft is not installed (``pip install 'railtrain[ft]'``).
    """

    def __init__(self, env: ReplicaGroupEnv, rank: int, world_size: int, state_dict: Callable[[], dict[str, Any]],
                 load_state_dict: Callable[[dict[str, Any]], None], log: Callable[[str], None],
                 environ: Mapping[str, str] = os.environ, *, start_allowance_s: float) -> None:  # fmt: skip
        try:
            from torchft import Manager
            from torchft.process_group import ProcessGroupGloo
        except ImportError as err:
            raise ImportError(f"spec.faultTolerance needs torchft: pip install 'railtrain[ft]' ({err})") from None
        self.env = env
        self.log = log
        self.healed = 0
        """Times this process loaded a peer's state (its group was behind the quorum's newest step)."""
        self.retried = 0
        """Steps run again because ``should_commit`` said no (a peer died mid-step, or too few groups)."""
        self.start_allowance_s = float(start_allowance_s)
        self.quorums = 0
        """Quorums this process took part in (0: its first is still to come, and gets the start-up allowance)."""
        self._store = None
        store_addr, store_port = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT")
        if not store_addr or not store_port:  # one process without torchrun: its own store for torchft
            from torch.distributed import TCPStore

            self._store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
            store_addr, store_port = "127.0.0.1", str(self._store.port)
        self.collective_timeout_s = collective_timeout(environ)
        timeout = datetime.timedelta(seconds=self.collective_timeout_s)
        self._user_load = load_state_dict
        host = advertised_host(environ)
        self.manager = Manager(
            hostname=host,  # the name the other groups' Managers reach this one by (its address in the quorum)
            checkpoint_transport=_http_transport(timeout, host),  # a heal's state is served at that name too
            pg=ProcessGroupGloo(timeout=timeout),
            load_state_dict=self._load,
            state_dict=state_dict,
            min_replica_size=env.min_replicas,
            use_async_quorum=False,  # the quorum (and a heal) completes before the step's forward
            timeout=timeout,
            quorum_timeout=datetime.timedelta(seconds=env.quorum_timeout_seconds),
            # a Lighthouse lost mid-request: ask the new one about every second, through the first quorum's longer wait too
            quorum_retries=quorum_retries(env.quorum_timeout_seconds + self.start_allowance_s),
            connect_timeout=datetime.timedelta(seconds=max(10, min(60, env.quorum_timeout_seconds))),
            rank=rank,
            world_size=world_size,
            store_addr=store_addr,
            store_port=int(store_port),
            lighthouse_addr=env.lighthouse,
            replica_id=f"replica_group_{env.group:05d}",  # zero-padded: torchft orders a quorum's ids as strings
            init_sync=True,  # a group joining at step 0 behind a peer heals from it (a resumed job's group 0)
        )

    def _load(self, state: dict[str, Any]) -> None:
        self.healed += 1
        self._user_load(state)

    def set_step(self, step: int) -> None:
        """Tell the Manager this group's committed step, e.g. after resuming from a checkpoint (before the first quorum)."""
        self.manager.load_state_dict({"step": step, "batches_committed": self.manager.batches_committed()})

    @property
    def step(self) -> int:
        """The Manager's count of committed steps (the trainer's step after a heal)."""
        return self.manager.current_step()

    def quorum_timeout_s(self) -> float:
        """Seconds the next quorum may wait for ``minReplicas`` groups: ``quorumTimeoutSeconds``, plus
        ``start_allowance_s`` for this process's first one."""
        return self.env.quorum_timeout_seconds + (self.start_allowance_s if self.quorums == 0 else 0.0)

    def longest_start_s(self) -> float:
        """The longest :meth:`start_step` may legitimately take, seconds: the quorum's timeout and a heal's transfer
        (the cross-group timeout). The trainer gives the hang watchdog this much for its ``quorum`` phase."""
        return self.quorum_timeout_s() + self.collective_timeout_s

    def start_step(self) -> None:
        """The step's quorum; a heal from a peer when this group is behind (its state is loaded before returning).

        Raises:
            HealthVerdict: ``retryable`` ``QuorumLost``: no quorum of ``minReplicas`` groups within
                :meth:`quorum_timeout_s` (``quorumTimeoutSeconds``; the first quorum adds the start-up allowance).
        """
        healed = self.healed
        timeout_s = self.quorum_timeout_s()
        try:
            self.manager.start_quorum(timeout=datetime.timedelta(seconds=timeout_s))
        except Exception as err:  # torchft raises the Lighthouse's timeout as a plain RuntimeError
            waited = (f"quorumTimeoutSeconds={self.env.quorum_timeout_seconds}" if self.quorums else
                      f"{timeout_s:g} s (quorumTimeoutSeconds={self.env.quorum_timeout_seconds} and {self.start_allowance_s:g} s "
                      f"for the groups to start: its first quorum)")  # fmt: skip
            raise HealthVerdict(
                verdicts.VERDICT_RETRYABLE, verdicts.REASON_QUORUM_LOST,
                f"replica group {self.env.group}: no quorum of spec.faultTolerance.minReplicas={self.env.min_replicas} of "
                f"{self.env.groups} replica groups within {waited} "
                f"({type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else 'no detail'})",
                step=self.step,
            ) from None  # fmt: skip
        self.quorums += 1
        if self.healed > healed:
            self.log(f"replica group {self.env.group}: healed from a peer at step {self.step} "
                     f"(quorum {self.manager.num_participants()} of {self.env.groups} groups)")  # fmt: skip

    def allreduce_gradients(self, model: nn.Module) -> None:
        """Average every gradient of ``model`` over the groups in this step's quorum (one ``manager.allreduce`` each).

        A failure (a peer died) is recorded by torchft, not raised: :meth:`should_commit` then returns False.
        """
        works = [self.manager.allreduce(local(p.grad)) for p in model.parameters() if p.grad is not None]  # an FSDP shard in place
        for work in works:
            work.wait()

    def should_commit(self) -> bool:
        """Whether every group of the quorum finished the step (the optimizer may step); False: run it again."""
        ok = self.manager.should_commit()
        if not ok:
            self.retried += 1
        return ok

    def gather(self, values: list[int]) -> dict[int, list[int]] | None:
        """Gather ``values`` (integers in int64) from this rank's counterpart in every replica group of the current
        quorum: ``{group: their values}``, this group's included. One ``manager.allreduce`` (a sum of one row per
        group, each group filling only its own: an exact gather). Called by every group of the quorum at the same
        committed step (the health checks' fingerprint interval: :meth:`HealthMonitor.check_fingerprints`).

        Returns:
            The values per group, or None when this group is not participating or the all-reduce failed (a peer left
            mid-way; torchft records the error until the next quorum).
        """
        import torch.distributed as dist

        if not self.manager.is_participating():
            return None
        table = torch.zeros(self.env.groups, 1 + len(values), dtype=torch.int64)
        table[self.env.group, 0] = 1
        table[self.env.group, 1:] = torch.tensor(values, dtype=torch.int64)
        self.manager.allreduce(table, reduce_op=dist.ReduceOp.SUM).wait()
        if self.manager.errored() is not None:
            return None
        return {g: table[g, 1:].tolist() for g in range(self.env.groups) if int(table[g, 0]) == 1}

    def writes_checkpoints(self) -> bool:
        """Whether this group writes the job's checkpoints at this step: it is the lowest of the step's quorum
        (torchft's participating replica rank 0, the same on every rank of the group). Exactly one group of a
        quorum is; while group 0 is away the lowest live group writes them, and group 0 again once it is back."""
        return self.manager.participating_rank() == 0

    def participants(self) -> int:
        """Groups in this step's quorum."""
        return self.manager.num_participants()

    def close(self) -> None:
        """Stop the Manager's server and threads (idempotent enough: torchft's shutdown may be called twice)."""
        try:
            self.manager.shutdown(wait=False)
        except Exception:  # noqa: BLE001 - shutting down after a failure must not hide it
            pass


def local(t: torch.Tensor) -> torch.Tensor:
    """``t``'s local part: a ``DTensor``'s own shard (FSDP or tensor parallel; sharing its storage), any other tensor as is.

    Rank ``r`` of every group holds the same shard (the groups' layouts are identical), so a shard is what crosses
    groups: in the gradient average, in a heal, in the fingerprints."""
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def _locals(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return local(value)
    if isinstance(value, dict):
        return {k: _locals(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_locals(v) for v in value)
    return value


def model_state(model: nn.Module, optimizer: torch.optim.Optimizer, step: Callable[[], int]) -> Callable[[], dict[str, Any]]:
    """The state a healing peer receives: ``{"model", "optimizer", "step"}`` of this rank, sharded tensors as their
    local shards (what torchft's transport sends; a callback for :class:`ReplicaSync`)."""
    return lambda: {"model": _locals(model.state_dict()), "optimizer": _locals(optimizer.state_dict()), "step": step()}


def load_model_state(model: nn.Module, optimizer: torch.optim.Optimizer, set_step: Callable[[int], None]) -> Callable[[dict[str, Any]], None]:
    """Loads what :func:`model_state` sent: the peer's weights, optimizer state and step (a callback for :class:`ReplicaSync`).

    Plain tensors load as they are. Under FSDP each parameter's shard is copied into this rank's own shard, and the
    optimizer's per-parameter state is made sharded again like its parameter (``DTensor.from_local`` with the
    parameter's mesh and placements) before ``load_state_dict``.
    """

    def load(state: dict[str, Any]) -> None:
        from torch.distributed.tensor import DTensor

        own = model.state_dict()
        if any(isinstance(v, DTensor) for v in own.values()):
            with torch.no_grad():
                for name, target in own.items():
                    local(target).copy_(state["model"][name])
        else:
            model.load_state_dict(state["model"])
        params = [p for group in optimizer.param_groups for p in group["params"]]
        sent = state["optimizer"]
        rebuilt = {}
        for index, entry in (sent.get("state") or {}).items():
            p = params[int(index)] if int(index) < len(params) else None
            if isinstance(p, DTensor):
                entry = {k: DTensor.from_local(v, p.device_mesh, p.placements, run_check=False)
                         if isinstance(v, torch.Tensor) and v.shape == p.to_local().shape else v for k, v in entry.items()}  # fmt: skip
            rebuilt[index] = entry
        optimizer.load_state_dict({**sent, "state": rebuilt})
        set_step(int(state["step"]))

    return load


def advertised_host(environ: Mapping[str, str]) -> str:
    """The host name this process's Manager and checkpoint server are reached by from the other replica groups.

    In a pod (``KUBERNETES_SERVICE_HOST`` set, as the kubelet sets it in every container) the fully qualified name
    (:func:`socket.getfqdn`: ``<pod>.<job>.<namespace>.svc.cluster.local``, which the kubelet writes into the pod's
    ``/etc/hosts`` because the operator gives each pod its ``hostname`` and the job's headless Service as
    ``subdomain``; cluster DNS resolves it from any pod). The short host name torchft advertises by default (the pod's
    name) resolves nowhere else, so on a cluster a group could neither reach a peer's Manager nor fetch its state to
    heal. Outside a pod: :func:`socket.gethostname`, torchft's default (``railtrain run --local``). Returns a host name.
    """
    if environ.get("KUBERNETES_SERVICE_HOST"):
        fqdn = socket.getfqdn()
        if fqdn and fqdn not in ("localhost", "localhost.localdomain"):
            return fqdn
    return socket.gethostname()


def _http_transport(timeout: datetime.timedelta, host: str) -> Any:
    """torchft's HTTP checkpoint transport (the one its Manager makes by default, same arguments) whose address names
    ``host`` instead of :func:`socket.gethostname` (torchft 0.2.0 hard-codes the latter in ``HTTPTransport.address``;
    this overrides that one method, so the version is pinned: ``railtrain[ft]``)."""
    from torchft.checkpointing.http_transport import HTTPTransport

    class _AdvertisedTransport(HTTPTransport):
        def address(self) -> str:
            return f"http://{host}:{self._server.socket.getsockname()[1]}/checkpoint/"

    return _AdvertisedTransport(timeout=timeout, num_chunks=0)
