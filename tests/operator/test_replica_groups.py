"""Replica groups run by the operator (pure): per-group pods and rendezvous, the Lighthouse, a failed group replaced alone
(operator/job/render.py, operator/job/lighthouse.py, operator/job/phases/groups.py; docs/operator.md, "Replica groups")."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from railtrain.crds import contract
from railtrain.crds import replica_groups as rg
from railtrain.crds.api import TrainingJob
from railtrain.operator.job import lighthouse, planner, render
from railtrain.operator.job.conditions import find
from railtrain.operator.job.lighthouse import LighthouseSeen

from .builders import fail, gang, job_obj, node

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=timezone.utc)
RELEASED = "2026-12-04T11:00:00Z"
NODES = ["n0", "n1", "n2", "n3"]
FT = {"replicaGroups": 2, "minReplicas": 1}


def running(**extra):
    return {
        "phase": "Running", "startTime": RELEASED, "admittedNodes": 4,
        "admission": {"restarts": 0, "nodes": NODES, "created": True},
        "conditions": [
            {"type": "Scheduled", "status": "True", "reason": "GangPlaced", "message": "", "lastTransitionTime": RELEASED},
            {"type": "Running", "status": "True", "reason": "AllRanksRunning", "message": "", "lastTransitionTime": RELEASED},
        ],
    } | extra


def ft_job(status=None, ft=FT, **spec):
    return job_obj(nodes=4, procs=2, gpus=0, status=status or running(), faultTolerance=ft, **spec)


def pods_of(obj, restarts=0):
    pods = gang(obj, restarts=restarts, phase="Running", gated=False, nodes=NODES)
    for p in pods:
        p["metadata"]["uid"] = f"uid-{p['metadata']['name']}"
    return pods


def seen(obj):
    job = TrainingJob.model_validate({k: obj[k] for k in ("apiVersion", "kind", "spec", "metadata")})
    pod = lighthouse.render_lighthouse_pod(job, "team", "uid-llm") | {"status": {"phase": "Running"}}
    pod["metadata"]["uid"] = "uid-lh"
    return LighthouseSeen(pod=pod, service=lighthouse.render_lighthouse_service(job, "team", "uid-llm"))


def plan(obj, pods, lh=None):
    return planner.plan(obj, pods, True, NOW, nodes=[node(n) for n in NODES], lighthouse=lh if lh is not None else seen(obj))


def env_of(pod):
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def test_each_group_is_a_torchrun_world_of_its_own_with_its_own_rendezvous_host():
    pods = gang(ft_job())
    got = [(p["metadata"]["labels"][rg.LABEL_REPLICA_GROUP], env_of(p)["PET_NNODES"], env_of(p)["PET_NODE_RANK"], env_of(p)["PET_MASTER_ADDR"]) for p in pods]
    assert got == [("0", "2", "0", "llm-0.llm.team.svc"), ("0", "2", "1", "llm-0.llm.team.svc"),
                   ("1", "2", "0", "llm-2.llm.team.svc"), ("1", "2", "1", "llm-2.llm.team.svc")]  # fmt: skip
    env = env_of(pods[3])
    assert env[contract.ENV_NNODES] == "2" and env[contract.ENV_NODE_RANK] == "1" and env[contract.ENV_PARALLELISM].startswith("data=4,")  # 8 ranks / 2 groups
    assert env[rg.ENV_LIGHTHOUSE] == "http://llm-lighthouse.team.svc:29510" and env[rg.ENV_REPLICA_GROUP] == "1" and env[rg.ENV_REPLICA_GROUPS] == "2"
    assert [p["metadata"]["labels"][rg.LABEL_GROUP_NODE_RANK] for p in pods] == ["0", "1", "0", "1"]


def test_the_rendezvous_service_selects_every_groups_first_pod_and_a_job_without_groups_is_unchanged():
    job = TrainingJob.model_validate({k: v for k, v in ft_job().items() if k != "status"})
    assert render.render_service(job, "team", "u")["spec"]["selector"] == {contract.LABEL_JOB_NAME: "llm", rg.LABEL_GROUP_NODE_RANK: "0"}
    plain = TrainingJob.model_validate({k: v for k, v in job_obj(nodes=4).items() if k != "status"})
    assert render.render_service(plain, "team", "u")["spec"]["selector"] == {contract.LABEL_JOB_NAME: "llm", contract.LABEL_NODE_RANK: "0"}
    p = gang(job_obj(nodes=4))[2]
    assert env_of(p)["PET_NNODES"] == "4" and rg.ENV_LIGHTHOUSE not in env_of(p) and rg.LABEL_REPLICA_GROUP not in p["metadata"]["labels"]


def test_the_lighthouse_is_an_owned_pod_and_service_created_with_the_gang():
    obj = ft_job(ft={"replicaGroups": 2, "minReplicas": 2})
    p = plan(obj, pods_of(obj), LighthouseSeen())
    kinds = {o["kind"]: o for o in p.create_objects}
    pod, svc = kinds["Pod"], kinds["Service"]
    assert pod["metadata"]["name"] == svc["metadata"]["name"] == "llm-lighthouse"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == svc["metadata"]["ownerReferences"][0]["uid"] == "uid-llm"
    assert pod["spec"]["containers"][0]["command"] == ["torchft_lighthouse", "--min_replicas", "2", "--bind", "[::]:29510", "--heartbeat_timeout_ms", "1000",
                                                       "--join_timeout_ms", "500", "--quorum_tick_ms", "50"]
    assert contract.LABEL_JOB_NAME not in pod["metadata"]["labels"]  # never read as a rank
    assert svc["spec"]["selector"] == {rg.LABEL_LIGHTHOUSE: "llm"} and svc["spec"]["ports"][0]["port"] == 29510
    assert plan(obj, pods_of(obj)).create_objects == []  # both exist: nothing to do


def test_a_lost_lighthouse_is_recreated_and_a_finished_jobs_is_deleted():
    obj = ft_job()
    lh = seen(obj)
    gone = plan(obj, pods_of(obj), LighthouseSeen(service=lh.service))
    assert [o["kind"] for o in gone.create_objects] == ["Pod"] and gone.status["phase"] == "Running"
    evicted = LighthouseSeen(pod=lh.pod | {"status": {"phase": "Failed"}}, service=lh.service)
    assert "llm-lighthouse" in plan(obj, pods_of(obj), evicted).delete_pods  # deleted first, created on the next pass
    done = ft_job(status=running(phase="Succeeded", conditions=[{"type": "Succeeded", "status": "True", "reason": "Completed", "message": "", "lastTransitionTime": RELEASED}]))
    assert "llm-lighthouse" in plan(done, pods_of(done), lh).delete_pods
    waiting = job_obj(nodes=4, procs=2, gpus=0, faultTolerance=FT)
    assert plan(waiting, [], LighthouseSeen()).create_objects == []  # not admitted yet: holds nothing


def test_a_deleted_pod_of_group_1_replaces_group_1_alone_and_the_job_stays_running():
    read = {"step": 40, "quorum": 2, "heals": 1, "retriedSteps": 1, "progressTime": "2026-12-04T11:59:55Z"}  # the progress reader's last read
    obj = ft_job(status=running(replicaGroups=[{"group": 0, "members": ["llm-0", "llm-1"]} | read, {"group": 1, "members": ["llm-2", "llm-3"]} | read]))
    pods = pods_of(obj)
    p = plan(obj, [q for q in pods if q["metadata"]["name"] != "llm-3"])
    assert p.delete_pods == ["llm-2"] and p.uids == {"llm-2": "uid-llm-2"}  # group 0's pods untouched
    assert [c["metadata"]["name"] for c in p.create_pods] == ["llm-3"] and p.status_first  # the free name at once; the record first
    st = p.status
    assert st["phase"] == "Running" and st["restarts"] == 0 and st.get("infrastructureRestarts", 0) == 0
    assert find(st["conditions"], "Running")["reason"] == "ReplicaGroupReplaced"
    g0, g1 = st["replicaGroups"]
    assert (g0["phase"], g0["replacements"], g0["members"]) == ("Running", 0, ["llm-0", "llm-1"])
    assert (g1["phase"], g1["replacements"], g1["infrastructureRestarts"]) == ("Replacing", 1, 1)
    assert g0["step"] == 40 and g0["heals"] == 1 and "step" not in g1 and "quorum" not in g1 and g1["heals"] == 0  # cleared until its new pods are read
    assert ("Warning", "ReplicaGroupReplaced") in [e[:2] for e in p.events]

    # the old pod llm-2 still terminates: only the free name is created
    obj2 = ft_job(status=st)
    terminating = pods[2] | {"metadata": {**pods[2]["metadata"], "deletionTimestamp": "2026-12-04T12:00:01Z"}}
    q = plan(obj2, [pods[0], pods[1], terminating])
    assert [c["metadata"]["name"] for c in q.create_pods] == ["llm-3"] and q.status["phase"] == "Running"

    # gone: group 1's pods are created again on their admitted nodes, with the same restart count
    r = plan(obj2, [pods[0], pods[1]])
    assert [c["metadata"]["name"] for c in r.create_pods] == ["llm-2", "llm-3"]
    assert [c["spec"]["nodeSelector"]["kubernetes.io/hostname"] for c in r.create_pods] == ["n2", "n3"]
    assert all(c["metadata"]["annotations"][contract.ANNOTATION_RESTART] == "0" for c in r.create_pods)
    assert r.delete_pods == [] and r.status["phase"] == "Running"

    # Running again: the group is Running, the job AllRanksRunning, the count kept
    s = plan(ft_job(status=r.status), pods_of(obj))
    assert s.status["replicaGroups"][1]["phase"] == "Running" and s.status["replicaGroups"][1]["replacements"] == 1
    assert find(s.status["conditions"], "Running")["reason"] == "AllRanksRunning" and s.create_pods == [] and s.delete_pods == []


def test_a_failed_rank_replaces_its_group_with_the_groups_job_budget():
    obj = ft_job()
    pods = pods_of(obj)
    fail(pods[0])
    p = plan(obj, pods)
    assert p.delete_pods == ["llm-0", "llm-1"] and p.status["phase"] == "Running"
    assert p.status.get("jobRestarts", 0) == 0 and p.status["replicaGroups"][0]["jobRestarts"] == 1


def test_a_group_past_its_budget_is_lost_and_quorum_lost_fails_the_job():
    spent = [{"group": 0, "phase": "Running", "jobRestarts": 3}, {"group": 1, "phase": "Running"}]
    obj = ft_job(status=running(replicaGroups=spent))
    pods = pods_of(obj)
    fail(pods[1])
    p = plan(obj, pods)
    assert p.status["phase"] == "Running" and p.status["replicaGroups"][0]["phase"] == "Lost" and sorted(p.delete_pods) == ["llm-0", "llm-1"]
    assert find(p.status["conditions"], "Running")["reason"] == "ReplicaGroupLost"
    strict = ft_job(status=running(replicaGroups=spent), ft={"replicaGroups": 2, "minReplicas": 2})
    q = plan(strict, pods)
    assert q.status["phase"] == "Failed" and find(q.status["conditions"], "Failed")["reason"] == "QuorumLost"


def test_every_group_failing_at_once_restarts_the_whole_gang_as_before():
    obj = ft_job()
    pods = pods_of(obj)
    fail(pods[0])
    fail(pods[2])
    p = plan(obj, pods)
    assert p.status["phase"] == "Restarting" and p.status["restarts"] == 1 and sorted(p.delete_pods) == ["llm-0", "llm-1", "llm-2", "llm-3"]


def test_a_replacement_that_never_runs_restarts_the_whole_gang_after_the_gang_timeout():
    late = (NOW - timedelta(seconds=301)).strftime("%Y-%m-%dT%H:%M:%SZ")
    groups = [{"group": 0, "phase": "Running"}, {"group": 1, "phase": "Replacing", "replacements": 1, "lastReplacementTime": late}]
    obj = ft_job(status=running(replicaGroups=groups))
    pods = pods_of(obj)
    pods[2]["status"] = pods[3]["status"] = {"phase": "Pending"}
    p = plan(obj, pods)
    assert p.status["phase"] == "Restarting" and p.status["restarts"] == 1


def test_describe_shows_each_group():
    from rich.console import Console

    from railtrain.cli.describe import replica_groups_table

    assert replica_groups_table({}) is None
    console = Console(width=120, record=True)
    console.print(replica_groups_table({"replicaGroups": [{"group": 0, "phase": "Running", "members": ["ft-0", "ft-1"], "nodes": ["n0", "n1"], "step": 151, "quorum": 1, "heals": 2},
                                                          {"group": 1, "phase": "Replacing", "replacements": 1, "infrastructureRestarts": 1}, "junk"]}))
    text = console.export_text()
    assert "Replica groups" in text and "1 (job 0, infra 1)" in text and "ft-0 ft-1" in text
    assert "Running    151   1/2     2" in text and "Replacing  -     -       0" in text, text


def test_the_lighthouse_pod_takes_the_templates_scheduling_fields_and_a_suspended_jobs_is_deleted():
    obj = ft_job(template={"spec": {"nodeSelector": {"pool": "gpu"}, "tolerations": [{"key": "team", "operator": "Exists"}],
                                    "imagePullSecrets": [{"name": "regcred"}]}})
    job = TrainingJob.model_validate({k: obj[k] for k in ("apiVersion", "kind", "spec", "metadata")})
    pod = lighthouse.render_lighthouse_pod(job, "team", "uid-llm")
    assert pod["spec"]["nodeSelector"] == {"pool": "gpu"} and pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert {"key": "team", "operator": "Exists"} in pod["spec"]["tolerations"] and pod["spec"]["restartPolicy"] == "Always"
    suspended = ft_job(runPolicy={"suspend": True})
    p = plan(suspended, pods_of(suspended))
    assert "llm-lighthouse" in p.delete_pods and p.status["phase"] == "Suspended" and p.create_objects == []


def test_a_pod_named_like_the_lighthouse_that_the_job_does_not_own_is_left_alone():
    obj = ft_job()
    lh = seen(obj)
    theirs = lh.pod | {"metadata": {**lh.pod["metadata"], "ownerReferences": [{"uid": "someone", "controller": True}]}}
    done = ft_job(status=running(phase="Failed", conditions=[{"type": "Failed", "status": "True", "reason": "UserError", "message": "", "lastTransitionTime": RELEASED}]))
    assert "llm-lighthouse" not in plan(done, pods_of(done), LighthouseSeen(pod=theirs, service=lh.service)).delete_pods
    assert plan(obj, pods_of(obj), LighthouseSeen(pod=theirs, service=lh.service)).create_objects == []  # its name is taken: nothing is created over it


def test_a_lost_node_moves_its_group_to_a_node_the_admission_pass_gives_and_group_0_stays():
    from railtrain.operator.scheduling.placement import Placement

    obj = ft_job()
    pods = pods_of(obj)
    nodes = [node(n) for n in ("n0", "n1", "n2", "n4")]  # n3 deleted; n4 is free
    p = planner.plan(obj, pods, True, NOW, nodes=nodes, lighthouse=seen(obj))
    assert p.status["phase"] == "Running" and p.status["restarts"] == 0 and p.force_delete_pods == ["llm-3"]
    assert sorted(p.delete_pods) == ["llm-2", "llm-3"] and p.create_pods == []
    g1 = p.status["replicaGroups"][1]
    assert (g1["phase"], g1["infrastructureRestarts"]) == ("Relocating", 1) and "n3 must be left" in g1["message"]
    assert p.status["nodeFailures"] == [{"node": "n3", "count": 1}]

    moved = ft_job(status=p.status)
    assert planner.gang_request(moved, pods) is None  # the old pods still hold the names
    request = planner.gang_request(moved, pods[:2])
    assert request is not None and request.fixed == {0: "n0", 1: "n1"} and request.nodes == 4
    q = planner.plan(moved, pods[:2], True, NOW, placement=Placement(("n0", "n1", "n2", "n4"), "GangPlaced"), nodes=nodes, lighthouse=seen(obj))
    assert q.status["admission"]["nodes"] == ["n0", "n1", "n2", "n4"] and q.status_first
    assert [(c["metadata"]["name"], c["spec"]["nodeSelector"]["kubernetes.io/hostname"]) for c in q.create_pods] == [("llm-2", "n2"), ("llm-3", "n4")]
    assert q.status["replicaGroups"][1]["phase"] == "Replacing" and q.delete_pods == [] and q.status["phase"] == "Running"


def test_a_hardware_suspect_verdict_quarantines_the_node_and_moves_only_its_group():
    obj = ft_job()
    pods = pods_of(obj)
    fail(pods[2], message=contract.format_termination_message("hardware-suspect", "ParameterMismatch", "bytes differ", nodes=["n2"], ranks=[4], step=9))
    p = plan(obj, pods)
    assert [q[:2] for q in p.quarantine] == [("n2", "hardware-suspect")] and ("Warning", "NodeQuarantined") in [e[:2] for e in p.events]
    assert sorted(p.delete_pods) == ["llm-2", "llm-3"] and p.status["replicaGroups"][1]["phase"] == "Relocating"
    assert "n2" in p.status["avoidNodes"] and p.status["phase"] == "Running" and p.status.get("infrastructureRestarts", 0) == 0


def test_a_rank_reporting_quorum_lost_fails_the_job_with_that_reason():
    obj = ft_job()
    pods = pods_of(obj)
    fail(pods[3], message=contract.format_termination_message("retryable", "QuorumLost", "no quorum of 1 groups within 300 s", ranks=[6], step=40))
    p = plan(obj, pods)
    assert p.status["phase"] == "Failed" and find(p.status["conditions"], "Failed")["reason"] == "QuorumLost"


def test_a_replaced_groups_absence_is_recorded_and_goodput_counts_it_as_degraded_training():
    """Issue 31, goodput: group 1 out from NOW to NOW + 10 s while group 0 trains; of 2 groups, 10 s absent is 5 s of the whole job."""
    from railtrain.operator.job import attempts

    obj = ft_job()
    pods = pods_of(obj)
    p = plan(obj, [q for q in pods if q["metadata"]["name"] != "llm-3"])
    g1 = p.status["replicaGroups"][1]
    assert g1["absentSince"] == "2026-12-04T12:00:00.000000Z" and g1.get("absentSeconds", 0) == 0
    assert "absentSince" not in p.status["replicaGroups"][0]
    later = NOW + timedelta(seconds=10)
    back = planner.plan(ft_job(status=p.status), pods_of(obj), True, later, nodes=[node(n) for n in NODES], lighthouse=seen(obj))
    g1 = back.status["replicaGroups"][1]
    assert g1["phase"] == "Running" and g1["absentSeconds"] == 10 and "absentSince" not in g1
    progress = {"step": 30, "lastUpdateTime": "2026-12-04T12:00:10Z"}
    status = back.status | {"goodput": {"attempts": [{"released": RELEASED, "firstStep": 1, "firstStepAt": "2026-12-04T11:00:30Z"}]}}
    g = attempts.with_progress(status, progress, None, None, "2026-12-04T10:59:00Z", later)
    assert g["degradedSeconds"] == 5 and "degraded" not in str(g["lostSeconds"])  # training at 1/2 for 10 s: 5 s of the whole job, not lost


def test_a_failed_pod_already_decided_on_is_not_counted_again_while_its_deletion_is_not_yet_seen():
    """Found on kind: the pass after a group's replacement still saw the failed pod (the watch had not yet brought its
    deletion) and replaced the group a second time for the same failure (two ReplicaGroupReplaced Events, replacements 2).
    A replacement's pods carry the group's replacement count; a pod of an earlier one is never decided on again, and a
    replacement pod that fails is."""
    obj = ft_job()
    pods = pods_of(obj)
    fail(pods[2])
    first = plan(obj, pods)
    assert first.delete_pods == ["llm-2", "llm-3"] and first.status["replicaGroups"][1]["replacements"] == 1
    again = plan(ft_job(status=first.status), pods)  # the same pods: neither deletion seen yet
    assert again.status["replicaGroups"][1]["replacements"] == 1 and not [e for e in again.events if e[1] == "ReplicaGroupReplaced"], again.events
    made = plan(ft_job(status=again.status), pods[:2]).create_pods  # the old pods gone: the group's new pods
    assert [c["metadata"]["annotations"][rg.ANNOTATION_GROUP_REPLACEMENT] for c in made] == ["1", "1"]
    new = [c | {"status": {"phase": "Running"}, "metadata": {**c["metadata"], "uid": f"new-{c['metadata']['name']}"}} for c in made]
    fail(new[0])
    third = plan(ft_job(status=again.status), pods[:2] + new)  # a replacement that fails is a new failure
    assert third.status["replicaGroups"][1]["replacements"] == 2


def test_a_lighthouse_on_a_lost_node_is_force_deleted_and_created_again():
    """Found on kind: the Lighthouse pod on a stopped node reads Running until Kubernetes evicts it (minutes), every
    group stalled on the quorum meanwhile. Its node NotReady past ``nodeLostGraceSeconds`` (or deleted): the pod is
    force-deleted, and created again on the next pass; the groups' own pods are not touched."""
    obj = ft_job()
    lh = seen(obj)
    on_n9 = LighthouseSeen(pod=lh.pod | {"spec": {**lh.pod["spec"], "nodeName": "n9"}}, service=lh.service)
    sick = node("n9", ready=False)
    sick["metadata"]["uid"] = "uid-n9"
    sick["status"]["conditions"][0]["lastTransitionTime"] = "2026-12-04T11:50:00Z"  # NotReady 10 minutes before NOW
    nodes = [node(n) for n in NODES]
    p = planner.plan(obj, pods_of(obj), True, NOW, nodes=nodes + [sick], lighthouse=on_n9)
    assert p.force_delete_pods == ["llm-lighthouse"] and p.uids["llm-lighthouse"] == "uid-lh" and "llm-lighthouse" not in p.delete_pods
    assert p.status["phase"] == "Running" and not [d for d in p.delete_pods if d.startswith("llm-") and d != "llm-lighthouse"]
    assert any("lighthouse lost" in line for line in p.log), p.log
    deleted = planner.plan(obj, pods_of(obj), True, NOW, nodes=nodes, lighthouse=on_n9)  # the node deleted: lost at once
    assert deleted.force_delete_pods == ["llm-lighthouse"]
    well = planner.plan(obj, pods_of(obj), True, NOW, nodes=nodes + [node("n9")], lighthouse=on_n9)
    assert well.force_delete_pods == [] and well.delete_pods == []
    gone = planner.plan(obj, pods_of(obj), True, NOW, nodes=nodes, lighthouse=LighthouseSeen(service=lh.service))
    assert [o["kind"] for o in gone.create_objects] == ["Pod"]
