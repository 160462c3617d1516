"""Hot spares on a real control plane (KWOK nodes): the operator keeps a job's spare pod bound on a free node of the
gang's rack once the gang runs, the ledger counts it (another job cannot take its node), and when node rank 0's
coordinator says a spare took a lost rank, the pods are made to say so: the spare carries the rank, the lost rank's
pod is deleted, no other pod is touched, the job counts one infrastructure restart and no gang restart, and a new
spare is bound; a waiting spare whose node goes NotReady is replaced. KWOK pods run no process: the test serves what node rank 0's supervisor would, to the operator's
own progress reader run in-process against the API server."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone

import pytest

from railtrain.cli.controlplane.cluster import LABEL_KWOK_NOT_READY
from railtrain.crds import contract, inplace
from railtrain.operator import progress
from railtrain.operator.kube.verbs import Kube
from tests.polling import wait_for

from .clusterkit import G, P, V, condition, events_with, job_body, job_obj, job_status, pods_of

pytestmark = pytest.mark.cluster

POLICY = {"restartInPlace": True, "restartBackoffSeconds": 0}


def split(pods):
    """(rank pods by rank, spare pods) of Running, bound pods not being deleted."""
    ok = [p for p in pods if p.status.phase == "Running" and p.spec.node_name and not p.metadata.deletion_timestamp]
    ranks = {int(p.metadata.labels[contract.LABEL_NODE_RANK]): p for p in ok if contract.LABEL_NODE_RANK in p.metadata.labels}
    return ranks, [p for p in ok if contract.LABEL_SPARE in p.metadata.labels]


def test_a_spare_waits_in_the_gangs_rack_takes_a_lost_rank_without_a_gang_restart_and_is_refilled(api, namespace, gpu_nodes, operator, kube):
    core, custom = api
    names = gpu_nodes(4)  # one rack of four
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("sp", spares=1, runPolicy=POLICY))

    def settled():
        ranks, spare = split(pods_of(core, namespace, "sp"))
        return (ranks, spare) if len(ranks) == 2 and len(spare) == 1 else None

    ranks, [spare] = wait_for(settled, 90, "the gang Running and its spare bound")
    rank_nodes = {p.spec.node_name for p in ranks.values()}
    assert spare.spec.node_name in set(names) - rank_nodes and spare.metadata.name == "sp-spare-0-0"
    env = {e.name: e.value for e in next(c for c in spare.spec.containers if c.name == "trainer").env}
    assert env["RAILTRAIN_SPARE"] == "sp-spare-0-0" and spare.spec.containers[0].command[:3] == ["python", "-m", "railtrain.crds.supervisor"]

    # the ledger counts the spare's GPUs as the job's: of four nodes, one is left, and a 2-node job waits
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("other", nodes=2))
    wait_for(lambda: (c := condition(job_status(custom, namespace, "other"), "Scheduled")) and c["status"] == "False", 60, "other waits")

    # node rank 0's coordinator gave rank 1 to the spare (its supervisor fell silent): the reader reads it with the ledger
    ledger = inplace.Ledger(restarts=0, attempt=1, infrastructure=1, causes={inplace.SPARE_CAUSE: 1}, spares=1)
    body = json.dumps({"ledger": ledger.to_json(), "holders": {"1": "sp-spare-0-0"}, "attempt": 1})
    edge, locks = Kube(kube.api_client), {}

    def read() -> bool:  # a status write can lose a race with the operator's own (409): the next read counts it
        reader = progress.Reader(fetch=lambda url: body if url.endswith("/ledger") else "")
        done = reader.poll(edge, [job_obj(custom, namespace, "sp")], datetime.now(timezone.utc), lambda ns, n: locks.setdefault((ns, n), threading.Lock()))
        return any(f.result(timeout=30) for f in done) or job_status(custom, namespace, "sp").get("inPlaceRestarts") == 1

    wait_for(read, 60, "the takeover read and counted")

    def taken():
        now, spares = split(pods_of(core, namespace, "sp"))
        rank1 = now.get(1)
        return now if rank1 is not None and rank1.metadata.name == "sp-spare-0-0" and 0 in now and len(spares) == 1 else None

    now = wait_for(taken, 60, "rank 1 held by the spare pod, and a new spare")
    assert now[0].metadata.uid == ranks[0].metadata.uid  # rank 0 untouched
    assert now[1].metadata.uid == spare.metadata.uid and contract.LABEL_SPARE not in now[1].metadata.labels  # the same pod, now rank 1
    assert all(p.metadata.name != "sp-1" for p in pods_of(core, namespace, "sp"))  # the lost rank's pod is gone
    [refill] = split(pods_of(core, namespace, "sp"))[1]
    assert refill.metadata.name == "sp-spare-0-1" and refill.spec.node_name not in {now[0].spec.node_name, now[1].spec.node_name}
    st = job_status(custom, namespace, "sp")
    assert (st["phase"], st.get("restarts", 0), st["infrastructureRestarts"], st["inPlaceRestarts"]) == ("Running", 0, 1, 1)
    seen = events_with(core, namespace, "sp", "SpareTakeover", "InPlaceRestart")
    assert "hot spare sp-spare-0-0 on " in seen["SpareTakeover"][0].message and "took node rank 1 (sp-1 on " in seen["SpareTakeover"][0].message
    assert "(spare 1)" in seen["InPlaceRestart"][0].message and "infrastructure restarts 1/" in seen["InPlaceRestart"][0].message
    assert condition(job_status(custom, namespace, "other"), "Scheduled")["status"] == "False"  # still no room: the new spare holds its node
    # the node of a waiting spare lost (NotReady): that spare is deleted at once and another bound on the free node left
    core.patch_node(refill.spec.node_name, {"metadata": {"labels": {LABEL_KWOK_NOT_READY: "true"}}})

    def moved():  # one list: two could see the old spare Running in the first and gone in the second (stop 47's CI)
        pods = pods_of(core, namespace, "sp")
        spares = split(pods)[1]
        gone = all(p.metadata.uid != refill.metadata.uid for p in pods)
        return spares if gone and len(spares) == 1 else None

    [third] = wait_for(moved, 60, "the lost node's spare replaced")
    used = {now[0].spec.node_name, now[1].spec.node_name, refill.spec.node_name}
    # a spare's name is the first index no pod holds: -2 while the lost one is still terminating, -1 once it is gone
    assert third.metadata.name in ("sp-spare-0-1", "sp-spare-0-2") and third.spec.node_name in set(names) - used
    owner = refill.metadata.owner_references[0]  # the job's deletion takes its spares (ownerReferences, the garbage collector)
    assert (owner.kind, owner.name, owner.uid, owner.controller) == ("TrainingJob", "sp", job_obj(custom, namespace, "sp")["metadata"]["uid"], True)


def test_node_rank_0_lost_its_spare_takes_rank_0_read_from_another_supervisor_s_copy(api, namespace, gpu_nodes, operator, kube):
    """Node rank 0's supervisor (the coordinator's first host) is silent; node rank 1's supervisor, which hosts the
    coordinator now, serves its state: the reader finds it there, the spare takes rank 0 (rank 0's pod deleted, rank 1
    untouched, no gang restart), and from then on rank 0's metrics are read from the spare's pod."""
    core, custom = api
    gpu_nodes(3)
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("zero", spares=1, runPolicy=POLICY))

    def settled():
        ranks, spare = split(pods_of(core, namespace, "zero"))
        return (ranks, spare) if len(ranks) == 2 and len(spare) == 1 and all(p.status.pod_ip for p in [*ranks.values(), *spare]) else None

    ranks, [spare] = wait_for(settled, 90, "the gang Running and its spare bound, with IPs")
    ledger = inplace.Ledger(restarts=0, attempt=1, infrastructure=1, causes={inplace.SPARE_CAUSE: 1}, spares=1)
    body = json.dumps({"ledger": ledger.to_json(), "holders": {"0": spare.metadata.name}, "attempt": 1, "host": 1, "copy": True})
    silent, asked = ranks[0].status.pod_ip, []

    def fetch(url: str) -> str:
        asked.append(url)
        if f"//{silent}:" in url:
            raise OSError("timed out")  # node rank 0's node is lost
        return body if url.endswith("/ledger") else "railtrain_step 7\n"

    edge, locks = Kube(kube.api_client), {}

    def read() -> bool:
        reader = progress.Reader(fetch=fetch)
        done = reader.poll(edge, [job_obj(custom, namespace, "zero")], datetime.now(timezone.utc), lambda ns, n: locks.setdefault((ns, n), threading.Lock()))
        return any(f.result(timeout=30) for f in done) or job_status(custom, namespace, "zero").get("inPlaceRestarts") == 1

    wait_for(read, 60, "the takeover read from rank 1's copy and counted")
    assert any(ranks[1].status.pod_ip in u and u.endswith("/ledger") for u in asked)

    def taken():
        pods = pods_of(core, namespace, "zero")  # one list per poll
        now = split(pods)[0]
        return now if 0 in now and now[0].metadata.name == spare.metadata.name and all(p.metadata.name != "zero-0" for p in pods) else None

    now = wait_for(taken, 60, "rank 0 held by the spare pod and zero-0 gone")
    assert now[1].metadata.uid == ranks[1].metadata.uid and now[0].metadata.uid == spare.metadata.uid  # nothing recreated
    st = job_status(custom, namespace, "zero")
    assert (st["phase"], st.get("restarts", 0), st["infrastructureRestarts"]) == ("Running", 0, 1)
    asked.clear()
    job = job_obj(custom, namespace, "zero")  # one read, due or not (the last one wrote progress a moment ago)
    progress.Reader(fetch=fetch)._one(edge, (namespace, "zero"), progress.rank_zero_pods(job), datetime.now(timezone.utc), lambda ns, n: threading.Lock(), job)
    assert any(now[0].status.pod_ip in u and u.endswith("/metrics") for u in asked), asked  # rank 0's metrics: the spare's pod now


def test_a_verdict_that_sends_a_node_out_gives_its_rank_to_the_spare_and_the_operator_quarantines_the_node(api, namespace, gpu_nodes, operator, kube):
    """Issue 29, "when a node is lost or quarantined, a spare takes exactly the lost rank's place": the coordinator
    gave rank 1 to the spare because a hardware-suspect verdict named rank 1's node (crds/inplace.py:
    decide_verdict_spare); its ledger names the node left. The operator, which alone may taint a node, quarantines it
    (taint, status.quarantines, avoidNodes, a NodeQuarantined Event), makes the spare rank 1 and deletes rank 1's old
    pod; rank 0 is untouched, there is no gang restart, and the refilled spare avoids the quarantined node."""
    core, custom = api
    names = gpu_nodes(4)
    custom.create_namespaced_custom_object(G, V, namespace, P, job_body("sdc", spares=1, runPolicy=POLICY))

    def settled():
        ranks, spare = split(pods_of(core, namespace, "sdc"))
        return (ranks, spare) if len(ranks) == 2 and len(spare) == 1 else None

    ranks, [spare] = wait_for(settled, 90, "the gang Running and its spare bound")
    bad = ranks[1].spec.node_name
    left = {"node": bad, "verdict": contract.VERDICT_HARDWARE_SUSPECT, "reason": contract.REASON_RERUN_MISMATCH, "quarantine": True,
            "evidence": "hardware-suspect verdict of rank 1 (RerunMismatch: re-executed step 40 differs)"}  # fmt: skip
    ledger = inplace.Ledger(restarts=0, attempt=1, infrastructure=1, causes={contract.VERDICT_HARDWARE_SUSPECT: 1}, spares=1, left=(left,))
    body = json.dumps({"ledger": ledger.to_json(), "holders": {"1": spare.metadata.name}, "attempt": 1})
    edge, locks = Kube(kube.api_client), {}

    def read() -> bool:
        reader = progress.Reader(fetch=lambda url: body if url.endswith("/ledger") else "")
        done = reader.poll(edge, [job_obj(custom, namespace, "sdc")], datetime.now(timezone.utc), lambda ns, n: locks.setdefault((ns, n), threading.Lock()))
        return any(f.result(timeout=30) for f in done) or job_status(custom, namespace, "sdc").get("inPlaceRestarts") == 1

    wait_for(read, 60, "the takeover read and counted")
    taints = core.read_node(bad).spec.taints or []
    assert [(t.key, t.value, t.effect) for t in taints if t.key == "railtrain.dev/quarantined"] == [("railtrain.dev/quarantined", "hardware-suspect", "NoSchedule")]
    st = job_status(custom, namespace, "sdc")
    assert (st["phase"], st.get("restarts", 0), st["infrastructureRestarts"], st["avoidNodes"]) == ("Running", 0, 1, [bad])
    assert [(q["node"], q["verdict"]) for q in st["quarantines"]] == [(bad, "hardware-suspect")] and st["inPlace"]["nodesLeft"] == 1

    def taken():  # one list per poll (stop 47's CI: two lists in one poll saw two moments)
        pods = pods_of(core, namespace, "sdc")
        now, spares = split(pods)
        gone = all(p.metadata.name != "sdc-1" for p in pods)
        return (now, spares) if now.get(1) is not None and now[1].metadata.name == spare.metadata.name and gone and len(spares) == 1 else None

    now, [refill] = wait_for(taken, 60, "rank 1 held by the spare, its old pod gone, a new spare bound")
    assert now[0].metadata.uid == ranks[0].metadata.uid and now[1].metadata.uid == spare.metadata.uid  # nothing recreated
    assert refill.spec.node_name in set(names) - {bad, now[0].spec.node_name, now[1].spec.node_name}
    seen = events_with(core, namespace, "sdc", "NodeQuarantined", "InPlaceRestart")
    assert f"node {bad} quarantined (taint railtrain.dev/quarantined=hardware-suspect:NoSchedule)" in seen["NodeQuarantined"][0].message
    assert f"node {bad} left for a hardware-suspect verdict (RerunMismatch), its rank given to a hot spare" in seen["InPlaceRestart"][0].message
    read()  # a second read of the same ledger quarantines nothing again
    assert len(job_status(custom, namespace, "sdc")["quarantines"]) == 1
