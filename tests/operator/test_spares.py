"""Hot spares of a running gang (operator/job/spares.py, pure): how many to create and where (free nodes of the
gang's narrowest shared domain, never a rank's node, counted in the ledger), which to delete (an earlier gang's, one
on a lost node), and a takeover's writes (the spare labelled with the rank, the old pod deleted, nothing else)."""

from __future__ import annotations

from railtrain.crds import contract, supervisor
from railtrain.operator.job import spares
from railtrain.operator.scheduling.snapshot import pod_node

from .builders import BLOCK, HOST, RACK, gang, job_obj, node, other_pod

POLICY = {"restartInPlace": True}
RACKS = {f"n{i}": {RACK: f"r{i // 3}", BLOCK: "b0"} for i in range(6)}  # r0: n0 n1 n2, r1: n3 n4 n5


def running(spares_wanted=1, restarts=0):
    obj = job_obj("tj", nodes=2, spares=spares_wanted, runPolicy=POLICY, command=["torchrun", "-m", "railtrain.trainer"], status={"phase": "Running", "restarts": restarts})
    pods = gang(obj, restarts=restarts, phase="Running", gated=False, nodes=["n0", "n1"])
    return obj, pods


def nodes(ready=()):
    return [node(n, labels=labels, ready=n not in ready) for n, labels in RACKS.items()]


def plan(obj, pods, taken=(), down=()):
    return spares.plan_spares([obj], pods, [*pods, *taken], nodes(down), (BLOCK, RACK, HOST))


def test_a_running_gang_gets_its_spare_in_its_own_rack_bound_and_waiting():
    obj, pods = running()
    create, delete, short = plan(obj, pods)
    assert (delete, short) == ([], [])
    [pod] = create
    assert pod["metadata"]["name"] == "tj-spare-0-0" and pod_node(pod) == "n2"  # the gang's rack (r0), not a rank's node
    labels = pod["metadata"]["labels"]
    assert contract.LABEL_NODE_RANK not in labels and labels[contract.LABEL_SPARE] == "0" and labels[contract.LABEL_JOB_NAME] == "tj"
    assert "schedulingGates" not in pod["spec"] and pod["spec"]["nodeName"] == "n2"
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env[supervisor.ENV_SPARE] == "tj-spare-0-0"
    assert spares.wanted(obj, [*pods, pod | {"status": {"phase": "Running"}}]) == 0  # one live spare: none more


def test_spares_go_to_the_next_domain_when_the_rack_is_full_and_what_does_not_fit_is_said():
    obj, pods = running(spares_wanted=5)
    create, _, short = plan(obj, pods, taken=[other_pod("n2", 8)])
    assert [pod_node(p) for p in create] == ["n3", "n4", "n5"]  # r0 full (n2 taken by another pod): r1, by name
    assert short == ["team/tj: 3 of 5 spare pod(s) fit on free nodes now"]


def test_no_spare_before_the_gang_runs_or_without_spares():
    obj, pods = running()
    obj["status"]["phase"] = "Starting"
    assert plan(obj, pods)[0] == []
    obj, pods = running(spares_wanted=0)
    assert plan(obj, pods)[0] == []


def test_an_earlier_gangs_spare_and_a_spare_on_a_lost_node_are_deleted_and_replaced():
    obj, pods = running(restarts=1)
    old = spares.render_spare(__import__("railtrain.operator.job.observed", fromlist=["observe_job"]).observe_job(running()[0]), "team", 0, "n2")
    old["status"] = {"phase": "Running"}
    create, delete, _ = plan(obj, [*pods, old])
    assert [p["metadata"]["name"] for p in delete] == ["tj-spare-0-0"] and [p["metadata"]["name"] for p in create] == ["tj-spare-1-0"]
    obj, pods = running()
    lost = dict(old)
    create, delete, _ = plan(obj, [*pods, lost], down=("n2",))
    assert [p["metadata"]["name"] for p in delete] == ["tj-spare-0-0"]
    assert [(p["metadata"]["name"], pod_node(p)) for p in create] == [("tj-spare-0-1", "n3")]  # a new name, not on the lost node


def test_a_takeover_labels_the_spare_with_the_rank_and_deletes_only_the_lost_ranks_pod():
    obj, pods = running()
    [spare] = plan(obj, pods)[0]
    spare["status"] = {"phase": "Running"}
    relabel, delete, said = spares.takeover(obj, [*pods, spare], {1: "tj-spare-0-0"})
    assert relabel == {"tj-spare-0-0": {contract.LABEL_NODE_RANK: "1", contract.LABEL_SPARE: None}} and delete == ["tj-1"]
    assert said == ["hot spare tj-spare-0-0 on n2 took node rank 1 (tj-1 on n1); the other pods were not touched"]
    # the operator killed after the relabel and before the delete: the next read finishes the takeover, and no more
    spare["metadata"]["labels"] = {k: v for k, v in spare["metadata"]["labels"].items() if k != contract.LABEL_SPARE} | {contract.LABEL_NODE_RANK: "1"}
    relabel, delete, said = spares.takeover(obj, [*pods, spare], {1: "tj-spare-0-0"})
    assert (relabel, delete) == ({}, ["tj-1"])
    relabel, delete, said = spares.takeover(obj, [pods[0], spare], {1: "tj-spare-0-0"})
    assert (relabel, delete, said) == ({}, [], [])
    assert spares.takeover(obj, [*pods, spare], {1: "someone-else"}) == ({}, [], [])  # a name the job does not own: nothing


def test_describe_shows_the_waiting_spares_and_the_takeovers_in_the_restarts():
    from datetime import datetime, timezone

    from railtrain.cli import describe
    from tests.cli.test_jobviews import render

    obj, pods = running()
    obj["status"] |= {"infrastructureRestarts": 1, "inPlaceRestarts": 1, "inPlace": {"restarts": 0, "attempt": 1, "infrastructureRestarts": 1, "causes": {"spare": 1}}}
    obj["metadata"]["creationTimestamp"] = "2026-12-04T11:59:00Z"
    [spare] = plan(obj, pods)[0]
    spare["status"] = {"phase": "Running"}
    text = " ".join(render(describe.describe_view(obj, [*pods, spare], [], datetime(2026, 12, 4, 12, tzinfo=timezone.utc)), width=200).split())
    assert "Spares: 1 wanted, 1 waiting: tj-spare-0-0 on n2" in text
    assert "Restarts: 0 (job 0, infrastructure 1); 1 of them in place (this gang: spare 1)" in text


def test_a_terminating_rank_pod_is_not_vanished_while_a_spare_waits_to_take_it():
    """A rank's pod deleted (or evicted by a drain) while a spare waits: its supervisor says it is leaving and stays
    until the spare took the rank, so while the pod terminates the gang is not restarted; once the pod is gone and no
    pod carries the rank, or with no spare waiting, the rank has vanished (RankVanished) as before."""
    from datetime import datetime, timezone

    from railtrain.operator.job import planner
    from railtrain.operator.job.conditions import find

    now = datetime(2026, 12, 5, 1, 0, tzinfo=timezone.utc)
    at = "2026-12-05T00:50:00Z"
    status = {"phase": "Running", "restarts": 0, "startTime": at, "admittedNodes": 2,
              "conditions": [{"type": "Scheduled", "status": "True", "reason": "GangPlaced", "message": "", "lastTransitionTime": at},
                             {"type": "Running", "status": "True", "reason": "AllRanksRunning", "message": "", "lastTransitionTime": at}]}  # fmt: skip
    obj = job_obj("tj", nodes=2, spares=1, runPolicy=POLICY, command=["torchrun", "-m", "railtrain.trainer"], status=status)
    pods = gang(obj, restarts=0, phase="Running", gated=False, nodes=["n0", "n1"])
    [spare] = plan(obj, pods)[0]
    spare["status"] = {"phase": "Running"}
    pods[1]["metadata"]["deletionTimestamp"] = "2026-12-05T01:00:30Z"

    def reason(pods):
        p = planner.plan(obj, pods, True, now)
        c = find(p.status["conditions"], "Scheduled")
        return p.status.get("phase", "Running"), c["reason"] if c else None, p.delete_pods

    assert reason([*pods, spare]) == ("Running", "GangPlaced", [])  # held: the spare is about to take rank 1
    assert reason([pods[0], spare])[:2] == ("Restarting", "RankVanished")  # gone, and no pod carries rank 1
    assert reason(pods)[:2] == ("Restarting", "RankVanished")  # no spare waiting: as before
    relabel, delete, said = spares.takeover(obj, [*pods, spare], {1: "tj-spare-0-0"})  # the coordinator gave rank 1 to the spare
    assert relabel == {"tj-spare-0-0": {contract.LABEL_NODE_RANK: "1", contract.LABEL_SPARE: None}} and delete == ["tj-1"]  # at once, terminating or not


def test_nodes_left_for_a_verdict_are_quarantined_once_within_the_platform_bound_and_avoided_by_the_job():
    """The pods gave a verdict's node's rank to a spare and say so in the ledger (crds/inplace.py: Ledger.left); the
    operator alone may taint: :func:`railtrain.operator.job.inplace.to_quarantine` picks the nodes due once (a second
    read of the same ledger finds nothing new), keeps the platform's per-hour bound (beyond it the node is only
    avoided, with a sentence), and :func:`count` adds the node to avoidNodes and names it in the Event's sentence."""
    from datetime import datetime, timezone

    from railtrain.crds import contract, inplace
    from railtrain.crds.api import RunPolicy
    from railtrain.operator.job import inplace as job_inplace

    now = datetime(2026, 12, 5, 4, 0, tzinfo=timezone.utc)
    entry = {"node": "n1", "verdict": contract.VERDICT_HARDWARE_SUSPECT, "reason": contract.REASON_RERUN_MISMATCH, "quarantine": True, "evidence": "rank 1 differs"}
    ledger = inplace.Ledger(restarts=0, attempt=1, infrastructure=1, causes={contract.VERDICT_HARDWARE_SUSPECT: 1}, spares=1, left=(entry,))
    status = {"restarts": 0, "avoidNodes": ["n9"]}
    taint, records, kept = job_inplace.to_quarantine(status, ledger, now, frozenset(), 0, None)
    assert taint == [("n1", contract.VERDICT_HARDWARE_SUSPECT, "rank 1 differs")] and records == [{"node": "n1", "verdict": "hardware-suspect", "time": "2026-12-05T04:00:00Z"}] and kept == []
    patch, sentence = job_inplace.count(status, ledger, RunPolicy(), now)
    assert patch["avoidNodes"] == ["n1", "n9"] and patch["inPlace"]["nodesLeft"] == 1
    assert "node n1 left for a hardware-suspect verdict (RerunMismatch), its rank given to a hot spare" in sentence
    assert job_inplace.to_quarantine(status | patch, ledger, now, frozenset(), 0, None) == ([], [], [])  # counted: not again
    assert job_inplace.to_quarantine(status, ledger, now, frozenset({"n1"}), 0, None)[0] == []  # already tainted
    taint, records, kept = job_inplace.to_quarantine(status, ledger, now, frozenset(), 3, 3)
    assert taint == [] and records == [] and kept == ["node n1 was not quarantined: the platform's bound of 3 quarantine(s) per hour is reached; this job avoids it"]
    other_gang = job_inplace.to_quarantine({"restarts": 1}, ledger, now, frozenset(), 0, None)
    assert other_gang == ([], [], [])
