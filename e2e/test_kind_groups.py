"""Replica groups on kind with real pods (issue 31): a killed group is replaced alone while the other keeps stepping,
and the Lighthouse pod deleted mid-run is recreated and both groups step on.

One job, ``spec.faultTolerance: {replicaGroups: 2, minReplicas: 1}``: the tiny example on 2 workers, one node per
group (pod ``rg-0`` is group 0, ``rg-1`` group 1), every step logged with the kubelet's timestamps. Group 1's trainer
worker is killed (kill -9, as in e2e/test_kind.py): its pod fails, the operator replaces group 1's pod alone, and the
replacement heals from group 0 through torchft (its Manager and checkpoint server reached at the pod's fully
qualified name, trainer/replica.py: advertised_host) and steps with it. Group 0's pod is never touched and it never
skips a step. Then the Lighthouse's pod is deleted: the operator creates it again and both groups step on. What each
fault cost (the survivor's longest gap between steps, the replacement's time from the kill to its first step) is
printed as a ``GROUPS {json}`` line, not asserted against the goals: speed is measured in bench/ (the figures are in
docs/fault-tolerance.md).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from datetime import datetime

import pytest

from railtrain.crds import replica_groups as rg

from .conftest import railtrain, wait_for
from .kind_support import KindE2E, write_job
from .test_kind import KILL_WORKER, TINY

pytestmark = [pytest.mark.kind, pytest.mark.timeout(3600)]  # the first test also builds the images and starts the cluster

NAME = "rg"
STAMPED_STEP = re.compile(r"^(\S+) (?:\[rank 0\] )?step=(\d+) loss=", re.MULTILINE)
HEALED = re.compile(r"replica group 1: healed from a peer at step (\d+)")


def stamped_steps(kind_cluster: KindE2E, pod: str, ns: str) -> list[tuple[float, int]]:
    """``(epoch seconds, step)`` of every step line the pod's current container logged (kubelet timestamps)."""
    out = kind_cluster.kubectl("logs", pod, "-n", ns, "--timestamps", check=False).stdout
    return [(_epoch(ts), int(step)) for ts, step in STAMPED_STEP.findall(out)]


def _epoch(stamp: str) -> float:
    """RFC 3339 with nanoseconds (``2026-12-05T13:40:01.123456789Z``) → seconds since the epoch."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    return datetime.fromisoformat(head + "+00:00").timestamp() + (float("0." + frac) if frac else 0.0)


def longest_gap(steps: list[tuple[float, int]], start: float, end: float) -> float:
    """The longest time between consecutive step lines that touch ``[start, end]`` (seconds)."""
    times = [t for t, _ in steps]
    gaps = [b - a for a, b in zip(times, times[1:]) if b >= start and a <= end]
    return max(gaps, default=0.0)


def uid_of(kind_cluster: KindE2E, ns: str, pod: str) -> str | None:
    found = [p for p in kind_cluster.pods(ns) if p["metadata"]["name"] == pod]
    return found[0]["metadata"]["uid"] if found else None


def running_uid(kind_cluster: KindE2E, ns: str, pod: str) -> str | None:
    found = [p for p in kind_cluster.pods(ns) if p["metadata"]["name"] == pod and (p.get("status") or {}).get("phase") == "Running"
             and not p["metadata"].get("deletionTimestamp")]
    return found[0]["metadata"]["uid"] if found else None


def test_a_killed_group_is_replaced_alone_and_heals_while_the_other_steps_and_a_deleted_lighthouse_comes_back(kind_cluster, kind_ns, tmp_path):
    path, _ = write_job(
        tmp_path, TINY, kind_cluster.trainer_image,
        args=["--preset", "tiny", "--data", "pkg://email/*.py", "--steps", "100000", "--log-every", "1"],
        checkpoint={"location": "runs/rg/checkpoints", "interval": 100000},
        faultTolerance={"replicaGroups": 2, "minReplicas": 1},
    )  # fmt: skip
    path.write_text(path.read_text().replace("name: tiny", f"name: {NAME}", 1))
    railtrain("submit", str(path), "-n", kind_ns, kubeconfig=kind_cluster.kubeconfig)
    lighthouse = rg.lighthouse_name(NAME)
    wait_for(lambda: kind_cluster.phase(NAME, kind_ns) == "Running", 300, f"{NAME} Running")
    for pod in (f"{NAME}-0", f"{NAME}-1"):  # both groups in the quorum and stepping
        wait_for(lambda: (s := stamped_steps(kind_cluster, pod, kind_ns)) and s[-1][1] >= 20, 300, f"{pod} at step 20", interval=2)
    survivor = uid_of(kind_cluster, kind_ns, f"{NAME}-0")
    victim = uid_of(kind_cluster, kind_ns, f"{NAME}-1")

    # 1. Group 1's trainer killed: its pod fails and is replaced alone; the replacement heals from group 0.
    killed_at = time.time()
    kind_cluster.kubectl("exec", f"{NAME}-1", "-n", kind_ns, "--", "sh", "-c", KILL_WORKER)
    wait_for(lambda: (u := running_uid(kind_cluster, kind_ns, f"{NAME}-1")) and u != victim, 240, "group 1's pod replaced and Running", interval=1)
    healed = wait_for(lambda: HEALED.search(kind_cluster.kubectl("logs", f"{NAME}-1", "-n", kind_ns, check=False).stdout), 240,
                      "group 1's replacement healed from group 0", interval=1)
    back = wait_for(lambda: stamped_steps(kind_cluster, f"{NAME}-1", kind_ns), 120, "group 1's replacement stepping", interval=1)
    rejoined_at = back[0][0]
    ours = wait_for(lambda: (s := stamped_steps(kind_cluster, f"{NAME}-0", kind_ns)) and s[-1][0] > rejoined_at + 5 and s, 120,
                    "group 0 stepping past the rejoin", interval=1)
    assert uid_of(kind_cluster, kind_ns, f"{NAME}-0") == survivor  # group 0 never touched
    numbers = [n for _, n in ours]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), "group 0 skipped or repeated a logged step"
    assert int(healed.group(1)) > 20  # healed to the survivor's step, not from scratch
    status = kind_cluster.job(NAME, kind_ns)["status"]
    groups = status.get("replicaGroups") or []
    assert status.get("restarts", 0) == 0 and status.get("infrastructureRestarts", 0) == 0, status
    assert [g.get("replacements", 0) for g in groups] == [0, 1], groups
    kill = {"survivor_stall_s": round(longest_gap(ours, killed_at, rejoined_at), 2), "rejoin_s": round(rejoined_at - killed_at, 2),
            "survivor_steps_alone": sum(1 for t, _ in ours if killed_at <= t <= rejoined_at)}

    # 2. The Lighthouse's pod deleted: created again by the operator; both groups step on, no group restarted.
    first_lighthouse = uid_of(kind_cluster, kind_ns, lighthouse)
    assert first_lighthouse, [p["metadata"]["name"] for p in kind_cluster.pods(kind_ns)]
    replaced = {f"{NAME}-{g}": uid_of(kind_cluster, kind_ns, f"{NAME}-{g}") for g in (0, 1)}
    deleted_at = time.time()
    kind_cluster.kubectl("delete", "pod", lighthouse, "-n", kind_ns, "--grace-period=0", "--force", "--wait=false")
    wait_for(lambda: (u := running_uid(kind_cluster, kind_ns, lighthouse)) and u != first_lighthouse, 120, "the Lighthouse pod created again and Running", interval=1)
    relit_at = time.time()  # the new Lighthouse pod Running: steps from 2 s after it were taken with the new one
    after = {}
    for pod in replaced:
        after[pod] = wait_for(lambda: (s := stamped_steps(kind_cluster, pod, kind_ns)) and sum(1 for t, _ in s if t > relit_at + 2) >= 10 and s, 300,
                              f"{pod} stepping 10 steps with the new Lighthouse", interval=2)
    assert {pod: uid_of(kind_cluster, kind_ns, pod) for pod in replaced} == replaced  # no group restarted
    gone = {pod: round(longest_gap(s, deleted_at, s[-1][0]), 2) for pod, s in after.items()}  # the deletion → 10 steps with the new one
    print("GROUPS " + json.dumps({"kill": kill, "lighthouse_stall_s": gone}))
    kind_cluster.kubectl("delete", "trainingjob", NAME, "-n", kind_ns, "--wait=false")


def test_a_groups_node_stopped_moves_that_group_to_the_free_worker_while_the_other_steps(kind_cluster, kind_ns, tmp_path):
    """A replica group's node lost (``docker stop`` of its kind container): once the node is NotReady
    (``runPolicy.nodeLostGraceSeconds`` 0), the operator force-deletes the group's pod, the admission pass places the
    group on the third worker beside the other group's kept node, and the new pod heals from the other group, which
    kept stepping on its own pod throughout. The group stopped is one whose node does not run the Lighthouse (a
    Lighthouse on a lost node is force-deleted and created again: tests/operator/test_replica_groups.py). The node is
    started again afterwards, so the kind tests after this one have their three workers."""
    name = "rgn"
    path, _ = write_job(
        tmp_path, TINY, kind_cluster.trainer_image,
        args=["--preset", "tiny", "--data", "pkg://email/*.py", "--steps", "100000", "--log-every", "1"],
        checkpoint={"location": "runs/rgn/checkpoints", "interval": 100000},
        faultTolerance={"replicaGroups": 2, "minReplicas": 1}, runPolicy={"nodeLostGraceSeconds": 0},
    )  # fmt: skip
    path.write_text(path.read_text().replace("name: tiny", f"name: {name}", 1))
    railtrain("submit", str(path), "-n", kind_ns, kubeconfig=kind_cluster.kubeconfig)
    wait_for(lambda: kind_cluster.phase(name, kind_ns) == "Running", 300, f"{name} Running")
    for pod in (f"{name}-0", f"{name}-1"):
        wait_for(lambda: (s := stamped_steps(kind_cluster, pod, kind_ns)) and s[-1][1] >= 20, 300, f"{pod} at step 20", interval=2)
    nodes = {p["metadata"]["name"]: (p.get("spec") or {}).get("nodeName") for p in kind_cluster.pods(kind_ns)}
    lighthouse_node = nodes.get(rg.lighthouse_name(name))
    lost_group = 1 if nodes[f"{name}-1"] != lighthouse_node else 0
    survivor, victim = f"{name}-{1 - lost_group}", f"{name}-{lost_group}"
    lost, kept = nodes[victim], nodes[survivor]
    survivor_uid = uid_of(kind_cluster, kind_ns, survivor)
    stopped_at = time.time()
    subprocess.run(["docker", "stop", "--time", "5", lost], check=True, capture_output=True, timeout=120)
    try:
        moved = wait_for(lambda: (p := [q for q in kind_cluster.pods(kind_ns) if q["metadata"]["name"] == victim
                                        and (q.get("status") or {}).get("phase") == "Running" and q["spec"].get("nodeName") not in (None, lost)]) and p[0],
                         300, f"group {lost_group}'s pod Running on another worker", interval=2)  # fmt: skip
        assert moved["spec"]["nodeName"] != kept, moved["spec"]["nodeName"]
        healed = re.compile(rf"replica group {lost_group}: healed from a peer at step (\d+)")
        wait_for(lambda: healed.search(kind_cluster.kubectl("logs", victim, "-n", kind_ns, check=False).stdout), 240, f"group {lost_group} healed", interval=2)
        back = wait_for(lambda: stamped_steps(kind_cluster, victim, kind_ns), 120, f"group {lost_group} stepping again", interval=1)
        ours = wait_for(lambda: (s := stamped_steps(kind_cluster, survivor, kind_ns)) and s[-1][0] > back[0][0] + 5 and s, 120,
                        f"{survivor} stepping past the rejoin", interval=1)
        assert uid_of(kind_cluster, kind_ns, survivor) == survivor_uid  # the other group never touched
        numbers = [n for _, n in ours]
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), "the other group skipped or repeated a logged step"
        status = kind_cluster.job(name, kind_ns)["status"]
        assert status.get("restarts", 0) == 0 and status.get("infrastructureRestarts", 0) == 0, status
        assert [g.get("replacements", 0) for g in status.get("replicaGroups") or []] == [int(g == lost_group) for g in (0, 1)], status.get("replicaGroups")
        print("GROUPS " + json.dumps({"node_lost": {"survivor_stall_s": round(longest_gap(ours, stopped_at, back[0][0]), 2),
                                                    "rejoin_s": round(back[0][0] - stopped_at, 2)}}))  # fmt: skip
    finally:
        subprocess.run(["docker", "start", lost], capture_output=True, timeout=120)
        kind_cluster.kubectl("wait", "--for=condition=Ready", f"node/{lost}", "--timeout=240s", check=False, timeout=260)
        kind_cluster.kubectl("delete", "trainingjob", name, "-n", kind_ns, "--wait=false", check=False)
