"""All-or-nothing, topology-aware gang placement on synthetic cluster snapshots (pure)."""

import pytest

from railtrain.operator.scheduling.snapshot import parse_quantity, snapshot
from railtrain.operator.scheduling.placement import GangRequest, Placement, place_gang
from railtrain.operator.scheduling.refusal import Refusal
from railtrain.operator.scheduling.topology import PRESETS

from .builders import BLOCK, HOST, RACK, fabric, node, other_pod


def req(nodes, gpus=8, fixed=None, **kw):
    kw.setdefault("procs_per_node", gpus or 1)
    return GangRequest("ns/job", nodes, gpus, fixed or {}, **kw)


def full(*names, gpus=8):
    return {n: gpus for n in names}


def rack_of(name):
    return name[:4]  # b0r1n2 -> b0r1


def assert_valid(result, snap, request):
    """Invariants every placement keeps: distinct eligible nodes with room, fixed ranks kept, ranks grouped by domain."""
    assert len(set(result.nodes)) == len(result.nodes)
    assert len(result.nodes) in request.sizes
    for rank, name in enumerate(result.nodes):
        n = snap.nodes[name]
        assert rank in request.fixed or (n.eligible and n.free_gpus >= request.gpus_per_node)
        assert request.fixed.get(rank, name) == name
    if not request.fixed:  # consecutive ranks: each domain's ranks form one contiguous run
        for depth in range(len(snap.levels) - 1):
            runs = [snap.nodes[n].domains[: depth + 1] for n in result.nodes]
            seen, prev = set(), None
            for key in runs:
                assert key == prev or key not in seen, f"domain {key} split in rank order {result.nodes}"
                seen.add(key)
                prev = key
    assert len(result.domains) == len(result.nodes)


# (id, fabric kwargs, request kwargs, expected): expected is a dict of
#   nodes: exact node tuple | racks: set of racks used | domain: (level, value) | size: int
#   reason: refusal reason | text: substring of the message | aligned: railAligned
CASES = [
    ("one-node-best-fit", dict(used={"b0r1n2": 4}), dict(nodes=1, gpus=4), dict(nodes=("b0r1n2",))),
    ("one-node-empty-cluster", {}, dict(nodes=1), dict(nodes=("b0r0n0",), domain=(HOST, "b0r0n0"))),
    ("rack-exact-fit", dict(used=full("b0r0n0")), dict(nodes=3), dict(nodes=("b0r0n1", "b0r0n2", "b0r0n3"), domain=(RACK, "b0-r0"))),
    ("best-fit-rack-over-empty-rack", dict(used=full("b1r1n0", "b1r1n1")), dict(nodes=2), dict(racks={"b1r1"})),
    ("required-rack-on-fragmented-racks", dict(used=full("b0r0n0", "b0r0n1", "b0r1n0", "b1r0n0", "b1r0n1", "b1r1n0", "b1r1n1")),
     dict(nodes=3, policy="required", level=RACK), dict(racks={"b0r1"})),
    ("required-rack-waits-for-a-rack", dict(used=full("b0r0n0", "b0r1n0", "b1r0n0", "b1r1n0")),
     dict(nodes=4, policy="required", level=RACK), dict(reason="TopologyUnsatisfiable", text="waits for a rack to free up")),
    ("required-rack-never-fits", {}, dict(nodes=5, policy="required", level=RACK),
     dict(reason="TopologyUnsatisfiable", text="It can never fit: the largest rack has 4")),
    ("required-block-spans-racks", dict(used=full("b0r0n0")), dict(nodes=6, policy="required", level=BLOCK),
     dict(domain=(BLOCK, "b0"), racks={"b0r0", "b0r1"})),  # best fit: b0 is left with 1 free node, b1 would keep 2
    ("required-block-too-big", {}, dict(nodes=9, policy="required", level=BLOCK), dict(reason="TopologyUnsatisfiable")),
    ("preferred-rack-spans-within-block", dict(used=full("b0r0n0", "b1r0n0", "b1r1n0")), dict(nodes=6, policy="preferred", level=RACK),
     dict(domain=(BLOCK, "b1"), text="no single rack has 6 nodes")),
    ("preferred-block-must-span-blocks", dict(used=full("b0r0n0", "b1r0n0")), dict(nodes=10, policy="preferred", level=BLOCK),
     dict(domain=("", ""), text="so the gang spans blocks", size=10)),
    ("tightest-domain-beats-best-fit-block", dict(racks=2, used=full("b0r0n0", "b0r0n1", "b0r1n0", "b0r1n1", "b1r1n0", "b1r1n1", "b1r1n2", "b1r1n3")),
     dict(nodes=4), dict(racks={"b1r0"})),
    ("never-refused-because-tightest-too-small", dict(used=full("b0r0n0", "b0r1n0", "b1r0n0", "b1r1n0")), dict(nodes=11), dict(size=11)),
    ("fewest-racks-when-spanning", dict(blocks=1, racks=4, used=full("b0r0n0", "b0r0n1", "b0r0n2", "b0r1n0", "b0r1n1", "b0r2n0")),
     dict(nodes=7), dict(racks={"b0r3", "b0r2"})),
    ("policy-none-places-anywhere", dict(used=full("b0r0n0")), dict(nodes=14, policy="none"), dict(size=14)),
    ("unknown-required-level", {}, dict(nodes=2, policy="required", level="example.com/pod"),
     dict(reason="UnknownTopologyLevel", text="not one of the operator's topology levels")),
    ("unknown-preferred-level-is-noted", {}, dict(nodes=2, policy="preferred", level="example.com/pod"), dict(size=2, text="was ignored")),
    ("total-suffices-no-node-fits", dict(blocks=1, racks=1, used={f"b0r0n{i}": 4 for i in range(4)}), dict(nodes=2),
     dict(reason="Unschedulable", text="0 of 4 nodes fit now: 4 with fewer than 8 free GPUs (16 free across them); the free GPUs add up to enough but are spread")),
    ("pods-larger-than-any-node", {}, dict(nodes=1, gpus=16), dict(reason="Unschedulable", text="It can never fit as it is")),
    ("not-ready-nodes-excluded", dict(blocks=1, racks=1, down=("b0r0n0", "b0r0n1")), dict(nodes=3), dict(reason="Unschedulable", text="2 NotReady")),
    ("elastic-largest-count-that-fits", dict(blocks=1, racks=2, used=full("b0r0n0", "b0r0n1", "b0r1n0")), dict(nodes=8, counts=tuple(range(2, 9))),
     dict(size=5, text="elastic: admitted 5 of at most 8")),
    ("elastic-below-min-refused", dict(blocks=1, racks=1, used=full("b0r0n0", "b0r0n1", "b0r0n2")), dict(nodes=4, counts=(2, 3, 4)),
     dict(reason="Unschedulable", text="gang needs 2..4 nodes")),
    ("elastic-admissible-counts-only", dict(blocks=1, racks=2, used=full("b0r0n0", "b0r0n1", "b0r1n0")), dict(nodes=6, counts=(2, 4, 6)), dict(size=4)),
    ("elastic-within-required-rack", dict(used=full("b0r0n0", "b0r1n0", "b1r0n0", "b1r1n0")), dict(nodes=4, counts=(1, 2, 3, 4), policy="required", level=RACK),
     dict(size=3, racks={"b0r0"})),
    ("rails-one-layout-first", dict(blocks=1, racks=2, rails={f"b0r0n{i}": 4 for i in range(4)}), dict(nodes=3),
     dict(racks={"b0r1"}, aligned=True)),
    ("rails-mixed-when-no-layout-fits", dict(blocks=1, racks=2, rails={f"b0r0n{i}": 4 for i in range(4)}), dict(nodes=6),
     dict(size=6, aligned=False, text="not rail-aligned: the nodes have 4, 8 rails")),
    ("rails-fewer-than-procs", dict(blocks=1, racks=1, rails={f"b0r0n{i}": 4 for i in range(4)}), dict(nodes=2),
     dict(aligned=False, text="8 processes per node share 4 rails")),
    ("rails-partial-node-pods", {}, dict(nodes=2, gpus=4), dict(aligned=False, text="device plugin picks which")),
    ("rails-dp-stride-misaligned", {}, dict(nodes=3, dp_stride=3), dict(aligned=False, text="stride fsdp×context×tensor=3")),
    ("rails-dp-stride-whole-nodes", {}, dict(nodes=4, dp_stride=16), dict(aligned=True)),
    ("cpu-only-gang", {}, dict(nodes=3, gpus=0), dict(size=3, aligned=None, text="rails do not apply")),
    ("fixed-ranks-pull-the-rest-into-their-rack", dict(used=full("b0r0n0")), dict(nodes=3, fixed={0: "b1r1n2"}, policy="required", level=RACK),
     dict(racks={"b1r1"})),
    ("fixed-ranks-rack-without-room", dict(used=full("b0r0n0", "b0r0n1", "b0r0n2")), dict(nodes=3, fixed={0: "b0r0n3"}, policy="required", level=RACK),
     dict(reason="TopologyUnsatisfiable")),
    ("unlabelled-nodes-are-their-own-domains", dict(blocks=1, racks=1, extra={f"b0r0n{i}": {BLOCK: None, RACK: None} for i in range(4)}),
     dict(nodes=2, policy="required", level=RACK), dict(reason="TopologyUnsatisfiable", text="It can never fit")),
    ("unlabelled-nodes-preferred-still-place", dict(blocks=1, racks=1, extra={f"b0r0n{i}": {BLOCK: None, RACK: None} for i in range(4)}),
     dict(nodes=4), dict(size=4, domain=("", ""))),
    ("large-fabric-job-in-one-block", dict(blocks=4, racks=4, per_rack=8), dict(nodes=32), dict(domain=(BLOCK, "b0"))),
    ("large-fabric-one-rack", dict(blocks=4, racks=4, per_rack=8, used=full("b0r0n0")), dict(nodes=8), dict(racks={"b0r1"})),
]


@pytest.mark.parametrize("name,shape,request_kw,expected", CASES, ids=[c[0] for c in CASES])
def test_placement_table(name, shape, request_kw, expected):
    snap = snapshot(*fabric(**shape))
    request = req(**request_kw)
    result = place_gang(request, snap)
    text = result.message if isinstance(result, Refusal) else result.message()
    if "reason" in expected:
        assert isinstance(result, Refusal), text
        assert result.reason == expected["reason"], text
    else:
        assert isinstance(result, Placement), text
        assert_valid(result, snap, request)
    if "text" in expected:
        assert expected["text"] in text, text
    if "nodes" in expected:
        assert result.nodes == expected["nodes"]
    if "racks" in expected:
        assert {rack_of(n) for n in result.nodes} == expected["racks"], result.nodes
    if "size" in expected:
        assert len(result.nodes) == expected["size"]
    if "domain" in expected:
        assert (result.summary["domainLevel"], result.summary["domain"]) == expected["domain"]
    if "aligned" in expected:
        assert result.summary.get("railAligned") == expected["aligned"], text


def test_summary_records_spread_and_domains_per_rank():
    snap = snapshot(*fabric(used=full("b0r0n0", "b1r0n0")))
    result = place_gang(req(10, policy="preferred", level=BLOCK), snap)
    assert result.summary["spread"] == {BLOCK: 2, RACK: 3, HOST: 10}
    assert result.summary["rails"] == 8 and result.summary["policy"] == "preferred" and result.summary["level"] == BLOCK
    assert result.domains[0] == {BLOCK: "b0", RACK: "b0-r0", HOST: result.nodes[0]}
    assert [d[BLOCK] for d in result.domains] == ["b0"] * 7 + ["b1"] * 3  # block by block


def test_placement_is_deterministic():
    shape = fabric(blocks=3, racks=3, per_rack=3, used=full("b0r0n0", "b1r2n1", "b2r1n2"))
    results = {place_gang(req(7), snapshot(*shape)).nodes for _ in range(5)}
    assert len(results) == 1


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_places_on_its_own_labels(preset):
    levels = PRESETS[preset]
    nodes = []
    for i in range(8):
        labels = {}
        for depth, level in enumerate(levels[:-1]):
            key = level.split("|")[-1]  # the alternative key, to check alternatives resolve
            labels[key] = f"d{depth}-{i // (2 ** (len(levels) - 1 - depth))}"
        nodes.append(node(f"n{i}", labels=labels))
    snap = snapshot(nodes, [], levels=levels)
    result = place_gang(req(2, policy="required", level=levels[-2]), snap)
    assert isinstance(result, Placement), result
    assert result.summary["domainLevel"] == levels[-2]


@pytest.mark.parametrize(
    "text,value", [("8", 8), ("500m", 0.5), ("64Gi", 64 * 2**30), ("1k", 1000), (4, 4), ("1e3", 1000)]
)
def test_parse_quantity(text, value):
    assert parse_quantity(text) == value


def test_places_every_rank_on_distinct_nodes():
    snap = snapshot([node(f"n{i}") for i in range(4)], [])
    result = place_gang(req(3), snap)
    assert isinstance(result, Placement)
    assert len(set(result.nodes)) == 3


def test_total_suffices_but_no_node_fits_refuses():
    nodes = [node(f"n{i}") for i in range(4)]
    pods = [other_pod(f"n{i}", 4) for i in range(4)]  # 16 GPUs free in total, 4 per node
    result = place_gang(req(2, gpus=8), snapshot(nodes, pods))
    assert isinstance(result, Refusal) and result.reason == "Unschedulable"
    assert "0 of 4 nodes fit" in result.message


@pytest.mark.parametrize(
    "bad,why",
    [
        (dict(ready=False), "NotReady"),
        (dict(unschedulable=True), "cordoned"),
        (dict(taints=[{"key": "gpu-broken", "effect": "NoSchedule"}]), "taint gpu-broken"),
        (dict(labels={"railtrain.dev/quarantined": "sdc"}), "quarantined"),
    ],
)
def test_ineligible_nodes_are_excluded_and_named(bad, why):
    snap = snapshot([node("a"), node("b", **bad)], [])
    result = place_gang(req(2), snap)
    assert isinstance(result, Refusal) and why in result.message


def test_gpu_resource_taint_is_tolerated_like_extended_resource_toleration():
    gpu_taint = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    snap = snapshot([node("a", taints=gpu_taint), node("b", taints=[{"key": "nvidia.com/gpu", "effect": "NoExecute"}])], [])
    assert snap.nodes["a"].eligible and not snap.nodes["b"].eligible


def test_pinned_unbound_pods_count_as_promised_capacity():
    snap = snapshot([node("a"), node("b")], [other_pod("a", 8, phase="Pending", pinned=True)])
    assert snap.nodes["a"].free_gpus == 0
    assert isinstance(place_gang(req(2), snap), Refusal)


def test_terminal_pods_free_their_gpus():
    snap = snapshot([node("a")], [other_pod("a", 8, phase="Succeeded")])
    assert snap.nodes["a"].free_gpus == 8


def test_best_fit_prefers_fuller_nodes():
    snap = snapshot([node("big", gpus=8), node("small", gpus=8)], [other_pod("small", 4)])
    result = place_gang(req(1, gpus=4), snap)
    assert result.nodes == ("small",)


def test_fixed_ranks_are_kept():
    snap = snapshot([node("a"), node("b"), node("c")], [])
    result = place_gang(req(3, fixed={1: "c"}), snap)
    assert result.nodes[1] == "c" and len(set(result.nodes)) == 3


@pytest.mark.parametrize("nodes", [[node("a"), node("b")], [node("a"), node("b"), node("c", unschedulable=True)]])
def test_rank_pinned_to_a_lost_node_asks_for_a_new_gang(nodes):
    result = place_gang(req(2, fixed={0: "c"}), snapshot(nodes, []))
    assert isinstance(result, Refusal) and result.reason == "PinnedNodeUnavailable" and "rank 0 on c" in result.message


def test_reserve_takes_gpus_off_the_named_nodes_only():
    snap = snapshot([node("a"), node("b")], [])
    after = snap.reserve(["a", "ghost"], 8)
    assert after.nodes["a"].free_gpus == 0 and after.nodes["b"].free_gpus == 8 and snap.nodes["a"].free_gpus == 8


def test_replica_groups_are_placed_each_in_its_own_tightest_domain_all_or_nothing():
    """Issue 31, per-group placement: a 4-node job of 2 replica groups, required at the rack level, on racks where
    no rack has 4 free nodes but two have 2 each: each group (2 consecutive ranks) lands inside one rack, the two
    racks differ, rails kept inside each group; the same job without groups waits for a rack. A group that fits
    nowhere refuses the whole gang with a message naming the group; a relocating group is placed around the
    ranks of the groups that stay (their nodes fixed)."""
    busy = full("b0r0n0", "b0r0n1", "b0r1n0", "b0r1n1", "b1r0n0", "b1r0n1", "b1r0n2", "b1r1n0", "b1r1n1", "b1r1n2")
    nodes, pods = fabric(used=busy)  # free: b0r0n2-3, b0r1n2-3, b1r0n3, b1r1n3
    snap = snapshot(nodes, pods, "nvidia.com/gpu", PRESETS["railtrain"])
    alone = place_gang(req(4, policy="required", level=RACK), snap)
    assert isinstance(alone, Refusal) and alone.reason == "TopologyUnsatisfiable"
    request = req(4, policy="required", level=RACK, groups=2)
    placed = place_gang(request, snap)
    assert isinstance(placed, Placement), placed
    assert_valid(placed, snap, request)
    first, second = {rack_of(n) for n in placed.nodes[:2]}, {rack_of(n) for n in placed.nodes[2:]}
    assert len(first) == 1 and len(second) == 1 and first != second, placed.nodes
    assert "each of the 2 replica groups in its own tightest domain" in placed.explanation and "group 1 inside" in placed.explanation
    assert placed.summary["spread"][RACK] == 2
    three = place_gang(req(6, policy="required", level=RACK, groups=3), snap)  # three racks with 2 free: b1's have 1 each
    assert isinstance(three, Refusal) and three.message.startswith("replica group 2 (ranks 4-5): "), three.message
    moved = place_gang(req(4, fixed={0: "b0r0n2", 1: "b0r0n3"}, policy="required", level=RACK, groups=2), snap)
    assert isinstance(moved, Placement) and moved.nodes[:2] == ("b0r0n2", "b0r0n3") and {rack_of(n) for n in moved.nodes[2:]} == {"b0r1"}
