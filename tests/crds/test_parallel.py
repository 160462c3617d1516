"""The parallel-degree rule (railtrain.crds.parallel): table-driven, and the same verdict as the API's SPEC_RULES."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from railtrain.crds import parallel
from railtrain.crds.api import SPEC_RULES, Parallelism, Topology
from railtrain.crds.parallel import Degrees

# (data, fsdp, tensor, pipeline[, context]), nodes, procs per node, fields with a problem ("" = the product rule)
CASES = [
    ((8, 1, 1, 1), 2, 4, set()),
    ((1, 8, 1, 1), 2, 4, set()),
    ((2, 2, 2, 1), 2, 4, set()),
    ((1, 2, 4, 2), 4, 4, set()),  # tensor = a whole node
    ((1, 1, 8, 1), 1, 8, set()),
    ((3, 1, 1, 1), 2, 4, {""}),
    ((1, 1, 8, 1), 2, 4, {"tensor"}),  # 8 = world, but a TP group would span two nodes
    ((4, 1, 3, 1), 3, 4, {"tensor"}),
    ((1, 1, 3, 1), 1, 4, {"", "tensor"}),
    ((2, 1, 1, 1, 4), 2, 4, set()),  # a CP group = a whole node
    ((1, 2, 2, 1, 2), 2, 4, set()),  # context × tensor = a whole node
    ((2, 1, 1, 1, 2), 1, 4, set()),
    ((1, 1, 1, 1, 8), 2, 4, {"context"}),  # 8 = world, but the ring would cross nodes
    ((1, 2, 2, 1, 2), 1, 8, set()),
    ((2, 1, 2, 1, 4), 2, 8, set()),  # context × tensor = 8 = procs per node
    ((1, 1, 2, 1, 3), 1, 6, set()),  # context need not be a power of two
    ((1, 1, 2, 1, 3), 2, 3, {"tensor"}),
    ((1, 1, 1, 1, 4), 1, 6, {"", "context"}),
    ((1, 1, 4, 1, 2), 2, 4, {"context"}),  # tensor fits a node, context × tensor = 8 does not
    ((1, 1, 3, 1, 2), 1, 4, {"", "tensor"}),  # the tensor sentence alone: context's would repeat it
    ((1, 1, 1, 2, 2), 1, 4, {"context"}),  # context with pipeline stages: not run by the trainer
]


@pytest.mark.parametrize("degrees, nodes, ppn, bad", CASES)
def test_problems_name_the_fields(degrees: tuple[int, ...], nodes: int, ppn: int, bad: set[str]) -> None:
    found = parallel.problems(Degrees(*degrees), nodes * ppn, ppn)
    assert {field for field, _ in found} == bad
    for field, sentence in found:
        assert (f"{field}" in sentence) if field else "world size" in sentence


@pytest.mark.parametrize("degrees, nodes, ppn, bad", CASES)
def test_operator_rules_agree_with_the_trainer_rule(degrees: tuple[int, ...], nodes: int, ppn: int, bad: set[str]) -> None:
    """The API's parallelism rules (what the operator and kube-apiserver enforce) fail exactly when the shared rule does."""
    spec = SimpleNamespace(parallelism=Parallelism(**dict(zip(parallel.FIELDS, degrees))), nodes=nodes, procs_per_node=ppn, topology=Topology())
    rules = [r for r in SPEC_RULES if r.field_path.startswith(".parallelism")]
    assert len(rules) == 4
    failed = {r.field_path for r in rules if not r.check(spec)}
    assert failed == {".parallelism" + (f".{f}" if f else "") for f in bad}


@pytest.mark.parametrize(
    "tensor, ppn, nvlink, ok",
    [(8, 4, True, True), (8, 4, False, False), (6, 4, True, False), (2, 4, False, True), (12, 4, True, True)],
)
def test_tensor_spans_whole_nodes_only_inside_one_nvlink_domain(tensor, ppn, nvlink, ok) -> None:
    assert parallel.tensor_fits(tensor, ppn, nvlink) is ok
    spec = SimpleNamespace(parallelism=Parallelism(tensor=tensor, data=ppn * 6 // tensor if (ppn * 6) % tensor == 0 else 1), nodes=6, procs_per_node=ppn,
                           topology=Topology(nvlink_domain=nvlink))
    rule = next(r for r in SPEC_RULES if r.field_path == ".parallelism.tensor")
    assert rule.check(spec) is ok


def test_node_check_is_skipped_without_procs_per_node() -> None:
    assert parallel.problems(Degrees(tensor=8), 8) == []
    assert parallel.problems(Degrees(tensor=8), 8, 4) != []


def test_degrees_below_one_are_reported_alone() -> None:
    found = parallel.problems(Degrees(data=0, fsdp=4), 4, 4)
    assert found == [("data", "data=0 must be >= 1")]


def test_rank_layout_is_row_major_with_tensor_innermost() -> None:
    d = Degrees(data=2, fsdp=2, tensor=2, pipeline=2)  # 16 ranks
    coords = [parallel.coordinates(r, d) for r in range(16)]
    assert coords[0] == {"pp": 0, "dp_replicate": 0, "dp_shard": 0, "cp": 0, "tp": 0}
    assert coords[1] == {"pp": 0, "dp_replicate": 0, "dp_shard": 0, "cp": 0, "tp": 1}
    assert coords[2] == {"pp": 0, "dp_replicate": 0, "dp_shard": 1, "cp": 0, "tp": 0}
    assert coords[15] == {"pp": 1, "dp_replicate": 1, "dp_shard": 1, "cp": 0, "tp": 1}
    # Every TP group is a run of consecutive ranks, so it fits a node whenever tensor divides procs per node.
    groups: dict[tuple[int, ...], list[int]] = {}
    for r, c in enumerate(coords):
        groups.setdefault((c["pp"], c["dp_replicate"], c["dp_shard"]), []).append(r)
    assert all(g == list(range(g[0], g[0] + 2)) for g in groups.values())
    # The data-parallel rank numbers the 4 batch slices; both pipeline stages and both TP ranks of a slice share it.
    assert sorted({parallel.dp_rank(r, d) for r in range(16)}) == [0, 1, 2, 3]
    assert [parallel.dp_rank(r, d) for r in (0, 1, 8, 9)] == [0, 0, 0, 0]
    assert parallel.dp_rank(6, d) == 3
    with pytest.raises(ValueError, match="outside"):
        parallel.coordinates(16, d)


def test_context_groups_are_consecutive_ranks_just_outside_tensor() -> None:
    """cp sits between dp_shard and tp: one CP group with its TP ranks is context × tensor consecutive ranks (one node)."""
    d = Degrees(data=2, fsdp=1, tensor=2, pipeline=1, context=2)  # 8 ranks, 4 per node
    coords = [parallel.coordinates(r, d) for r in range(8)]
    assert [c["cp"] for c in coords] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert [c["tp"] for c in coords] == [0, 1, 0, 1, 0, 1, 0, 1]
    assert [parallel.cp_rank(r, d) for r in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
    rings: dict[tuple[int, ...], list[int]] = {}
    for r, c in enumerate(coords):
        rings.setdefault((c["pp"], c["dp_replicate"], c["dp_shard"], c["tp"]), []).append(r)
    assert sorted(rings.values()) == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert all(r // 4 == ring[0] // 4 for ring in rings.values() for r in ring)  # each ring inside one node of 4
    # Both CP ranks of a ring train on the same slice of the batch (they split its sequences).
    assert [parallel.dp_rank(r, d) for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert parallel.dp_stride(d) == 4  # data peers are a node apart: same local rank, so the same rail
    assert Degrees(tensor=2).describe() == "data=1 fsdp=1 tensor=2 pipeline=1"
    assert d.describe() == "data=2 fsdp=1 tensor=2 pipeline=1 context=2"


def test_api_parallelism_uses_the_shared_arithmetic() -> None:
    p = Parallelism(data=2, fsdp=4, tensor=2, pipeline=3)
    assert p.product == parallel.product(p) == 48
    assert p.inner == parallel.inner(p) == 24
    assert Degrees.of(p).mesh_shape == (3, 2, 4, 1, 2)
    q = Parallelism(data=2, fsdp=2, tensor=2, context=2)
    assert q.product == 16 and q.inner == 8 and Degrees.of(q).mesh_shape == (1, 2, 2, 2, 2)


@pytest.mark.parametrize("nvlink", [False, True])
def test_the_trainer_rule_is_the_api_rule_inside_an_nvlink_domain_too(nvlink: bool) -> None:
    """One rule: for every tensor × context × procs-per-node, the shared rule with ``nvlink_domain`` (what
    ``railtrain validate`` applies to the trainer's arguments and the trainer at start) refuses exactly what the API's
    rules refuse (docs/fabric.md's job: tensor 8, procsPerNode 4, nvlinkDomain true, is accepted by both)."""
    rules = [r for r in SPEC_RULES if r.field_path in (".parallelism.tensor", ".parallelism.context")]
    for ppn in (1, 2, 4, 8):
        for tensor in (1, 2, 3, 4, 6, 8, 16):
            for context in (1, 2, 4, 8):
                nodes = 2 * tensor * context  # enough nodes for a whole number of groups at every ppn
                world = nodes * ppn
                degrees = Degrees(data=world // (tensor * context), tensor=tensor, context=context)
                spec = SimpleNamespace(parallelism=Parallelism(**vars(degrees)), nodes=nodes, procs_per_node=ppn, topology=Topology(nvlink_domain=nvlink))
                api = {r.field_path.removeprefix(".parallelism.") for r in rules if not r.check(spec)}
                trainer = {field for field, _ in parallel.problems(degrees, world, ppn, nvlink_domain=nvlink)}
                assert trainer == api, (tensor, context, ppn, nvlink)
    nvl72 = Degrees(data=2, tensor=8)
    assert parallel.problems(nvl72, 16, 4, nvlink_domain=True) == []
    assert [f for f, _ in parallel.problems(nvl72, 16, 4)] == ["tensor"]
