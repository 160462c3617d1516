"""The trainer's configuration: one dataclass, its command line, its validation.

Each field's docstring is its ``--help`` text (read from the source with
:mod:`ast`, the way torchtitan's ``tyro`` does). Fields left at ``None`` are
filled from the pod environment (:mod:`railtrain.crds.contract`) when the
operator or ``railtrain run --local`` launched us; flags always win.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import textwrap
from dataclasses import dataclass
from typing import Sequence

from railtrain.crds import contract
from railtrain.crds.checkpoint import TIERS, TierConfig, default_tier
from railtrain.crds.precision import Compute, Float8Recipe
from railtrain.trainer.presets import PRESETS, ModelConfig

PARALLEL_MODES = ("ddp", "fsdp")
DATA_FORMATS = ("bytes", "tokens")
TOKEN_DTYPES = ("uint16", "uint32")
"""The token file types :mod:`railtrain.trainer.tokens` reads (its ``DTYPES``; kept here so the parser stays numpy-free)."""
PRECISIONS = ("auto", "bf16", "fp8", "fp32")
FP8_RECIPES = tuple(r.value for r in Float8Recipe)
PP_SCHEDULES = ("gpipe", "1f1b")
TIER_FLAGS = {
    "memory": ("checkpoint_memory_dir", "checkpoint_memory_interval", "checkpoint_memory_keep"),
    "local": ("checkpoint_local_dir", "checkpoint_local_interval", "checkpoint_local_keep"),
    "persistent": ("checkpoint_dir", "checkpoint_interval", "checkpoint_keep"),
}
"""Each checkpoint tier's flags: its location, interval and keep (the fields of a
:class:`~railtrain.crds.checkpoint.TierConfig`, in that order); the one place flags and tier configs meet."""

FLOAT32_MAX = 3.4028234663852886e38
"""The largest float32: AdamW multiplies by the learning rate in the parameters' dtype and refuses a larger one
(``RuntimeError: value cannot be converted to type float without overflow``, which a restart would repeat)."""


@dataclass
class TrainConfig:
    """Everything one training run needs; see each field's docstring."""

    data: str = ""
    """Training data. Under --data-format bytes: text, a file, directory, glob, or pkg://<package>/<glob> (e.g. 'pkg://email/*.py'); under tokens: one token file (e.g. data.bin from 'railtrain data tokenize'). Required."""
    data_format: str = "bytes"
    """'bytes' (token ids are the byte values of --data's files, vocabulary 256) or 'tokens' (a flat binary of token ids, declared by <file>.json beside it or by --token-dtype and --vocab-size; docs/data.md)."""
    token_dtype: str | None = None
    """Under --data-format tokens: the ids' type, 'uint16' or 'uint32'. Default: the dtype declared in <file>.json."""
    vocab_size: int | None = None
    """The model's vocabulary: at least the data's (256 for bytes; the declared one for tokens, which every id must be below). Default: the data's."""
    preset: str = "tiny"
    """Model size preset."""
    steps: int = 200
    """Train until this optimizer step (counting steps already done by a resumed checkpoint)."""
    batch_size: int = 8
    """Global batch in sequences per step, split evenly across data-parallel ranks."""
    seq_len: int = 128
    """Tokens (bytes) per sequence."""
    lr: float = 3e-3
    """Peak AdamW learning rate."""
    warmup_steps: int = 20
    """Steps of linear learning-rate warmup from 0 to --lr."""
    lr_decay_steps: int = 0
    """If > 0, cosine-decay the learning rate to 10% of --lr at this step (0: constant after warmup, so a run can be extended)."""
    weight_decay: float = 0.1
    """AdamW decoupled weight decay (not applied to norms)."""
    grad_clip: float = 1.0
    """Clip the global gradient L2 norm to this value (0 disables)."""
    seed: int = 0
    """Seed of the model initialisation and of the data stream."""
    data_seed: int | None = None
    """Seed of the data stream alone (default: --seed); another value keeps the model's initialisation and changes only the order of the data."""
    parallel: str | None = None
    """Data parallelism over the ranks left by --tp, --pp and --cp: 'ddp' (replicate) or 'fsdp' (FSDP2, sharded per block). Default: from the pod's parallelism (fsdp>1 means FSDP2, HSDP with data>1 too), else ddp."""
    tp: int | None = None
    """Tensor-parallel degree (Megatron-style, with sequence parallel; must divide the processes per node and the preset's heads). Given with --parallel, --pp or --cp, the flags alone set the degrees. Default: from the pod's parallelism, else 1."""
    cp: int | None = None
    """Context-parallel degree: ranks that split every sequence (ring attention, causal load balancing; --seq-len must be a multiple of 2 x cp x tp). Default: from the pod's parallelism, else 1."""
    pp: int | None = None
    """Pipeline-parallel stages (torch.distributed.pipelining; the blocks are split evenly). Default: from the pod's parallelism, else 1."""
    pp_schedule: str = "1f1b"
    """Pipeline schedule: 'gpipe' (all forwards, then all backwards) or '1f1b' (less activation memory, same bubble)."""
    pp_microbatches: int = 0
    """Pipeline micro-batches per step (per accumulation step); the bubble is (pp-1)/(microbatches+pp-1). 0: the largest divisor of the per-rank batch up to 2 x --pp."""
    grad_accum_steps: int = 1
    """Gradient accumulation: split each rank's share of --batch-size into this many micro-steps per optimizer step."""
    activation_checkpointing: bool = False
    """Recompute each transformer block's activations in backward instead of keeping them (less memory, ~1/3 more compute)."""
    cpu_offload: bool = False
    """FSDP2 only: keep sharded parameters, gradients and optimizer state in CPU memory (CPUOffloadPolicy)."""
    checkpoint_dir: str | None = None
    """Persistent checkpoint tier: a shared directory or an fsspec URI (s3://, gs://, memory://), step-<N>/ below it; on start the trainer resumes from the newest complete and valid checkpoint of any tier. Default: from the pod environment, else none."""
    checkpoint_interval: int | None = None
    """Save to --checkpoint-dir every this many steps, and at the last step. Default: from the pod environment, else the API's default (spec.checkpoint.interval)."""
    checkpoint_keep: int | None = None
    """Keep this many newest complete checkpoints in --checkpoint-dir; older ones are deleted (0 keeps all). Default: from the pod environment, else the API's default (spec.checkpoint.keep)."""
    checkpoint_memory_dir: str | None = None
    """Memory tier: a directory in RAM that outlives the trainer (e.g. under /dev/shm), one per node; each rank keeps its shard there and a copy on the next node. Default: from the pod environment, else off."""
    checkpoint_memory_interval: int | None = None
    """Steps between memory-tier saves. Default: from the pod environment, else --checkpoint-interval."""
    checkpoint_memory_keep: int | None = None
    """Memory-tier checkpoints kept. Default: from the pod environment, else the API's default (spec.checkpoint.memory.keep)."""
    checkpoint_local_dir: str | None = None
    """Local tier: a directory on the node's own disk; each rank keeps its shard there. Default: from the pod environment, else off."""
    checkpoint_local_interval: int | None = None
    """Steps between local-tier saves. Default: from the pod environment, else --checkpoint-interval."""
    checkpoint_local_keep: int | None = None
    """Local-tier checkpoints kept. Default: from the pod environment, else the API's default (spec.checkpoint.local.keep)."""
    checkpoint_cleanup: bool = True
    """When the run succeeds and the persistent tier holds its last step, delete this run's shards in the memory and local tiers (docs/checkpoints.md, "Run identity and cleanup"); --no-checkpoint-cleanup keeps them."""
    checkpoint_async: bool = True
    """Write checkpoints in the background: the step loop waits only for a copy of the state in RAM (--no-checkpoint-async: until every tier is written)."""
    metrics_port: int | None = None
    """Serve Prometheus metrics on this port from local rank 0 (0: off). Default: from the pod environment, else off."""
    peak_tflops: float = 0.0
    """Peak dense TFLOP/s of one device in the training precision, for the MFU metric (e.g. 989 for an H100 SXM in bf16); 0: no MFU."""
    device: str = "auto"
    """'cpu', 'cuda', or 'auto' (cuda when available)."""
    mixed_precision: str | None = None
    """'bf16' (bfloat16 compute, float32 master weights), 'fp8' (as bf16, with the transformer blocks' linear layers multiplying in float8 through torchao; needs a GPU of compute capability 8.9+ or --fp8-emulate; docs/parallelism.md), 'fp32', or 'auto' (bf16 on cuda, fp32 on cpu). Default: the pod's spec.precision.compute, else auto."""
    fp8_recipe: str | None = None
    """Float8 scaling under --mixed-precision fp8: 'tensorwise' (one dynamic scale per tensor; FSDP2 gathers weights in float8) or 'rowwise' (one power-of-two scale per row; more accurate, slower). Default: the pod's spec.precision.float8.recipe, else tensorwise."""
    fp8_emulate: bool | None = None
    """Under --mixed-precision fp8: emulate the float8 matrix products in float32 (values rounded to float8), so fp8 runs on a CPU or an older GPU, without its speed-up. Default: the pod's spec.precision.float8.emulate, else off."""
    threads: int = 0
    """CPU threads per process (0: 1 when several processes share the job, else torch's default)."""
    log_every: int = 1
    """Print a step line every this many steps (the first and last step always print)."""
    metrics_file: str = ""
    """If set, rank 0 appends one JSON object per step (full-precision loss) to this file."""
    job_name: str = ""
    """Name shown in the log. Default: the TrainingJob's name from the pod environment."""
    run_id: str = ""
    """The run that owns the node-local checkpoint tiers: their shards record it, and shards of another run are never resumed. Default: from the pod environment (spec.checkpoint.runId, else the TrainingJob's uid), else none (any shard)."""
    health: bool = True
    """Run the health checks (SDC fingerprints and known-answer test, numeric anomalies, stragglers, hang watchdog; docs/health.md); --no-health turns them off, as RAILTRAIN_HEALTH=0 does. Their settings come from RAILTRAIN_HEALTH_* variables."""

    def validate(self) -> None:
        """Check every field on its own.

        Raises:
            ValueError: one sentence naming the offending flag.
        """
        if not self.data:
            raise ValueError("--data is required (a path, glob, or pkg://<package>/<glob>)")
        if self.data_format not in DATA_FORMATS:
            raise ValueError(f"--data-format must be one of {', '.join(DATA_FORMATS)}, got {self.data_format!r}")
        if self.token_dtype is not None and (self.data_format != "tokens" or self.token_dtype not in TOKEN_DTYPES):
            raise ValueError(f"--token-dtype must be one of {', '.join(TOKEN_DTYPES)}, with --data-format tokens; got {self.token_dtype!r} with {self.data_format}")
        if self.vocab_size is not None and self.vocab_size < 1:
            raise ValueError(f"--vocab-size must be >= 1, got {self.vocab_size}")
        if self.preset not in PRESETS:
            raise ValueError(f"--preset must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        for name in ("steps", "batch_size", "seq_len", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{_flag(name)} must be >= 1, got {getattr(self, name)}")
        for name in ("warmup_steps", "lr_decay_steps", "threads", "weight_decay", "grad_clip", "peak_tflops"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{_flag(name)} must be >= 0, got {getattr(self, name)}")
        if not 0 < self.lr <= FLOAT32_MAX:
            raise ValueError(f"--lr must be > 0 and at most {FLOAT32_MAX:.4g} (the optimizer applies it in float32), got {self.lr}")
        max_len = PRESETS[self.preset].max_seq_len
        if self.seq_len > max_len:
            raise ValueError(f"--seq-len {self.seq_len} exceeds preset {self.preset!r}'s max_seq_len {max_len}")
        if self.parallel is not None and self.parallel not in PARALLEL_MODES:
            raise ValueError(f"--parallel must be one of {', '.join(PARALLEL_MODES)}, got {self.parallel!r}")
        for name, low in (("checkpoint_interval", 1), ("checkpoint_memory_interval", 1), ("checkpoint_local_interval", 1),
                          ("checkpoint_keep", 0), ("checkpoint_memory_keep", 1), ("checkpoint_local_keep", 1), ("metrics_port", 0)):
            if getattr(self, name) is not None and getattr(self, name) < low:
                raise ValueError(f"--{_flag(name)} must be >= {low}, got {getattr(self, name)}")
        for name in ("checkpoint_memory_dir", "checkpoint_local_dir"):
            if getattr(self, name) and "://" in getattr(self, name):
                raise ValueError(f"--{_flag(name)} must be a local directory, got {getattr(self, name)!r}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"--device must be auto, cpu or cuda, got {self.device!r}")
        for name in ("tp", "pp", "cp"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")
        if self.pp_schedule not in PP_SCHEDULES:
            raise ValueError(f"--pp-schedule must be one of {', '.join(PP_SCHEDULES)}, got {self.pp_schedule!r}")
        if self.pp_microbatches < 0:
            raise ValueError(f"--pp-microbatches must be >= 0, got {self.pp_microbatches}")
        if self.grad_accum_steps < 1:
            raise ValueError(f"--grad-accum-steps must be >= 1, got {self.grad_accum_steps}")
        if self.mixed_precision is not None and self.mixed_precision not in PRECISIONS:
            raise ValueError(f"--mixed-precision must be one of {', '.join(PRECISIONS)}, got {self.mixed_precision!r}")
        if self.fp8_recipe is not None and self.fp8_recipe not in FP8_RECIPES:
            raise ValueError(f"--fp8-recipe must be one of {', '.join(FP8_RECIPES)}, got {self.fp8_recipe!r}")


@dataclass(frozen=True)
class LaunchContext:
    """What the launcher told us, beyond flags.

    Attributes:
        pod: the pod contract when ``RAILTRAIN_*`` variables are set, else ``None``.
        parallelism: degrees parsed from ``pod.parallelism`` (``{}`` when absent).
    """

    pod: contract.PodEnvironment | None = None
    parallelism: dict[str, int] = dataclasses.field(default_factory=dict)


def read_launch_context(environ: dict[str, str]) -> LaunchContext:
    """Read the pod contract if the launcher set it (detected by its job-name variable).

    Raises:
        ValueError: (:class:`contract.ContractError`) a contract variable is
            missing or malformed; the message names the variable.
    """
    if contract.ENV_JOB_NAME not in environ:
        return LaunchContext()
    pod = contract.read_env(environ)
    return LaunchContext(pod=pod, parallelism=contract.parse_parallelism(pod.parallelism))


def apply_launch_context(config: TrainConfig, ctx: LaunchContext) -> TrainConfig:
    """Fill the fields left at ``None``/empty from the pod contract, then from defaults.

    Returns:
        A new, validated config whose ``checkpoint_dir`` is a str ('' = off) and
        ``checkpoint_interval`` an int, ``mixed_precision`` and ``fp8_recipe``
        strs and ``fp8_emulate`` a bool. ``parallel`` is left as given: the
        degrees are resolved with the world size in :mod:`railtrain.trainer.parallel`.

    Raises:
        ValueError: the merged config is invalid.
    """
    pod = ctx.pod
    updates: dict[str, object] = {}
    for tier in launch_tiers(config, pod):
        for flag, value in zip(TIER_FLAGS[tier.name], (tier.location, tier.interval, tier.keep)):
            if getattr(config, flag) is None:
                updates[flag] = value
    if config.metrics_port is None:
        updates["metrics_port"] = pod.metrics_port if pod else 0
    if not config.job_name and pod:
        updates["job_name"] = pod.job_name
    updates.update(_precision_updates(config, pod))
    if not config.run_id and pod:
        updates["run_id"] = pod.run_id
    merged = dataclasses.replace(config, **updates)
    if merged.checkpoint_interval is not None and merged.checkpoint_interval < 1:
        raise ValueError(f"{contract.ENV_CHECKPOINT_INTERVAL} must be >= 1, got {merged.checkpoint_interval}")
    merged.validate()
    return merged


def launch_tiers(config: TrainConfig, pod: contract.PodEnvironment | None) -> tuple[TierConfig, ...]:
    """The checkpoint tiers the launcher gives, which fill the tier flags left at ``None``.

    Returns:
        The pod's tiers (:meth:`~railtrain.crds.contract.PodEnvironment.checkpoint_tiers`) when a pod
        contract is set; else every tier off with the API's defaults
        (:func:`~railtrain.crds.checkpoint.default_tier`), except that a node-local tier's interval
        is ``--checkpoint-interval`` (or its default).
    """
    if pod is not None:
        return pod.checkpoint_tiers()
    persistent = default_tier("persistent")
    interval = persistent.interval if config.checkpoint_interval is None else config.checkpoint_interval
    return tuple(t if t.name == "persistent" else dataclasses.replace(t, interval=interval) for t in map(default_tier, TIERS))


def checkpoint_tiers(config: TrainConfig) -> list[TierConfig]:
    """The checkpoint tiers the flags (filled by :func:`apply_launch_context`) turn on, fastest first.

    Raises:
        ValueError: a tier with a location has no interval or keep (the config was not filled).
    """
    tiers = []
    for name in TIERS:
        location, interval, keep = (getattr(config, flag) for flag in TIER_FLAGS[name])
        if location:
            if interval is None or keep is None:
                raise ValueError(f"the {name} checkpoint tier has no interval or keep: fill the config with apply_launch_context first")
            tiers.append(TierConfig(name, location, interval, keep))
    return tiers


def _precision_updates(config: TrainConfig, pod: contract.PodEnvironment | None) -> dict[str, object]:
    """The precision fields left at ``None``, from the pod's ``RAILTRAIN_PRECISION``/``FLOAT8_*`` variables, else the defaults.

    Raises:
        ValueError: a precision variable holds a value the API does not allow; names the variable.
    """
    allowed = {
        contract.ENV_PRECISION: ("",) + tuple(c.value for c in Compute),
        contract.ENV_FLOAT8_RECIPE: ("",) + FP8_RECIPES,
        contract.ENV_FLOAT8_EMULATE: ("", "0", "1"),
    }
    values = {name: "" for name in allowed}
    if pod is not None:
        values = {contract.ENV_PRECISION: pod.precision, contract.ENV_FLOAT8_RECIPE: pod.float8_recipe, contract.ENV_FLOAT8_EMULATE: pod.float8_emulate}
    for name, value in values.items():
        if value not in allowed[name]:
            raise ValueError(f"{name} must be one of {', '.join(repr(v) for v in allowed[name])}, got {value!r}")
    updates: dict[str, object] = {}
    if config.mixed_precision is None:
        updates["mixed_precision"] = values[contract.ENV_PRECISION] or "auto"
    if config.fp8_recipe is None:
        updates["fp8_recipe"] = values[contract.ENV_FLOAT8_RECIPE] or Float8Recipe.TENSORWISE.value
    if config.fp8_emulate is None:
        updates["fp8_emulate"] = values[contract.ENV_FLOAT8_EMULATE] == "1"
    return updates


def model_shape(config: TrainConfig) -> ModelConfig:
    """The model ``config`` trains: its preset with ``--vocab-size`` (the data's vocabulary once the trainer has read
    it; 256 while unknown: ``railtrain validate`` checks the degrees before any data is read)."""
    preset = PRESETS[config.preset]
    return preset if config.vocab_size is None else dataclasses.replace(preset, vocab_size=config.vocab_size)


def _flag(name: str) -> str:
    return name.replace("_", "-")


def field_docs(cls: type) -> dict[str, str]:
    """Map each dataclass field of ``cls`` to the docstring written under it (``{}`` if no source)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for node, nxt in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


class ArgumentsError(ValueError):
    """argparse refused the command line (an unknown flag, a bad choice, a missing value); the message is argparse's."""


class _Parser(argparse.ArgumentParser):
    """argparse, raising :class:`ArgumentsError` instead of printing the usage and exiting.

    Every rank parses the same command line, so argparse's own usage block
    came once per process; the one line that says what is wrong is what a
    person (and the termination message) needs.
    """

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ArgumentsError(f"{message} (python -m railtrain.trainer --help lists the flags)")


def build_parser() -> argparse.ArgumentParser:
    """An argparse parser with one ``--flag-name`` per :class:`TrainConfig` field; usage errors raise :class:`ArgumentsError`."""
    parser = _Parser(
        prog="python -m railtrain.trainer",
        description="Train a transformer LM on bytes or token ids (launch under torchrun for several processes).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    docs = field_docs(TrainConfig)
    types = {"int": int, "float": float, "str": str, "str | None": str, "int | None": int}
    for f in dataclasses.fields(TrainConfig):
        kwargs: dict[str, object] = {"default": f.default, "help": docs.get(f.name, "").replace("%", "%%")}
        if str(f.type) in ("bool", "bool | None"):
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = types[str(f.type)]
        if f.name == "preset":
            kwargs["choices"] = list(PRESETS)
        elif f.name == "parallel":
            kwargs["choices"] = list(PARALLEL_MODES)
        elif f.name == "device":
            kwargs["choices"] = ["auto", "cpu", "cuda"]
        elif f.name == "pp_schedule":
            kwargs["choices"] = list(PP_SCHEDULES)
        elif f.name == "mixed_precision":
            kwargs["choices"] = list(PRECISIONS)
        elif f.name == "fp8_recipe":
            kwargs["choices"] = list(FP8_RECIPES)
        elif f.name == "data_format":
            kwargs["choices"] = list(DATA_FORMATS)
        elif f.name == "token_dtype":
            kwargs["choices"] = list(TOKEN_DTYPES)
        parser.add_argument(f"--{_flag(f.name)}", dest=f.name, **kwargs)
    return parser


def parse_args(argv: Sequence[str] | None) -> TrainConfig:
    """Parse a command line into a validated :class:`TrainConfig` (not yet merged with the pod contract).

    Raises:
        ArgumentsError: argparse refused the command line (a ``ValueError``;
            its message is argparse's line, e.g. ``unrecognized arguments: --stesp 5``).
        SystemExit: code 0 for ``--help``.
        ValueError: a value is out of range; the message names the flag.
    """
    ns = build_parser().parse_args(argv)
    config = TrainConfig(**vars(ns))
    config.validate()
    return config
