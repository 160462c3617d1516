"""Parallel degrees and the checks on them against the model and the batch, without torch.

:mod:`railtrain.trainer.parallel` builds the process group and the DeviceMesh
from a :class:`ParallelDims` decided here, and ``railtrain validate``/``submit``
(:mod:`railtrain.trainer.preflight`) run the same checks on a manifest before
any pod starts: one rule, applied by both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from railtrain.crds import contract
from railtrain.crds import parallel as rule
from railtrain.crds.parallel import Degrees
from railtrain.crds.precision import SCALED_MM_MULTIPLE
from railtrain.trainer.presets import ModelConfig

FLAG_OF_FIELD = {"data": "--parallel", "fsdp": "--parallel", "tensor": "--tp", "pipeline": "--pp", "context": "--cp"}
"""The trainer flag that sets each degree (data and fsdp both come from ``--parallel``)."""


@dataclass(frozen=True)
class ParallelDims:
    """The parallel degrees of a job, validated by :func:`railtrain.crds.parallel.problems` (the operator's rule).

    Attributes:
        degrees: data (replicate), fsdp (shard), tensor, pipeline, context.
        world_size: processes in the job.
        procs_per_node: processes per node (torchrun's ``LOCAL_WORLD_SIZE``),
            for the "tensor inside a node" check; ``None`` skips it.
        nvlink_domain: the job sits inside one NVLink domain, so tensor- and
            context-parallel groups may span whole nodes (:func:`railtrain.crds.parallel.problems`).

    Raises:
        ValueError: the degrees break the rule; one sentence per problem, each
            naming the degree.
    """

    degrees: Degrees
    world_size: int
    procs_per_node: int | None = None
    nvlink_domain: bool = False

    def __post_init__(self) -> None:
        errors = rule.problems(self.degrees, self.world_size, self.procs_per_node, self.nvlink_domain)
        if errors:
            raise ValueError("; ".join(f"parallel degrees: {msg}" for _, msg in errors))

    @property
    def mode(self) -> str:
        """What wraps the model for data parallelism: ``"fsdp"`` when FSDP2 does (:attr:`uses_fsdp`), else ``"ddp"``
        (``DistributedDataParallel`` when ``data > 1``; nothing to wrap with a single data-parallel rank).

        The log's start line and the checkpoint layout (:meth:`describe`) carry it, so a per-rank shard of an
        FSDP2-sharded model is never offered to a replicated one, nor the other way round.
        """
        return "fsdp" if self.uses_fsdp else "ddp"

    @property
    def uses_fsdp(self) -> bool:
        """Whether FSDP2 wraps the model (:func:`railtrain.trainer.parallel.apply_data_parallel`).

        Whenever ``fsdp > 1``; whenever ``context > 1``, sharding over the ``dp_shard × cp`` ranks (the ``cp`` ranks
        are data parallel for the weights; torchtitan does the same), so context parallel never replicates the whole
        model and optimizer state on every rank of a ring; and for replication under tensor parallel
        (``data > 1``, ``tensor > 1``), which DDP cannot do (it takes no DTensor parameters).
        """
        d = self.degrees
        return d.fsdp > 1 or d.context > 1 or (d.data > 1 and d.tensor > 1)

    @property
    def cp(self) -> int:
        """Context-parallel degree."""
        return self.degrees.context

    @property
    def loss_ranks(self) -> int:
        """Ranks whose local mean losses average to the global one: data × fsdp × context (equal token counts each)."""
        return self.degrees.dp * self.degrees.context

    def cp_rank(self, rank: int) -> int:
        """Which chunks of each sequence ``rank`` holds (its index in its ``cp`` group)."""
        return rule.cp_rank(rank, self.degrees)

    @property
    def dp_degree(self) -> int:
        """Ranks that each get a different slice of the batch: data × fsdp."""
        return self.degrees.dp

    @property
    def tp(self) -> int:
        """Tensor-parallel degree."""
        return self.degrees.tensor

    @property
    def pp(self) -> int:
        """Pipeline stages."""
        return self.degrees.pipeline

    def coordinates(self, rank: int) -> dict[str, int]:
        """``rank``'s index along each mesh dimension (see :func:`railtrain.crds.parallel.coordinates`)."""
        return rule.coordinates(rank, self.degrees)

    def dp_rank(self, rank: int) -> int:
        """Which slice of the batch ``rank`` trains on."""
        return rule.dp_rank(rank, self.degrees)

    def describe(self) -> str:
        """One line for the log, e.g. ``fsdp data=1 fsdp=2 tensor=2 pipeline=1 world=4``."""
        return f"{self.mode} {self.degrees.describe()} world={self.world_size}"


def in_nvlink_domain(environ: Mapping[str, str]) -> bool:
    """Whether this process runs in a pod of a job placed inside one NVLink domain
    (:data:`~railtrain.crds.contract.ENV_NVLINK_DOMAIN` is ``1``), whose tensor- and context-parallel groups may
    span whole nodes (the ``nvlink_domain`` of :func:`railtrain.crds.parallel.problems`; docs/fabric.md)."""
    return environ.get(contract.ENV_NVLINK_DOMAIN) == "1"


def resolve_dims(
    flag_mode: str | None,
    pod_degrees: dict[str, int],
    world_size: int,
    procs_per_node: int | None = None,
    flag_tp: int | None = None,
    flag_pp: int | None = None,
    flag_cp: int | None = None,
    nvlink_domain: bool = False,
) -> ParallelDims:
    """Decide the degrees from the flags, else the pod's parallelism, else DDP over every rank.

    Any of ``--parallel``, ``--tp``, ``--pp``, ``--cp`` given means the flags
    alone decide: tensor, pipeline and context default to 1 and the
    data-parallel ranks are the rest, replicated (``ddp``, the default) or
    sharded (``fsdp``). Otherwise the pod's degrees are taken as they are.

    Args:
        flag_mode: ``"ddp"``, ``"fsdp"`` or ``None``.
        pod_degrees: ``contract.parse_parallelism`` output (``{}`` if none).
        world_size: processes in the job.
        procs_per_node: processes per node, for the tensor-in-a-node check.
        flag_tp: ``--tp`` or ``None``.
        flag_pp: ``--pp`` or ``None``.
        flag_cp: ``--cp`` or ``None``.
        nvlink_domain: the job sits inside one NVLink domain (``spec.topology.nvlinkDomain``;
            :func:`in_nvlink_domain` in a pod): groups may span whole nodes.

    Raises:
        ValueError: the degrees break the rule of
            :func:`railtrain.crds.parallel.problems`; the message names the
            flags or the environment variable and the degree.
    """
    if flag_mode or flag_tp or flag_pp or flag_cp:
        tp, pp, cp = flag_tp or 1, flag_pp or 1, flag_cp or 1
        if world_size % (tp * pp * cp):
            cp_part = f" x --cp {cp}" if flag_cp else ""
            raise ValueError(f"--tp {tp} x --pp {pp}{cp_part} does not divide the world size {world_size}")
        dp = world_size // (tp * pp * cp)
        degrees = Degrees(1, dp, tp, pp, cp) if flag_mode == "fsdp" else Degrees(dp, 1, tp, pp, cp)
        errors = rule.problems(degrees, world_size, procs_per_node, nvlink_domain)
        if errors:
            raise ValueError("; ".join(f"{FLAG_OF_FIELD.get(field, 'parallel flags')}: {msg}" for field, msg in errors))
        return ParallelDims(degrees, world_size, procs_per_node, nvlink_domain)
    if not pod_degrees:
        return ParallelDims(Degrees(data=world_size), world_size, procs_per_node, nvlink_domain)
    env = contract.ENV_PARALLELISM
    unknown = sorted(set(pod_degrees) - set(rule.FIELDS))
    if unknown:
        raise ValueError(f"{env} names unknown degrees {', '.join(unknown)}; allowed: {', '.join(rule.FIELDS)}")
    degrees = Degrees(**pod_degrees)
    errors = rule.problems(degrees, world_size, procs_per_node, nvlink_domain)
    if errors:
        raise ValueError("; ".join(f"{env} {msg}" for _, msg in errors))
    return ParallelDims(degrees, world_size, procs_per_node, nvlink_domain)


def check_model_fits(
    dims: ParallelDims, model: ModelConfig, seq_len: int, local_batch: int, grad_accum_steps: int, microbatches: int,
    names: Mapping[str, str] = FLAG_OF_FIELD,
) -> None:
    """Refuse degrees the model or the batch cannot be divided by.

    Args:
        local_batch: sequences per data-parallel rank per step.
        microbatches: pipeline micro-batches per accumulation step (ignored without pipeline parallel).
        names: how the sentences name the tensor, pipeline and context degrees: what set them. The default is the
            trainer's flags (``--tp 3``); a caller whose degrees came from elsewhere passes its own names
            (``spec.parallelism.tensor`` for a manifest's, :mod:`railtrain.trainer.preflight`), written ``name=3``.

    Raises:
        ValueError: one sentence naming the flag (or field): ``--tp`` must divide the
            heads, widths and vocabulary and ``--seq-len`` (sequence parallel
            shards it); ``--seq-len`` must be a multiple of ``2 × cp × tp``; ``--pp`` must not exceed the blocks nor the
            micro-batches; the local batch must split into accumulation steps
            and micro-batches.
    """
    tp, pp, cp = dims.tp, dims.pp, dims.cp

    def said(field: str, value: int) -> str:
        name = names.get(field, FLAG_OF_FIELD[field])
        return f"{name} {value}" if name.startswith("-") else f"{name}={value}"

    if cp > 1 and seq_len % (2 * cp * tp):
        raise ValueError(f"--seq-len {seq_len} must be a multiple of 2 x {said('context', cp)} x {said('tensor', tp)} = {2 * cp * tp} "
                         "(each context-parallel rank holds two chunks, which sequence parallel splits further)")
    if tp > 1:
        for what, n in (("n_heads", model.n_heads), ("hidden_dim", model.hidden_dim), ("vocab_size", model.vocab_size)):
            if n % tp:
                raise ValueError(f"{said('tensor', tp)} must divide the model's {what} ({n})")
        if seq_len % tp:
            raise ValueError(f"--seq-len {seq_len} must be divisible by {said('tensor', tp)} (sequence parallel shards the sequence)")
    if pp > model.n_layers:
        raise ValueError(f"{said('pipeline', pp)} exceeds the model's {model.n_layers} transformer blocks")
    if pp > 1 and microbatches < pp:
        raise ValueError(
            f"{said('pipeline', pp)} needs at least {pp} micro-batches per step so every stage has work, got {microbatches} "
            "(raise --pp-microbatches or the per-rank batch)"
        )
    per_step = grad_accum_steps * (microbatches if pp > 1 else 1)
    if local_batch % per_step:
        what = "--grad-accum-steps x --pp-microbatches" if pp > 1 else "--grad-accum-steps"
        raise ValueError(f"the per-rank batch of {local_batch} sequences (--batch-size / data-parallel degree) is not divisible by {what} = {per_step}")


def check_pod_world_size(pod: contract.PodEnvironment | None, world_size: int) -> None:
    """Refuse to train when the pod contract and the process group disagree on the job's size.

    A pod whose command ran the trainer without torchrun would otherwise train
    alone, on every node, into the same checkpoint directory.

    Raises:
        ValueError: ``pod.world_size != world_size``; names the variables.
    """
    if pod is not None and pod.world_size != world_size:
        raise ValueError(
            f"{contract.ENV_NNODES}={pod.nnodes} x {contract.ENV_PROCS_PER_NODE}={pod.procs_per_node} "
            f"promises {pod.world_size} processes but torch.distributed has {world_size}; launch with torchrun"
        )


def float8_tokens(dims: ParallelDims, seq_len: int, local_batch: int, grad_accum_steps: int, microbatches: int) -> int:
    """Tokens one forward and backward of a rank carries through each linear layer: the ``M`` of its matrix products.

    ``local_batch / grad_accum_steps`` sequences per forward (``/ microbatches`` more under pipeline parallel), each
    of ``seq_len / context`` tokens on this rank. Tensor parallel does not change it: sequence parallel all-gathers
    the sequence before the column-parallel layers, and the row-parallel ones see it whole.
    """
    sequences = local_batch // grad_accum_steps // (microbatches if dims.pp > 1 else 1)
    return sequences * (seq_len // dims.cp)


def check_float8_tokens(
    dims: ParallelDims, seq_len: int, local_batch: int, grad_accum_steps: int, microbatches: int, precision_source: str = "--mixed-precision fp8"
) -> None:
    """Refuse fp8 training whose micro-batches ``torch._scaled_mm`` cannot multiply.

    A float8 layer's weight gradient is ``grad_out.T @ input``, contracted over the micro-batch's tokens, and
    ``torch._scaled_mm`` on CUDA requires that dimension to be a multiple of
    :data:`~railtrain.crds.precision.SCALED_MM_MULTIPLE` (16): otherwise the first backward fails on the GPU, a crash
    the operator would retry. Emulated runs are held to the same rule, so a job tested on a CPU runs on the GPU
    unchanged. Refused rather than padded: torchao's ``pad_inner_dim`` would copy the operands of every float8 product
    of every step, a cost paid silently for a shape the user can choose (docs/parallelism.md, "FP8 training").

    Args:
        precision_source: what asked for fp8, for the sentence (``--mixed-precision fp8``, ``spec.precision.compute fp8``).

    Raises:
        ValueError: one sentence naming the flags that make the token count and the rule.
    """
    tokens = float8_tokens(dims, seq_len, local_batch, grad_accum_steps, microbatches)
    if tokens % SCALED_MM_MULTIPLE == 0:
        return
    sequences = local_batch // grad_accum_steps // (microbatches if dims.pp > 1 else 1)
    split = " / --grad-accum-steps" + (" / --pp-microbatches" if dims.pp > 1 else "")
    raise ValueError(
        f"{precision_source} needs the tokens per micro-batch per rank, --seq-len {seq_len} / --cp {dims.cp} x {sequences} "
        f"sequence(s) (--batch-size / the data-parallel degree{split}) = {tokens}, to be a multiple of {SCALED_MM_MULTIPLE}: "
        "torch._scaled_mm contracts over them in every float8 layer's weight gradient; change --seq-len or --batch-size"
    )


def auto_microbatches(batch: int, pp: int) -> int:
    """``--pp-microbatches 0``: the largest divisor of ``batch`` (sequences per rank and accumulation step) up to ``2 * pp``."""
    return max(m for m in range(1, min(batch, 2 * pp) + 1) if batch % m == 0)
