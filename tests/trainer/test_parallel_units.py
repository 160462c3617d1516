"""Parallel building blocks without process groups: degrees, model fit, pipeline split, accumulation, recomputation, FLOPs."""

from __future__ import annotations

import copy

import pytest
import torch

from railtrain.crds import contract
from railtrain.crds.parallel import Degrees
from railtrain.trainer.config import parse_args, read_launch_context
from railtrain.trainer.model import PRESETS, ModelConfig, Transformer, lm_loss
from railtrain.trainer.parallel import ParallelDims, check_model_fits, check_pod_world_size, resolve_dims
from railtrain.trainer.pipeline import auto_microbatches, bubble_fraction, keep_stage, stage_layers
from railtrain.trainer.steps import ForwardBackward

TINY = PRESETS["tiny"]

# --- degrees -------------------------------------------------------------------


@pytest.mark.parametrize(
    "flag, tp, pp, pod, world, expected",
    [
        (None, None, None, {}, 1, ("ddp", (1, 1, 1, 1))),
        (None, None, None, {}, 4, ("ddp", (4, 1, 1, 1))),
        ("fsdp", None, None, {}, 4, ("fsdp", (1, 4, 1, 1))),
        ("ddp", None, None, {"data": 1, "fsdp": 4}, 4, ("ddp", (4, 1, 1, 1))),  # a flag wins over the pod
        (None, None, None, {"data": 1, "fsdp": 4, "tensor": 1, "pipeline": 1}, 4, ("fsdp", (1, 4, 1, 1))),
        (None, None, None, {"data": 2, "fsdp": 2}, 4, ("fsdp", (2, 2, 1, 1))),  # HSDP
        (None, None, None, {"data": 4, "fsdp": 1}, 4, ("ddp", (4, 1, 1, 1))),
        (None, None, None, {"data": 1, "fsdp": 2, "tensor": 2, "pipeline": 2}, 8, ("fsdp", (1, 2, 2, 2))),
        (None, 2, None, {}, 4, ("fsdp", (2, 1, 2, 1))),  # replication under TP is FSDP2's (HSDP, shard 1): the log says so
        ("fsdp", 2, None, {}, 8, ("fsdp", (1, 4, 2, 1))),
        (None, None, 2, {}, 4, ("ddp", (2, 1, 1, 2))),
        ("fsdp", 2, 2, {}, 8, ("fsdp", (1, 2, 2, 2))),
        (None, 2, None, {"data": 1, "fsdp": 4}, 4, ("fsdp", (2, 1, 2, 1))),  # --tp alone also replaces the pod's degrees
    ],
)
def test_resolve_dims(flag: str | None, tp: int | None, pp: int | None, pod: dict[str, int], world: int, expected: tuple[str, tuple[int, ...]]) -> None:
    dims = resolve_dims(flag, pod, world, None, tp, pp)
    mode, (data, fsdp, tensor, pipeline) = expected
    assert dims.mode == mode
    assert dims.degrees == Degrees(data, fsdp, tensor, pipeline)
    assert dims.dp_degree * dims.tp * dims.pp == world


@pytest.mark.parametrize(
    "flag, tp, pp, pod, world, ppn, message",
    [
        (None, None, None, {"data": 2, "fsdp": 2}, 8, None, f"{contract.ENV_PARALLELISM} data × fsdp × tensor × pipeline × context = 4 .* must equal the world size 8"),
        (None, None, None, {"data": 1, "tensor": 8}, 8, 4, f"{contract.ENV_PARALLELISM} tensor=8 must divide the processes per node \\(4\\)"),
        (None, None, None, {"data": 2, "experts": 2}, 4, None, "unknown degrees experts"),
        (None, 3, None, {}, 4, None, "--tp 3 x --pp 1 does not divide the world size 4"),
        (None, 4, None, {}, 8, 2, "--tp: tensor=4 must divide the processes per node \\(2\\)"),
        ("fsdp", None, 3, {}, 4, None, "--pp 3 does not divide the world size 4"),
    ],
)
def test_resolve_dims_errors_name_the_source(flag: str | None, tp: int | None, pp: int | None, pod: dict[str, int], world: int, ppn: int | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve_dims(flag, pod, world, ppn, tp, pp)


def test_parallel_dims_validate_themselves() -> None:
    with pytest.raises(ValueError, match="must equal the world size 8"):
        ParallelDims(Degrees(2, 2), 8)
    with pytest.raises(ValueError, match="tensor=4 must divide the processes per node"):
        ParallelDims(Degrees(tensor=4), 4, procs_per_node=2)
    dims = ParallelDims(Degrees(data=2, fsdp=1, tensor=2, pipeline=2), 8, 4)
    assert dims.describe() == "fsdp data=2 fsdp=1 tensor=2 pipeline=2 world=8"
    assert dims.uses_fsdp  # replication under tensor parallel goes through FSDP2's HSDP (DDP takes no DTensors)
    assert not ParallelDims(Degrees(data=2, pipeline=2), 4).uses_fsdp
    assert [dims.dp_rank(r) for r in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]


def test_pod_and_process_group_must_agree_on_size() -> None:
    pod = contract.PodEnvironment(job_name="j", namespace="ns", nnodes=2, node_rank=0, procs_per_node=1, rdzv_addr="127.0.0.1")
    pod = read_launch_context(contract.pod_env(pod)).pod
    check_pod_world_size(pod, 2)
    check_pod_world_size(None, 3)  # standalone: nothing to compare
    with pytest.raises(ValueError, match="promises 2 processes but torch.distributed has 1") as err:
        check_pod_world_size(pod, 1)
    assert contract.ENV_NNODES in str(err.value)


@pytest.mark.parametrize(
    "degrees, seq_len, local_batch, accum, microbatches, message",
    [
        (Degrees(tensor=4), 64, 8, 1, 1, "--tp 4 must divide the model's n_heads \\(6\\)"),
        (Degrees(tensor=2), 63, 8, 1, 1, "--seq-len 63 must be divisible by --tp 2"),
        (Degrees(pipeline=5), 64, 8, 1, 5, "--pp 5 exceeds the model's 4 transformer blocks"),
        (Degrees(), 64, 8, 3, 1, "not divisible by --grad-accum-steps = 3"),
        (Degrees(pipeline=2), 64, 8, 2, 3, "not divisible by --grad-accum-steps x --pp-microbatches = 6"),
        (Degrees(pipeline=4), 64, 8, 1, 2, "--pp 4 needs at least 4 micro-batches per step"),
    ],
)
def test_model_must_split_by_the_degrees(degrees: Degrees, seq_len: int, local_batch: int, accum: int, microbatches: int, message: str) -> None:
    dims = ParallelDims(degrees, degrees.dp * degrees.tensor * degrees.pipeline)
    with pytest.raises(ValueError, match=message):
        check_model_fits(dims, TINY, seq_len, local_batch, accum, microbatches)
    check_model_fits(ParallelDims(Degrees(tensor=2, pipeline=2), 4), TINY, 64, 8, 2, 4)  # a valid one passes


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--data", "x", "--tp", "0"], "--tp must be >= 1"),
        (["--data", "x", "--grad-accum-steps", "0"], "--grad-accum-steps must be >= 1"),
        (["--data", "x", "--pp-microbatches", "-1"], "--pp-microbatches must be >= 0"),
    ],
)
def test_parallel_flags_are_validated(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_args(argv)


def test_switch_flags_parse() -> None:
    c = parse_args(["--data", "x", "--activation-checkpointing", "--cpu-offload", "--tp", "2", "--pp", "2", "--pp-schedule", "gpipe"])
    assert (c.activation_checkpointing, c.cpu_offload, c.tp, c.pp, c.pp_schedule) == (True, True, 2, 2, "gpipe")
    c = parse_args(["--data", "x", "--no-activation-checkpointing"])
    assert (c.activation_checkpointing, c.cpu_offload, c.tp, c.pp, c.pp_schedule, c.grad_accum_steps) == (False, False, None, None, "1f1b", 1)
    with pytest.raises(ValueError, match=r"argument --pp-schedule: invalid choice: 'zb'"):
        parse_args(["--data", "x", "--pp-schedule", "zb"])


# --- pipeline split ----------------------------------------------------------------


def test_stage_layers_are_contiguous_and_balanced() -> None:
    assert stage_layers(4, 2) == [range(0, 2), range(2, 4)]
    assert stage_layers(24, 5) == [range(0, 5), range(5, 10), range(10, 15), range(15, 20), range(20, 24)]
    assert stage_layers(3, 3) == [range(0, 1), range(1, 2), range(2, 3)]
    with pytest.raises(ValueError, match="--pp 5"):
        stage_layers(4, 5)


def test_bubble_fraction_and_default_microbatches() -> None:
    assert bubble_fraction(1, 8) == 0.0
    assert bubble_fraction(2, 4) == pytest.approx(1 / 5)
    assert bubble_fraction(4, 4) == pytest.approx(3 / 7)
    assert bubble_fraction(8, 64) == pytest.approx(7 / 71)
    assert [auto_microbatches(b, 2) for b in (1, 2, 3, 4, 8, 6)] == [1, 2, 3, 4, 4, 3]


def test_stages_chained_equal_the_whole_model() -> None:
    """Each stage keeps its parameters' full-model names, and running the stages in turn is the whole forward."""
    torch.manual_seed(0)
    whole = Transformer(TINY)
    stages = [keep_stage(copy.deepcopy(whole), s, 3) for s in range(3)]
    names = [set(dict(s.named_parameters())) for s in stages]
    assert set.union(*names) == set(dict(whole.named_parameters())) and sum(map(len, names)) == len(set.union(*names))
    assert "tok_embeddings.weight" in names[0] and "output.weight" in names[2] and "layers.3.ffn_norm.weight" in names[2]
    tokens = torch.randint(0, 256, (2, 16))
    h = tokens
    for stage in stages:
        h = stage(h)
    torch.testing.assert_close(h, whole(tokens), rtol=0, atol=0)


# --- one step's forward/backward ---------------------------------------------------


def _grads_after(model: Transformer, run: ForwardBackward, tokens: torch.Tensor) -> tuple[float, dict[str, torch.Tensor]]:
    loss = run(tokens[:, :-1], tokens[:, 1:])
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return loss.item(), grads


def test_accumulation_and_recomputation_leave_the_same_gradients() -> None:
    torch.manual_seed(0)
    model = Transformer(ModelConfig(dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_seq_len=64))
    tokens = torch.randint(0, 256, (8, 33))
    ref_loss, ref = _grads_after(model, ForwardBackward(model), tokens)
    assert ref_loss == pytest.approx(lm_loss(model(tokens[:, :-1]), tokens[:, 1:]).item(), abs=1e-6)
    for block in model.layers.values():
        block.checkpoint_activations = True
    cases = {"accumulate 4": ForwardBackward(model, accum_steps=4), "recompute": ForwardBackward(model)}
    for name, run in cases.items():
        loss, grads = _grads_after(model, run, tokens)
        assert loss == pytest.approx(ref_loss, abs=1e-6), name
        for n in ref:  # float32 sums in another order: equal to ~1e-7 relative
            torch.testing.assert_close(grads[n], ref[n], rtol=1e-5, atol=1e-7, msg=f"{name}: {n}")


def test_pipeline_loss_fn_scales_to_the_mean() -> None:
    logits, targets = torch.randn(4, 8, 256), torch.randint(0, 256, (4, 8))
    fn = ForwardBackward.pipeline_loss_fn(microbatches=2, accum_steps=3)
    assert fn(logits, targets).item() == pytest.approx(lm_loss(logits, targets).item() / 6, rel=1e-6)


# --- model FLOPs -------------------------------------------------------------------


def test_flops_per_token() -> None:
    c = ModelConfig(dim=8, n_layers=2, n_heads=2, hidden_dim=16, vocab_size=10)
    matmul_params = 2 * (4 * 8 * 8 + 3 * 8 * 16 + 2 * 8) + 8 + 10 * 8  # blocks + final norm + output head, no embedding
    assert c.num_params() == matmul_params + 10 * 8
    assert c.flops_per_token(seq_len=4) == 6 * matmul_params + 12 * 2 * 8 * 4
    one_b = PRESETS["1b"]
    assert one_b.num_params() > 1_000_000_000
    # 6N dominates at 2k tokens: attention adds 12 * 24 * 2048 * 2048 = 1.2 GFLOPs to ~7.4.
    assert 7.0e9 < 6 * (one_b.num_params() - 256 * 2048) < 7.6e9
    assert one_b.flops_per_token(2048) - one_b.flops_per_token(0) == 12 * 24 * 2048 * 2048


def test_a_pod_inside_one_nvlink_domain_lets_tensor_span_whole_nodes():
    from railtrain.crds import contract
    from railtrain.trainer.dims import in_nvlink_domain, resolve_dims

    inside = {contract.ENV_NVLINK_DOMAIN: "1"}
    assert in_nvlink_domain(inside) and not in_nvlink_domain({})
    dims = resolve_dims(None, {"tensor": 8, "data": 2}, 16, 4, None, None, nvlink_domain=in_nvlink_domain(inside))
    assert dims.degrees.tensor == 8
    with pytest.raises(ValueError, match="tensor=8 must divide the processes per node"):
        resolve_dims(None, {"tensor": 8, "data": 2}, 16, 4, None, None, nvlink_domain=in_nvlink_domain({}))
    # The domain lets a group span whole nodes, not part of one: the API's rule, not "no node check at all".
    with pytest.raises(ValueError, match=r"tensor=6 must divide the processes per node \(4\) or be a multiple of it"):
        resolve_dims(None, {"tensor": 6, "data": 2}, 12, 4, None, None, nvlink_domain=True)
    with pytest.raises(ValueError, match=r"--cp: context × tensor = 6 must divide the processes per node \(4\) or be a multiple of it"):
        resolve_dims(None, {}, 12, 4, flag_cp=6, nvlink_domain=True)
    assert resolve_dims(None, {}, 16, 4, flag_cp=8, nvlink_domain=True).cp == 8


@pytest.mark.parametrize(
    "degrees, mode",
    [
        (Degrees(data=4), "ddp"),
        (Degrees(tensor=2, data=2), "fsdp"),  # replication under TP: FSDP2 with a shard dimension of 1
        (Degrees(context=4), "fsdp"),  # context parallel shards over the cp ranks (torchtitan), never replicates
        (Degrees(data=2, context=2), "fsdp"),  # HSDP: replicate over data, shard over cp
        (Degrees(fsdp=2, context=2), "fsdp"),
        (Degrees(tensor=4), "ddp"),  # one data-parallel rank: nothing wraps the model
    ],
)
def test_the_start_line_names_the_wrapping_the_model_gets(degrees: Degrees, mode: str) -> None:
    dims = ParallelDims(degrees, 4)
    assert dims.uses_fsdp == (mode == "fsdp")
    assert dims.describe().startswith(f"{mode} ")
