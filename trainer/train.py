"""The trainer: assembled from small ``build_*`` functions, then a plain step loop.

Rank 0 prints one line per logged step in a fixed ``key=value`` format::

    step=10 loss=4.1234 grad_norm=0.8123 lr=1.50e-03 tokens_per_s=12345.6

(``loss`` is the mean over all ranks, nats per token: per byte for byte-level data; ``tokens_per_s`` counts the
global batch.) A resumed run first prints ``resumed from step N``.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import os
import sys
import time
from typing import Callable, Mapping

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from railtrain.crds import contract, threads
from railtrain.crds.process import say
from railtrain.crds.replica_groups import read_replica_group_env
from railtrain.trainer.checkpoint import NonFiniteState
from railtrain.trainer.checkpointing import JobCheckpointer
from railtrain.trainer import float8
from railtrain.trainer.config import TrainConfig, apply_launch_context, checkpoint_tiers, model_shape, read_launch_context
from railtrain.trainer.data import WindowSampler, load_corpus
from railtrain.trainer.health.monitor import HealthVerdict, process_group_timeout_s
from railtrain.trainer.health.watchdog import arm_start_deadline
from railtrain.trainer.hook import StepHook
from railtrain.trainer.pod_contract import Contract, read_contract
from railtrain.trainer.model import Transformer
from railtrain.trainer.parallel import (
    DistInfo,
    ParallelDims,
    apply_context_parallel,
    apply_data_parallel,
    build_mesh,
    check_model_fits,
    check_pod_world_size,
    init_distributed,
    resolve_dims,
    shutdown_distributed,
)
from railtrain.trainer.dims import check_float8_tokens, in_nvlink_domain
from railtrain.trainer.pipeline import auto_microbatches, bubble_fraction, build_schedule, keep_stage
from railtrain.trainer.reductions import clip_grad_norm_, mean_loss, mean_loss_and_sum
from railtrain.trainer.steps import ForwardBackward
from railtrain.trainer.tensor_parallel import apply_tensor_parallel

JOB_WIDE_NUMERIC = frozenset({contract.REASON_NON_FINITE_UPDATE, contract.REASON_DATA_ANOMALY})
"""user-error reasons every rank reaches at the same step (the numeric check on the all-reduced loss and gradient norm,
before the optimizer step): a run that ends on one first finishes its checkpoint save in flight, an earlier good step,
rather than abandon it (tests/trainer/test_nonfinite.py: step 2's save lost its manifest when step 3 ended the run)."""
class NonFiniteUpdateError(FloatingPointError):
    """A step's all-reduced loss or gradient norm is not finite and the health checks are off (``--no-health``): the
    update is not applied and the run ends (a ``FloatingPointError``, so :mod:`railtrain.trainer.outcome` reports it as
    ``user-error``). Every rank reaches it at the same step, so, as for :data:`JOB_WIDE_NUMERIC`, the save in flight
    is finished first."""


FINISH_SAVE_SECONDS = 120.0
"""How long a run ending on a :data:`JOB_WIDE_NUMERIC` verdict waits for its save in flight (a stuck one is abandoned)."""


def lr_at(step: int, config: TrainConfig) -> float:
    """Learning rate for optimizer step ``step`` (1-based).

    Linear warmup over ``warmup_steps`` to ``lr``, then constant, or, when
    ``lr_decay_steps > 0``, a cosine from ``lr`` down to ``0.1 * lr`` at
    ``lr_decay_steps`` and flat after (Loshchilov & Hutter 2017, "SGDR"). A
    pure function of the step, so there is no scheduler state to checkpoint.
    """
    if config.warmup_steps and step <= config.warmup_steps:
        return config.lr * step / config.warmup_steps
    if config.lr_decay_steps <= config.warmup_steps:
        return config.lr
    progress = min(1.0, (step - config.warmup_steps) / (config.lr_decay_steps - config.warmup_steps))
    return config.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def format_step(step: int, loss: float, grad_norm: float, lr: float, tokens_per_s: float) -> str:
    """The per-step log line, e.g. ``step=10 loss=4.1234 grad_norm=0.8123 lr=1.50e-03 tokens_per_s=12345.6``."""
    return f"step={step} loss={loss:.4f} grad_norm={grad_norm:.4f} lr={lr:.2e} tokens_per_s={tokens_per_s:.1f}"


def resolve_device(flag: str) -> str:
    """``"cpu"`` or ``"cuda"`` from ``--device``.

    Raises:
        ValueError: ``--device cuda`` without a usable GPU.
    """
    if flag == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if flag == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was given but torch sees no CUDA device")
    return flag


def resolve_precision(flag: str, device_type: str) -> str:
    """``"bf16"``, ``"fp8"`` or ``"fp32"`` from ``--mixed-precision`` (``"auto"``: bf16 on cuda, fp32 on cpu)."""
    if flag == "auto":
        return "bf16" if device_type == "cuda" else "fp32"
    return flag


def build_model(config: TrainConfig, dims: ParallelDims, info: DistInfo, bf16: bool, mesh: DeviceMesh | None, fp8: bool = False) -> nn.Module:
    """The model of ``config.preset`` with ``config.vocab_size`` (:func:`~railtrain.trainer.config.model_shape`), seeded
    with ``config.seed`` (identical on every rank), on the device, cut to this rank's pipeline stage, its linear layers converted to float8 when ``fp8`` (:mod:`railtrain.trainer.float8`,
    before any wrapping, as torchtitan orders it), set to its context-parallel chunks, tensor-parallelised, and
    wrapped for the data-parallel degrees of ``dims``.

    Raises:
        ValueError: ``--cpu-offload`` without FSDP2.
    """
    if config.cpu_offload and not dims.uses_fsdp:
        raise ValueError(f"--cpu-offload needs FSDP2 (fsdp > 1 or context > 1), but the degrees are {dims.degrees.describe()}")
    torch.manual_seed(config.seed)
    with torch.device(info.device):
        model = Transformer(model_shape(config))
    for block in model.layers.values():
        block.checkpoint_activations = config.activation_checkpointing
    if mesh is not None and dims.pp > 1:
        keep_stage(model, dims.coordinates(info.rank)["pp"], dims.pp)
    if fp8:
        assert config.fp8_recipe is not None  # filled by apply_launch_context
        float8.convert(model, config.fp8_recipe, bool(config.fp8_emulate), fsdp=mesh is not None and dims.uses_fsdp, tp=dims.tp)
    if mesh is None:
        return model
    apply_context_parallel(model, dims, mesh, config.seq_len)
    if dims.tp > 1:
        apply_tensor_parallel(model, mesh["tp"], float8=fp8 and float8.uses_float8_tensor_parallel(model, info.device.type))
    return apply_data_parallel(model, dims, mesh, info.device, bf16, config.cpu_offload)


def build_forward_backward(
    config: TrainConfig, dims: ParallelDims, info: DistInfo, model: nn.Module, mesh: DeviceMesh | None, bf16: bool, microbatches: int
) -> ForwardBackward:
    """The step's forward/backward runner: plain, or this rank's pipeline schedule when ``dims.pp > 1``."""
    autocast = bf16 and not dims.uses_fsdp  # FSDP2 casts parameters itself (MixedPrecisionPolicy)
    common = dict(accum_steps=config.grad_accum_steps, autocast=autocast, device_type=info.device.type)
    if dims.pp == 1 or mesh is None:
        return ForwardBackward(model, **common)
    stage = dims.coordinates(info.rank)["pp"]
    loss_fn = ForwardBackward.pipeline_loss_fn(microbatches, config.grad_accum_steps)
    schedule = build_schedule(model, stage, dims.pp, info.device, mesh["pp"].get_group(), config.pp_schedule, microbatches, loss_fn)
    return ForwardBackward(model, **common, schedule=schedule, stage=stage, stages=dims.pp, microbatches=microbatches)


def build_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW (betas 0.9/0.95 as in GPT-3, Brown et al. 2020) with weight decay on matrices only, not on norm gains."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": config.weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, 0.95), eps=1e-8)


def build_checkpointer(
    config: TrainConfig, layout: str, model: nn.Module, optimizer: torch.optim.Optimizer, pod: Contract, hook: StepHook, log: Callable[[str], None]
) -> JobCheckpointer | None:
    """The library's :class:`~railtrain.trainer.checkpointing.JobCheckpointer` over
    :func:`~railtrain.trainer.config.checkpoint_tiers` (``None`` when there are none); a collective.

    Args:
        config: the filled configuration (tiers, async saves, run id); layout: the parallel layout's description;
        model, optimizer: what is saved; pod: the pod contract (ranks, the hold-checkpoint fault); hook: the step hook
        (its hang watchdog's checkpoint phase, its checkpoint metrics); log: prints on rank 0.

    Raises:
        ValueError: ``--checkpoint-dir`` is a URI fsspec cannot open.
    """
    tiers = checkpoint_tiers(config)
    if not tiers:
        return None
    return JobCheckpointer(
        model, optimizer, pod, tiers=tuple(tiers), layout=layout, async_save=config.checkpoint_async, log=log,
        observe=hook.metrics.observe_checkpoint, phase=hook.phase, run_id=config.run_id,
    )  # fmt: skip


def build_hook(config: TrainConfig, info: DistInfo, dims: ParallelDims, model: nn.Module, pod: Contract, log: Callable[[str], None]) -> StepHook:
    """This rank's :class:`~railtrain.trainer.hook.StepHook` (the library's, docs/library.md): the health checks of
    docs/health.md with the contract's ``RAILTRAIN_HEALTH_*`` settings and ``RAILTRAIN_FAULT_*`` faults (``--no-health``
    turns them off too), and the Prometheus metrics served on ``--metrics-port`` by local rank 0 (a port that is
    taken only costs a warning). Compute times ride on the trainer's own pipeline-aware loss all-reduce.
    """
    tokens = config.batch_size * config.seq_len

    def reduce(loss: torch.Tensor, extra: torch.Tensor | None) -> tuple[float, list[float] | None]:
        if extra is not None:  # the straggler check's compute times ride on the loss all-reduce
            mean, times = mean_loss_and_sum(loss, dims, info, extra)
            return mean.item(), times.tolist()
        return mean_loss(loss, dims, info).item(), None

    here = dataclasses.replace(
        pod, rank=info.rank, world_size=info.world_size, local_rank=info.local_rank, local_world_size=info.local_world_size,
        metrics_port=config.metrics_port, health_enabled=config.health and pod.health_enabled,
    )  # fmt: skip
    return StepHook(
        model, here, total_steps=config.steps, tokens_per_step=tokens, flops_per_token=model_shape(config).flops_per_token(config.seq_len),
        peak_flops=config.peak_tflops * 1e12, coordinates=[dims.coordinates(r) for r in range(info.world_size)], reduce=reduce, log=log,
        drive_replica_groups=False,  # the trainer's own ReplicaSync (Trainer.__init__) drives torchft
    )  # fmt: skip


def set_threads(config: TrainConfig, info: DistInfo, environ: Mapping[str, str] = os.environ) -> threads.ThreadChoice:
    """Set this process's intra-op threads from the CPUs it gets (:func:`railtrain.crds.threads.choose_threads`).

    ``--threads`` if given, else the user's ``OMP_NUM_THREADS``, else the CPUs of
    this process (affinity capped by its cgroup quota) ÷ the training processes
    sharing them (``RAILTRAIN_CPU_SHARERS``, else torchrun's ``LOCAL_WORLD_SIZE``).
    Returns it; :func:`threads_line` says it (printed when training starts).
    """
    choice = threads.choose_threads(threads.process_cpus(), environ, info.local_world_size, config.threads)
    torch.set_num_threads(choice.threads)
    return choice


def threads_line(choice: threads.ThreadChoice, environ: Mapping[str, str] = os.environ) -> str:
    """The start line naming this process's threads and OpenMP wait policy, e.g. ``threads: 1 per process (1 CPU ÷ 1 process; wait policy PASSIVE)``.

    Each node's first process prints it when training starts (the CPUs a
    process gets are a fact of its node, so every node says its own), not
    before the configuration is checked: a refused run prints nothing on stdout.
    """
    policy = environ.get(threads.ENV_OMP_WAIT_POLICY) or "the OpenMP default"
    return f"threads: {choice.threads} per process ({choice.reason}; wait policy {policy})"


class Trainer:
    """One training run: set up in ``__init__``, run with :meth:`train`, release with :meth:`close`.

    Args:
        config: parsed flags (see :class:`TrainConfig`).
        environ: the process environment, for the pod contract.

    Raises:
        ValueError: bad configuration, pod contract, data, or parallel degrees;
            the message names the flag or environment variable.
    """

    def __init__(self, config: TrainConfig, environ: Mapping[str, str] = os.environ) -> None:
        ctx = read_launch_context(dict(environ))
        config = apply_launch_context(config, ctx)
        self.corpus = load_corpus(config.data, config.data_format, config.token_dtype, config.vocab_size)
        self.config = config = dataclasses.replace(config, vocab_size=self.corpus.vocab_size)  # the model follows the data's vocabulary
        self.contract = read_contract(environ)  # health settings, faults, node: the library's one reading of the contract
        health_settings = self.contract.health
        # a gang stuck before its watchdog runs (process group set-up) is a hang too (docs/health.md, "Hang deadlines")
        self.start_deadline = arm_start_deadline(health_settings, config.health and self.contract.health_enabled, environ,
                                                 (ctx.pod.node_name if ctx.pod else "") or environ.get(contract.ENV_NODE_NAME, ""))
        self.info = info = init_distributed(resolve_device(config.device), process_group_timeout_s(health_settings))
        self.threads_line = threads_line(set_threads(config, info, environ), environ)
        check_pod_world_size(ctx.pod, info.world_size)
        self.restart_count = ctx.pod.restart_count if ctx.pod else 0
        self.dims = dims = resolve_dims(config.parallel, ctx.parallelism, info.world_size, info.local_world_size, config.tp, config.pp, config.cp,
                                        in_nvlink_domain(environ))
        # replica groups (spec.faultTolerance): torchft's Manager across groups, any layout inside each (trainer/replica.py)
        self.replica_env = replica_env = read_replica_group_env(environ)
        dp_rank, dp_degree = dims.dp_rank(info.rank), dims.dp_degree
        if replica_env is not None:
            from railtrain.trainer import replica

            dp_rank, dp_degree = replica.group_data_slice(replica_env, dp_rank, dp_degree)
        data_seed = config.seed if config.data_seed is None else config.data_seed
        self.sampler = WindowSampler(self.corpus, config.seq_len, config.batch_size, data_seed, dp_rank, dp_degree,
                                     dims.cp_rank(info.rank), dims.cp)
        per_part = self.sampler.local_batch // config.grad_accum_steps
        self.microbatches = (config.pp_microbatches or auto_microbatches(max(per_part, 1), dims.pp)) if dims.pp > 1 else 1
        check_model_fits(dims, model_shape(config), config.seq_len, self.sampler.local_batch, config.grad_accum_steps, self.microbatches)
        assert config.mixed_precision is not None  # filled by apply_launch_context
        self.precision = resolve_precision(config.mixed_precision, info.device.type)
        self.fp8 = self.precision == "fp8"
        if self.fp8:
            check_float8_tokens(dims, config.seq_len, self.sampler.local_batch, config.grad_accum_steps, self.microbatches)
            float8.check_device(info.device, bool(config.fp8_emulate))
        self.bf16 = self.precision in ("bf16", "fp8")  # fp8: bf16 everywhere the float8 layers are not
        self.mesh = build_mesh(dims, info.device.type) if info.distributed else None
        self.model = build_model(config, dims, info, self.bf16, self.mesh, fp8=self.fp8)
        self.forward_backward = build_forward_backward(config, dims, info, self.model, self.mesh, self.bf16, self.microbatches)
        self.pp_group = self.mesh["pp"].get_group() if self.mesh is not None and dims.pp > 1 else None
        self.optimizer = build_optimizer(self.model, config)
        self.health = build_hook(config, info, dims, self.model, self.contract, self.log)
        self.prometheus = self.health.metrics
        # with replica groups every group resumes from the checkpoints (a restarted job resumes as today), but one group
        # writes them, one copy of the model: the lowest of each step's quorum (group 0 until the first quorum says);
        # a replacement group heals from a live peer at its first quorum
        self.writes_checkpoints = replica_env is None or replica_env.group == 0
        self.checkpointer = build_checkpointer(config, dims.describe(), self.model, self.optimizer, self.contract, self.health, self.log)
        self.step = 0
        self.committed = True
        """Whether the last :meth:`train_step` was committed (always, without replica groups)."""
        self.replica = None
        if replica_env is not None:
            from railtrain.trainer import replica

            self.replica = replica.ReplicaSync(
                replica_env, info.rank, info.world_size, replica.model_state(self.model, self.optimizer, lambda: self.step),
                replica.load_model_state(self.model, self.optimizer, self._set_step), self.log, environ,
                start_allowance_s=self.contract.health.hang_warmup_s,  # the groups start at different times
            )  # fmt: skip
            monitor = self.health.monitor
            monitor.replica_group = monitor.injector.group = replica_env.group  # a fault may name one group
            if monitor.enabled:
                monitor.across_groups = self.replica.gather  # the SDC fingerprints compared across the groups too

    def _set_step(self, step: int) -> None:
        self.step = step

    def take_writer_turn(self, writer: bool) -> None:
        """Whether this replica group writes the checkpoints from this step on (the lowest group of the quorum,
        :meth:`~railtrain.trainer.replica.ReplicaSync.writes_checkpoints`). A group that stops writing first waits for
        its save in flight: the new writer's next checkpoint cannot complete before it (the groups' steps advance
        together), so its retention never takes the old writer's half-written step for a leftover and deletes it."""
        if self.writes_checkpoints and not writer and self.checkpointer is not None:
            self.checkpointer.wait()
        if writer != self.writes_checkpoints:
            self.log(f"replica group {self.replica.env.group}: {'writes' if writer else 'no longer writes'} the checkpoints from step {self.step + 1}"
                     f" (the lowest group of the quorum writes them)")  # fmt: skip
        self.writes_checkpoints = writer

    def log(self, line: str) -> None:
        """Print ``line`` on rank 0 only."""
        if self.info.rank == 0:
            say(line, sys.stdout)

    def train_step(self, step: int) -> tuple[float, float, float, bool]:
        """One optimizer step on this rank's slice of ``step``'s batch, with the health checks' numeric check
        (and re-execution) between the backward pass and the optimizer step.

        Returns:
            ``(loss averaged over ranks, global gradient norm before clipping, learning rate, whether the batch
            was skipped as a data anomaly)``. The optimizer steps only when the batch is not skipped and both the
            loss and the gradient norm are finite; the gradients are zeroed either way.

        Raises:
            HealthVerdict: a health check's verdict.
        """
        inputs, targets = (t.to(self.info.device, non_blocking=True) for t in self.sampler.batch(step))
        lr = lr_at(step, self.config)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.health.begin_step(step)
        loss = self.forward_backward(inputs, targets).detach()
        self.health.before_collective(step)
        max_norm = self.config.grad_clip or float("inf")
        if self.replica is not None:  # the gradients averaged over the replica groups in this step's quorum
            self.replica.allreduce_gradients(self.model)
        grad_norm = float(clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad], max_norm, self.pp_group))

        def recompute() -> torch.Tensor:
            self.optimizer.zero_grad(set_to_none=True)
            return self.forward_backward(inputs, targets).detach()

        loss_value, hold = self.health.check(step, loss, grad_norm, recompute)
        skip = hold and self.health.monitor.enabled  # skipped as a data anomaly (with the checks off, only not finite)
        # Never an update from a non-finite gradient norm or loss, whatever the health checks said (or if they are
        # off): the values on every rank are the all-reduced ones, so every rank takes the same branch.
        self.committed = self.replica is None or self.replica.should_commit()  # every group of the quorum finished the step
        if self.committed and not hold and math.isfinite(grad_norm) and math.isfinite(loss_value):
            self.optimizer.step()
            if self.fp8:
                float8.precompute_scales(self.model)
        self.optimizer.zero_grad(set_to_none=True)
        return loss_value, grad_norm, lr, skip

    def save_checkpoint(self, last_step: int) -> list[str]:
        """Checkpoint the current step to the due tiers (every rank calls; the library's
        :meth:`~railtrain.trainer.checkpointing.JobCheckpointer.save`, which logs the line); returns the tiers written.

        Raises:
            HealthVerdict: ``user-error`` ``NonFiniteUpdate`` when the state is not finite on some rank (it is
                not saved, so retention never deletes a finite checkpoint for it; docs/checkpoints.md).
        """
        assert self.checkpointer is not None
        try:
            return self.checkpointer.save(self.step, last_step, self.sampler.state())
        except NonFiniteState as err:
            raise HealthVerdict(
                contract.VERDICT_USER_ERROR, contract.REASON_NON_FINITE_UPDATE,
                f"{err}: the optimizer step of step {self.step} made them so from a finite gradient norm (an overflow in the "
                "update, e.g. too high a learning rate); lower --lr or raise --warmup-steps, then resume from the newest checkpoint",
                step=self.step, evidence=err.evidence,
            ) from None  # fmt: skip

    def resume(self) -> None:
        """Load the newest complete checkpoint, if any, and continue from its step."""
        if self.checkpointer is None:
            return
        saved = self.checkpointer.resume(self.sampler.state())  # logs "resumed from step N (...)"
        if self.checkpointer.loaded_tier is None:
            return
        self.step = saved.pop("step")
        if self.fp8:
            float8.precompute_scales(self.model)  # the loaded weights' float8 scales, before the first forward
        self.prometheus.resumed_step.set(self.step)
        faults = self.contract.faults
        missed = [f"{kind} at step {f.step}" for kind in ("bitflip", "hang", "kill", "bad_batch") if (f := getattr(faults, kind)) is not None and f.step <= self.step]
        if missed:
            self.log(f"warning: injected fault(s) {', '.join(missed)} come at or before the resumed step {self.step}: they will not fire")
        current = self.sampler.state()
        changed = [f"{k} {saved[k]}->{current[k]}" for k in current if k in saved and saved[k] != current[k]]
        if changed:
            self.log(f"warning: data stream differs from the checkpointed run ({', '.join(changed)}); batches will not match")

    def _start_over(self) -> str:
        """The second half of the "nothing to train" line: how to start over from the tier that was loaded."""
        train_on = "or raise --steps (railtrain run --local --steps N) to train further"
        if self.checkpointer is not None and self.checkpointer.loaded_tier not in (None, "persistent"):
            return f"set another spec.checkpoint.runId (or none) to start over, {train_on}"
        return f"delete it to start over, {train_on}"

    def train(self) -> None:
        """Resume if possible, then train until ``config.steps``, logging and checkpointing."""
        c, info = self.config, self.info
        n_params = model_shape(c).num_params()  # of the whole model, whatever this rank holds
        if info.local_rank == 0:  # every node says its own threads (its CPUs), rank 0 the rest
            say(self.threads_line, sys.stdout)
        self.log(
            f"job={c.job_name or '-'} restart={self.restart_count} preset={c.preset} params={n_params} vocab_size={c.vocab_size} parallel={self.dims.describe()} "
            f"device={info.device.type} bf16={self.bf16} precision={float8.describe(self.model, c) if self.fp8 else self.precision} data_files={len(self.corpus.names)} data_{self.corpus.unit}={len(self.corpus)} "
            f"batch_size={c.batch_size} seq_len={c.seq_len} steps={c.steps}"
        )
        if self.dims.pp > 1:
            self.log(
                f"pipeline schedule={c.pp_schedule} stages={self.dims.pp} microbatches={self.microbatches} "
                f"bubble={bubble_fraction(self.dims.pp, self.microbatches):.3f}"
            )
        self.resume()
        if self.replica is not None:
            self.replica.set_step(self.step)  # the quorum compares steps: a resumed group is ahead of a fresh one
        if self.step >= c.steps and self.checkpointer is not None:
            self.log(f"nothing to train: {self.checkpointer.start_over_hint(self.step)}, and --steps is {c.steps}; {self._start_over()}")
        self.health.start()
        if self.start_deadline is not None:
            self.start_deadline.cancel()  # the watchdog's heartbeats take over
        metrics = open(c.metrics_file, "a") if c.metrics_file and info.rank == 0 else None
        tokens_per_step = c.batch_size * c.seq_len
        start = time.perf_counter()
        try:
            while self.step < c.steps:
                if self.replica is not None:
                    self.health.phase(self.step, "quorum", at_least_s=self.replica.longest_start_s())  # waiting for groups is no hang
                    self.replica.start_step()  # may heal from a peer: self.step jumps to the quorum's step
                    self.take_writer_turn(self.replica.writes_checkpoints())
                    if self.step >= c.steps:
                        break
                self.step += 1
                t0 = time.perf_counter()
                loss_value, grad_norm, lr, skipped = self.train_step(self.step)
                step_s = time.perf_counter() - t0
                if not self.committed:  # a replica group of the quorum failed mid-step: run the same step again
                    self.log(f"step={self.step} not committed (replica groups); running it again")
                    self.step -= 1
                    continue
                tokens_per_s = tokens_per_step / step_s
                if self.replica is not None:  # the operator reads these into status.replicaGroups[]
                    self.prometheus.observe_replica(self.replica.participants(), self.replica.healed, self.replica.retried)
                self.health.end_step(self.step, step_s)  # progress metrics, then the checks due
                if not (math.isfinite(loss_value) and math.isfinite(grad_norm)) and not skipped:  # the health checks are off
                    raise NonFiniteUpdateError(f"loss is {loss_value}, gradient norm {grad_norm} at step {self.step}; the update was not applied")
                if self.step % c.log_every == 0 or self.step in (1, c.steps):
                    self.log(format_step(self.step, loss_value, grad_norm, lr, tokens_per_s))
                if metrics:
                    record = {"step": self.step, "loss": loss_value, "grad_norm": grad_norm, "lr": lr, "tokens_per_s": tokens_per_s, "step_s": step_s}
                    if self.health.monitor.enabled:
                        record["health_s"] = self.health.monitor.spent_s
                    if self.health.monitor.last_times:
                        record["compute_s"] = self.health.monitor.last_times  # per rank, from the straggler check
                    if self.replica is not None:
                        record["quorum"] = self.replica.participants()
                    metrics.write(json.dumps(record) + "\n")
                    metrics.flush()
                if self.checkpointer and self.writes_checkpoints:
                    self.save_checkpoint(c.steps)  # the tiers due at this step, if any
            if self.checkpointer:
                self.checkpointer.wait()  # the last save completes before the run reports done
                if c.checkpoint_cleanup and (line := self.checkpointer.release_node_tiers(self.step)):
                    self.log(line)
        except HealthVerdict as v:
            if v.verdict == contract.VERDICT_USER_ERROR and v.reason in JOB_WIDE_NUMERIC and self.checkpointer is not None:
                # every rank decided this on the same all-reduced loss and gradient norm, before the optimizer step:
                # the save in flight holds an earlier, good step, and every rank is here to finish it
                self.checkpointer.wait(FINISH_SAVE_SECONDS)
            raise
        except NonFiniteUpdateError:
            if self.checkpointer is not None:  # the same at every rank, before the optimizer step: finish the earlier save
                self.checkpointer.wait(FINISH_SAVE_SECONDS)
            raise
        finally:
            self.health.monitor.stop(failed=sys.exc_info()[0] is not None)  # the metrics endpoint stays up until close()
            if metrics:
                metrics.close()
        self.log(f"done step={self.step} elapsed_s={time.perf_counter() - start:.1f}")
        if self.replica is not None:
            self.log(f"replica group {self.replica.env.group}: done, healed {self.replica.healed} time(s), ran {self.replica.retried} step(s) again")

    def close(self) -> None:
        """Leave the process group and free the model and optimizer (idempotent)."""
        if getattr(self, "start_deadline", None) is not None:
            self.start_deadline.cancel()
        if getattr(self, "checkpointer", None) is not None:
            self.checkpointer.close()
        if getattr(self, "replica", None) is not None:
            self.replica.close()
        if getattr(self, "health", None) is not None:
            self.health.close()  # the watchdog and the metrics endpoint
        shutdown_distributed()
        # Free FSDP2 modules, DTensors and optimizer state now, while the interpreter is fully
        # alive: left to interpreter finalization they abort the process now and then
        # ("terminate called without an active exception", seen ~1 run in 6 with torch 2.15 on
        # gloo; cf. pytorch/pytorch#190489 on autograd/c10d teardown racing finalization).
        for name in ("model", "optimizer", "checkpointer"):
            self.__dict__.pop(name, None)
        gc.collect()
