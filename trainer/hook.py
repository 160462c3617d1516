"""The per-step hook any PyTorch loop can call (public: :class:`StepHook`): health checks, watchdogs and progress metrics.

Part of the library surface :mod:`railtrain.trainer` (docs/library.md). It wraps the trainer's own detectors
(:class:`~railtrain.trainer.health.monitor.HealthMonitor`: numeric checks with re-execution, straggler timing,
parameter fingerprints and known-answer tests on their schedule, the hang watchdog, injected faults) and its
Prometheus metrics (:class:`~railtrain.trainer.metrics.TrainerMetrics`: step, loss, tokens/s, MFU, which the
operator reads for progress and goodput). A loop calls, per step::

    hook.begin_step(step)                        # before the forward
    ...forward...
    hook.after_forward(step, loss)               # optional: the loss average overlaps the backward
    ...backward, grad norm...
    loss_value, skip = hook.check(step, loss, grad_norm, recompute)   # before optimizer.step()
    if not skip: optimizer.step()
    hook.end_step(step, step_s)                  # after it

With replica groups (``spec.faultTolerance``: the contract's replica-group variables are set; pass ``optimizer=``)
the hook also drives torchft's Manager: ``step = hook.begin_step(step)`` takes the step's quorum (a group behind
it heals from a live peer, and the step returned is the quorum's), ``hook.average_gradients()`` after the
backward averages the gradients over the groups, ``check`` votes (``hook.committed`` False: run the same step
again), and only ``hook.writes_checkpoints`` groups save. examples/own-loop/train.py shows the loop.

A detector's finding raises :class:`~railtrain.trainer.health.verdict.HealthVerdict` (hand it to
:func:`railtrain.trainer.outcome.write_verdict`). A detector's own failure (a bug, an odd model) never ends the
loop: it is logged once per check and counted in ``railtrain_health_internal_errors{check}``, and training goes on.

Imports: torch, prometheus_client (through the metrics), :mod:`railtrain.crds` and the trainer's health and
metrics modules.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from prometheus_client import Counter
from railtrain.crds.process import say
from railtrain.crds.replica_groups import read_replica_group_env
from railtrain.trainer.health.monitor import HealthMonitor
from railtrain.trainer.health.verdict import HealthVerdict
from railtrain.trainer.metrics import TrainerMetrics
from railtrain.trainer.pod_contract import Contract, read_contract
from torch import nn

Reduce = Callable[[torch.Tensor, "torch.Tensor | None"], "tuple[float, list[float] | None]"]
"""``reduce(local_loss, extra) -> (mean loss over the job, sum of extra over ranks or None)``: one collective."""


def _stderr(line: str) -> None:
    say(line)


class StepHook:
    """railtrain's per-step health checks and progress metrics for one rank of any loop.

    Every rank constructs it and calls every method at the same steps (some are collectives when distributed).

    Args:
        model: the model being trained (``nn.Module``; the DDP/FSDP-wrapped one or the plain one). Its forward is
            timed for the straggler check, and injected faults act on it (its first parameter, its output tensor).
        contract: the pod contract (:func:`~railtrain.trainer.pod_contract.read_contract`); default: read now.
        total_steps: the step the run trains to (``railtrain_total_steps``, the operator's progress); 0: unknown.
        tokens_per_step: tokens (or samples) of the global batch per step, for ``railtrain_tokens_per_second``.
        flops_per_token: training FLOPs per token, and ``peak_flops``: peak FLOP/s of one device; both > 0 give MFU.
        coordinates: per global rank, its mesh coordinates (``{"dp_replicate": r, "dp_shard": s, "tp": t, "pp": p,
            "cp": c}``), saying which ranks hold identical parameters (the fingerprint check compares those);
            default: every rank a data-parallel replica (DDP).
        reduce: the loss all-reduce (:data:`Reduce`); default: the mean of every rank's local loss.
        serve_metrics: local rank 0 serves ``/metrics`` on the contract's port (a port taken costs a warning).
        log: prints a line (default: stderr on rank 0).
        optimizer: the loop's optimizer; needed with replica groups (a healing group loads a peer's model and
            optimizer state), ignored without.
        drive_replica_groups: with replica groups, the hook drives torchft (default); False: the loop does it
            itself (the built-in trainer, with its own :class:`~railtrain.trainer.replica.ReplicaSync`).

    Raises:
        ContractError: the contract (or a replica-group variable) is read here and a variable is missing or
            malformed (named).
        ValueError: the job has replica groups and no ``optimizer`` was given.
        ImportError: the job has replica groups and torchft is not installed (``pip install 'railtrain[ft]'``).
    """

    def __init__(
        self, model: nn.Module, contract: Contract | None = None, *, total_steps: int = 0, tokens_per_step: int = 0,
        flops_per_token: float = 0.0, peak_flops: float = 0.0, coordinates: Sequence[Mapping[str, int]] | None = None,
        reduce: Reduce | None = None, serve_metrics: bool = True, log: Callable[[str], None] | None = None,
        optimizer: torch.optim.Optimizer | None = None, drive_replica_groups: bool = True,
    ) -> None:  # fmt: skip
        self.contract = c = contract or read_contract()
        self.log = log or (_stderr if c.rank == 0 else (lambda line: None))
        self.distributed = dist.is_available() and dist.is_initialized()
        self.tokens_per_step = tokens_per_step
        self.reduce = reduce or self._mean_over_ranks
        self.metrics = TrainerMetrics(flops_per_token, peak_flops, c.world_size)
        self.metrics.total_steps.set(total_steps)
        self.internal_errors = Counter("railtrain_health_internal_errors", "Errors inside a health check (reported, training continued), per check.", ["check"], registry=self.metrics.registry)
        self._reported: set[str] = set()
        if serve_metrics and c.metrics_port and c.local_rank == 0:
            try:
                self.metrics.serve(c.metrics_port)
            except OSError as err:  # every node's local rank 0 says so
                _stderr(f"warning: metrics port {c.metrics_port}: {err}; no metrics endpoint")
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        coords = list(coordinates) if coordinates is not None else [{"dp_replicate": r} for r in range(c.world_size)]
        self.monitor = HealthMonitor(
            c.health, c.faults, model, rank=c.rank, world_size=c.world_size, distributed=self.distributed, device=device,
            coordinates=coords, node=c.node, registry=self.metrics.registry, enabled=c.health_enabled, log=self.log,
            settings_file=c.health_file,
        )  # fmt: skip
        self.started = False
        self.loss = float("nan")
        """The last step's loss averaged over the job (:meth:`check`)."""
        self._collective_entered = -1
        self._early: tuple[int, Any, torch.Tensor, bool] | None = None
        """The loss all-reduce :meth:`after_forward` started: (step, work, buffer, carries timing)."""
        self._checked = -1
        self.committed = True
        """Whether the last :meth:`check`'s step may be applied (always without replica groups); False: a group of
        the quorum failed mid-step, so no group applies it: run the same step again."""
        self.replica = None
        """The replica groups' :class:`~railtrain.trainer.replica.ReplicaSync` (torchft's Manager), or None."""
        self._plain = getattr(model, "module", model)  # under DDP the parameters are the wrapped module's
        self._replica_started = False
        groups = read_replica_group_env(os.environ) if drive_replica_groups else None
        if groups is not None:
            if optimizer is None:
                raise ValueError("spec.faultTolerance (replica groups) needs StepHook(..., optimizer=...): a healing group loads a peer's model and optimizer state")
            from railtrain.trainer import replica as rg

            self.replica = rg.ReplicaSync(
                groups, c.rank, c.world_size, rg.model_state(self._plain, optimizer, lambda: self.replica.step if self.replica else 0),
                rg.load_model_state(self._plain, optimizer, lambda step: None), self.log, start_allowance_s=c.health.hang_warmup_s,
            )  # fmt: skip
            self.monitor.replica_group = self.monitor.injector.group = groups.group
            if self.monitor.enabled:
                self.monitor.across_groups = self.replica.gather  # the SDC fingerprints across the groups too

    # -- guarded calls ------------------------------------------------------------------------
    def _guard(self, check: str, call: Callable[[], Any], fallback: Any = None) -> Any:
        """Run a detector; its finding propagates, its own error is reported once and swallowed."""
        try:
            return call()
        except HealthVerdict:
            raise
        except Exception as err:  # noqa: BLE001 - a detector's bug must not end a training run
            self.internal_errors.labels(check).inc()
            if check not in self._reported:
                self._reported.add(check)
                self.log(f"health: internal error in the {check} check ({type(err).__name__}: {err}); reported, training continues")
            return fallback

    def _mean_over_ranks(self, loss: torch.Tensor, extra: torch.Tensor | None) -> tuple[float, list[float] | None]:
        out = loss.detach().float().reshape(1).cpu()
        if not self.distributed:
            return float(out), extra.tolist() if extra is not None else None
        both = torch.cat([out, extra.float()]) if extra is not None else out
        both = both.to(loss.device)
        dist.all_reduce(both, op=dist.ReduceOp.SUM)
        return self._job_mean(both, extra is not None)

    def _job_mean(self, summed: torch.Tensor, timing: bool) -> tuple[float, list[float] | None]:
        """The all-reduced ``[loss, *compute seconds]`` as (mean loss over the job, every rank's seconds or None)."""
        values = summed.tolist()  # one conversion (a host copy on GPU) for the loss and the times
        return values[0] / self.contract.world_size, values[1:] if timing else None

    # -- life cycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Gather node names, run the first known-answer test, start the hang watchdog (a collective; idempotent).

        Called by the first :meth:`begin_step` if not before; call it yourself after a checkpoint load.

        Raises:
            HealthVerdict: ``hardware-suspect`` when a rank's first known-answer test disagrees.
        """
        if not self.started:
            self.started = True
            self._guard("start", self.monitor.start)

    def close(self, failed: bool = False) -> None:
        """Stop the watchdog and the metrics endpoint (idempotent); ``failed=True`` keeps the watchdog's shared hang verdict readable."""
        self._guard("stop", lambda: self.monitor.stop(failed=failed))
        self.metrics.close()
        if self.replica is not None:
            self.replica.close()

    def shared_hang(self) -> HealthVerdict | None:
        """The gang's hang verdict if some rank's watchdog set one, else ``None`` (for the verdict writer)."""
        return self._guard("hang", self.monitor.shared_hang)

    def phase(self, step: int, name: str, at_least_s: float | None = None) -> None:
        """Record what the loop does now for the hang watchdog: ``checkpoint`` (a save may outlast a step), or any name.

        ``at_least_s``: seconds the phase may legitimately last (e.g. waiting for peers up to a timeout of the loop's
        own); the watchdog's deadline for it is then at least that. Every rank must pass the same value.
        """
        self.monitor.phase(step, name, at_least_s)

    @property
    def skipped(self) -> int:
        """Batches skipped so far as data anomalies."""
        return self.monitor.skipped

    # -- per step -------------------------------------------------------------------------------
    def begin_step(self, step: int) -> int:
        """Before the step's forward (``step`` >= 1): heartbeat, and the injected faults due at this step.

        With replica groups, first the step's quorum (torchft): a group behind the quorum heals from a live peer (its
        model and optimizer state are loaded here) and the step to run is the quorum's next one. Its first call
        tells the quorum the loop's committed step (``step`` − 1, e.g. after a checkpoint resume).

        Returns:
            The step to run: ``step``, or with replica groups the quorum's next step (a healed group jumps ahead).

        Raises:
            HealthVerdict: ``retryable``/``QuorumLost`` when no quorum of ``minReplicas`` groups forms in time.
        """
        self.start()
        if self.replica is not None:
            if not self._replica_started:
                self._replica_started = True
                self.replica.set_step(step - 1)
            self.monitor.phase(step - 1, "quorum", self.replica.longest_start_s())  # waiting for groups is no hang
            self.replica.start_step()
            step = self.replica.step + 1
        self.monitor.begin_step(step)
        return step

    def average_gradients(self) -> None:
        """After the backward pass, before clipping (every rank): with replica groups, average every gradient over the
        groups of the step's quorum (one ``manager.allreduce`` each; a peer lost mid-way is recorded by torchft and
        makes :meth:`check` vote the step down). Nothing without replica groups."""
        if self.replica is not None:
            self.replica.allreduce_gradients(self._plain)

    @property
    def writes_checkpoints(self) -> bool:
        """Whether this rank's group saves the job's checkpoints at this step: always without replica groups; with
        them, the lowest group of the quorum only (one copy of the model; :meth:`ReplicaSync.writes_checkpoints`)."""
        return self.replica is None or self.replica.writes_checkpoints()

    def after_forward(self, step: int, loss: torch.Tensor) -> None:
        """Optional, after the step's forward and before its backward (every rank or none): start :meth:`check`'s
        all-reduce now, in the background, so that it overlaps the backward pass instead of adding to the step.

        The all-reduce carries this rank's loss and, on the straggler check's schedule, its compute seconds (the
        forward's blocks, timed by then). :meth:`check` waits for it and averages ``loss`` as given here (pass the
        same loss to both; with gradient accumulation, the step's loss after its last micro-batch's forward). A
        second call for the same step, or a call after its :meth:`check` (e.g. from a ``recompute``), does nothing.
        It does nothing either without a process group, with a ``reduce`` of the loop's own, or when the loss is on
        a GPU (there the loss must reach the host in :meth:`check` anyway; not measured here). Why it exists: the
        one collective the hook adds per step was most of its cost on a small model (docs/bench-hook.md).

        Args:
            step: the step (the one :meth:`check` is called with next); loss: this rank's loss, a 0-d tensor.

        Raises:
            RuntimeError: the process group failed to start the all-reduce (a peer is gone).
        """
        if (not self.distributed or self.reduce != self._mean_over_ranks or loss.device.type != "cpu"
                or self._checked == step or (self._early is not None and self._early[0] == step)):  # fmt: skip
            return
        timing = self.monitor.timing_due(step)
        extra = self._guard("timing", self.monitor.timing_vector) if timing else None
        buf = loss.detach().float().reshape(1)
        buf = torch.cat([buf, extra.float()]) if extra is not None else buf.clone()
        self._early = (step, dist.all_reduce(buf, op=dist.ReduceOp.SUM, async_op=True), buf, extra is not None)

    def _finish_early(self, early: tuple[int, Any, torch.Tensor, bool]) -> tuple[float, list[float] | None]:
        _, work, buf, timing = early
        work.wait()
        return self._job_mean(buf, timing)

    def check(self, step: int, loss: torch.Tensor, grad_norm: float | torch.Tensor,
              recompute: Callable[[], torch.Tensor] | None = None) -> tuple[float, bool]:  # fmt: skip
        """After the backward pass, before ``optimizer.step()`` (every rank; one all-reduce when distributed).

        Averages the loss over the job (the straggler check's compute times ride on the same all-reduce; when
        :meth:`after_forward` started it, waits for it: the loss given there is the one averaged), then
        checks the loss and gradient norm for NaN/Inf and spikes; an anomaly is re-executed with ``recompute`` to
        tell hardware from data.

        Args:
            step: the step.
            loss: this rank's loss of the step, a 0-d tensor (any device).
            grad_norm: the global gradient norm before clipping (identical on every rank, e.g. from
                ``torch.nn.utils.clip_grad_norm_`` under DDP), a float or 0-d tensor.
            recompute: zero the gradients, rerun the step's forward and backward on the same batch and return the
                new local loss; ``None``: no re-execution (an anomaly is then judged as data).

        Returns:
            ``(loss averaged over ranks, skip)``: ``skip`` is ``True`` when the optimizer must not step (a data
            anomaly within the allowed count, a non-finite loss or gradient norm, or with replica groups a step the
            groups voted down: then :attr:`committed` is False and the loop runs the same step again); zero the
            gradients either way.

        Raises:
            HealthVerdict: ``hardware-suspect`` (re-execution or known-answer test differs on a rank) or
                ``user-error`` (``DataAnomaly``, ``NonFiniteUpdate``).
        """
        if self._collective_entered != step:
            self.before_collective(step)
        self._checked = step
        norm = float(grad_norm)
        early, self._early = self._early, None
        if early is not None and early[0] == step:
            mean, times = self._finish_early(early)
        else:
            timing = self.monitor.timing_due(step)
            extra = self._guard("timing", self.monitor.timing_vector) if timing else None
            mean, times = self.reduce(loss.detach(), extra)
        if times is not None:
            self.monitor.record_times(times)
        self.loss = mean
        local = loss.detach()
        skip = self._guard("numeric", lambda: self.monitor.check_numeric(step, mean, norm, local, recompute or (lambda: local)), False)
        if self.replica is not None:
            self.committed = self.replica.should_commit()  # every group votes; False: no group applies this step
            skip = skip or not self.committed
        return mean, bool(skip) or not (math.isfinite(mean) and math.isfinite(norm))

    def before_collective(self, step: int) -> None:
        """Mark the step's first collective after the backward pass as entered (and fire a hang/kill fault due there).

        :meth:`check` calls it; call it yourself before an earlier collective of your own (e.g. an FSDP grad-norm).
        """
        self._collective_entered = step
        self.monitor.before_collective(step)

    def end_step(self, step: int, step_s: float) -> None:
        """After ``optimizer.step()``: progress metrics, then the straggler judgement, fingerprints and known-answer
        test when due (collectives on their schedule).

        Args:
            step: the step; step_s: its wall time in seconds (> 0).

        Raises:
            HealthVerdict: ``straggler`` (action ``stop``) or ``hardware-suspect`` (``ParameterMismatch``,
                ``KnownAnswerMismatch``).
        """
        tokens_per_s = self.tokens_per_step / step_s if step_s > 0 else 0.0
        self.metrics.observe_step(step, self.loss, tokens_per_s, step_s)
        self._guard("end_step", lambda: self.monitor.end_step(step, step_s))
