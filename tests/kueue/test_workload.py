"""The pure half of Kueue's external-framework protocol (no cluster): the Workload built, read, decoded, and the gang placed inside it."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from railtrain.crds import kueue as names
from railtrain.crds import reasons
from railtrain.operator.job import admit, kueuestatus, ledger, planner, workload
from railtrain.operator.job.kueueadmit import KueueAdmission
from railtrain.operator.job.observed import observe_job
from railtrain.operator.job.plansettings import PlanSettings
from railtrain.operator.scheduling.kueue import assigned_nodes, expand, place_in_assignment
from railtrain.operator.scheduling.placement import Placement
from railtrain.operator.scheduling.refusal import Refusal
from railtrain.operator.scheduling.snapshot import snapshot
from tests.operator.builders import BLOCK, HOST, RACK, fabric, gang, job_obj

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)
LEVELS = (BLOCK, RACK, HOST)


def kueue_job(name="llm", nodes=2, **spec):
    obj = job_obj(name, nodes=nodes, **spec)
    obj["metadata"]["labels"] = {names.QUEUE_LABEL: "team-q"}
    obj["metadata"]["creationTimestamp"] = "2026-12-03T11:00:00Z"
    return obj


def admitted(name, hosts, flavor="gpu"):
    """A Workload admitted with a TAS assignment of one pod on each of ``hosts`` (hostname level only, compressed with a prefix)."""
    return {
        "metadata": {"name": name, "namespace": "team", "generation": 1, "resourceVersion": "7"},
        "spec": {"queueName": "team-q", "active": True},
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "ok"},
                           {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "ok"}],
            "admission": {"clusterQueue": "cq", "podSetAssignments": [{
                "name": "main", "flavors": {"nvidia.com/gpu": flavor}, "count": len(hosts),
                "topologyAssignment": {"levels": [HOST], "slices": [{
                    "domainCount": len(hosts), "valuesPerLevel": [{"individual": {"prefix": "b0r1n", "roots": [h.removeprefix("b0r1n") for h in hosts]}}],
                    "podCounts": {"universal": 1}}]}}]},
        },
    }


def test_expand_decodes_universal_and_individual_values_with_prefix_suffix_and_counts():
    levels, domains = expand({"levels": [BLOCK, RACK], "slices": [
        {"domainCount": 2, "valuesPerLevel": [{"universal": "b0"}, {"individual": {"prefix": "b0-r", "suffix": "x", "roots": ["0", "1"]}}],
         "podCounts": {"individual": [3, 1]}},
        {"domainCount": 1, "valuesPerLevel": [{"universal": "b1"}, {"universal": "b1-r0"}], "podCounts": {"universal": 2}},
    ]})
    assert levels == (BLOCK, RACK)
    assert domains == [(("b0", "b0-r0x"), 3), (("b0", "b0-r1x"), 1), (("b1", "b1-r0"), 2)]
    with pytest.raises(ValueError, match=r"slices\[0\].podCounts.individual has 1 values; domainCount is 2"):
        expand({"levels": [HOST], "slices": [{"domainCount": 2, "valuesPerLevel": [{"universal": "n"}], "podCounts": {"individual": [1]}}]})


def test_gang_is_placed_inside_the_assignment_in_rail_order_and_refused_when_crowded():
    nodes, pods = fabric(blocks=1, racks=2, per_rack=4)
    snap = snapshot(nodes, pods, "nvidia.com/gpu", LEVELS)
    request = admit.read_queue([kueue_job(nodes=3)], [], [], NOW).waiting["team/llm"][2]
    v = kueuestatus.view(admitted("w", ["b0r1n3", "b0r1n1", "b0r1n2"]))
    hosts = assigned_nodes(snap, v.levels, v.domains)
    assert hosts == {"b0r1n1": 1, "b0r1n2": 1, "b0r1n3": 1}
    result = place_in_assignment(request, snap, hosts, {})
    assert isinstance(result, Placement) and sorted(result.nodes) == ["b0r1n1", "b0r1n2", "b0r1n3"]
    crowded = place_in_assignment(request, snap, {"b0r1n1": 2, "b0r1n2": 1}, {})
    assert isinstance(crowded, Refusal) and crowded.reason == reasons.OUTSIDE_KUEUE_ASSIGNMENT and "one rank per node" in crowded.message


def test_avoided_nodes_are_left_out_inside_the_assignment_and_asked_of_kueue_as_a_node_affinity():
    """A job's ``status.avoidNodes`` (named by its verdicts) inside a Kueue admission: the placement leaves them out
    (on the old code it ignored them and put the rank back on the avoided node), the Workload's pod set gets the
    required affinity ``hostname NotIn`` them (ANDed into every existing term), and :func:`workload.avoided_in_assignment`
    names the ones Kueue will not replace by itself (not quarantined: no taint for its ``TASReplaceNodeOnNodeTaints``)."""
    from railtrain.crds.labels import HOSTNAME

    nodes, pods = fabric(blocks=1, racks=2, per_rack=4)
    snap = snapshot(nodes, pods, "nvidia.com/gpu", LEVELS)
    obj = kueue_job(template={"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}, {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}]}]}}}}})
    obj["status"] = {"avoidNodes": ["b0r1n2"], "quarantines": []}
    seen = observe_job(obj)
    request = planner.gang_request(observe_job(kueue_job() | {"status": obj["status"]}), [], NOW)
    v = kueuestatus.view(admitted("w", ["b0r1n1", "b0r1n2"]))
    refused = place_in_assignment(request, snap, assigned_nodes(snap, v.levels, v.domains), {})
    assert isinstance(refused, Refusal) and refused.reason == reasons.OUTSIDE_KUEUE_ASSIGNMENT and "avoided by this job" in refused.message, refused
    placed = place_in_assignment(request, snap, {"b0r1n1": 1, "b0r1n3": 1}, {})
    assert isinstance(placed, Placement) and sorted(placed.nodes) == ["b0r1n1", "b0r1n3"]
    terms = workload.desired(seen, LEVELS, workload.Priority(0))["spec"]["podSets"][0]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    avoid = {"key": HOSTNAME, "operator": "NotIn", "values": ["b0r1n2"]}
    assert [t["matchExpressions"] for t in terms] == [[{"key": "pool", "operator": "In", "values": ["a"]}, avoid], [{"key": "pool", "operator": "In", "values": ["b"]}, avoid]]
    plain = workload.desired(observe_job(kueue_job()), LEVELS, workload.Priority(0))
    assert "affinity" not in plain["spec"]["podSets"][0]["template"]["spec"] and workload.avoiding({"spec": {}}, ["n"])["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [{"matchExpressions": [{"key": HOSTNAME, "operator": "NotIn", "values": ["n"]}]}]
    assert not workload.equivalent(plain, workload.desired(seen, LEVELS, workload.Priority(0)))  # a new avoided node: a new spec hash
    assert workload.avoided_in_assignment(v.levels, v.domains, ["b0r1n2", "b0r1n9"], []) == ["b0r1n2"]
    assert workload.avoided_in_assignment(v.levels, v.domains, ["b0r1n2"], ["b0r1n2"]) == []  # quarantined: Kueue replaces it
    assert workload.avoided_in_assignment((RACK,), [(("r1",), 2)], ["b0r1n2"], []) == []  # hosts not named


def test_workload_carries_the_protocols_fields_and_the_real_pod_template():
    obj = kueue_job(template={"spec": {"nodeSelector": {"pool": "a"}, "tolerations": [{"key": "gpu", "operator": "Exists"}]}},
                    topology={"policy": "required", "level": RACK}, priority=5)
    want = workload.desired(observe_job(obj), LEVELS, workload.Priority(5))
    meta, spec = want["metadata"], want["spec"]
    assert meta["finalizers"] == [names.FINALIZER] and meta["labels"] == {names.JOB_UID_LABEL: "uid-llm"}
    assert meta["ownerReferences"][0] | {} == {"apiVersion": "railtrain.dev/v1alpha1", "kind": "TrainingJob", "name": "llm", "uid": "uid-llm",
                                              "controller": True, "blockOwnerDeletion": True}
    assert want["apiVersion"] == "kueue.x-k8s.io/v1beta2" and spec["queueName"] == "team-q" and spec["priority"] == 5
    podset = spec["podSets"][0]
    assert podset["count"] == 2 and podset["topologyRequest"] == {"required": RACK, "podIndexLabel": "railtrain.dev/node-rank"}
    pod = podset["template"]["spec"]
    assert pod["nodeSelector"]["pool"] == "a" and {"key": "gpu", "operator": "Exists"} in pod["tolerations"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8" and "schedulingGates" not in pod
    assert workload.equivalent(want, want)
    bigger = workload.desired(observe_job(kueue_job(nodes=3, topology={"policy": "required", "level": RACK}, priority=5)), LEVELS, workload.Priority(5))
    assert not workload.equivalent(want, bigger)
    preferred = workload.desired(observe_job(kueue_job()), LEVELS, workload.Priority(0, {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "hi"}))
    assert preferred["spec"]["podSets"][0]["topologyRequest"]["preferred"] == RACK and preferred["spec"]["priorityClassRef"]["name"] == "hi"


def test_view_reads_pending_admitted_evicted_and_answers_them():
    pending = {"metadata": {"name": "w"}, "spec": {}, "status": {"conditions": [
        {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "insufficient quota for nvidia.com/gpu in flavor gpu"}]}}
    v = kueuestatus.view(pending)
    assert v.state == kueuestatus.PENDING and kueuestatus.pending_sentence(v, "q") == (
        "waiting for Kueue to admit Workload w from LocalQueue q: Pending: insufficient quota for nvidia.com/gpu in flavor gpu")
    ok = kueuestatus.view(admitted("w", ["b0r1n1"]))
    assert ok.admitted and ok.cluster_queue == "cq" and ok.flavors == {"nvidia.com/gpu": "gpu"} and ok.domains == ((("b0r1n1",), 1),)
    evicted = admitted("w", ["b0r1n1"])
    evicted["status"]["conditions"].append({"type": "Evicted", "status": "True", "reason": "Preempted", "message": "Preempted to accommodate a higher priority Workload"})
    assert kueuestatus.view(evicted).state == kueuestatus.EVICTED
    after = kueuestatus.requeued_status(evicted, NOW)
    by = {c["type"]: c for c in after["conditions"]}
    assert after["admission"] is None and by["Requeued"]["status"] == "True" and by["QuotaReserved"]["reason"] == "Pending" and by["Admitted"]["status"] == "False"
    done = kueuestatus.finished_status(evicted, True, "all ranks exited 0", NOW)
    assert {c["type"]: c for c in done["conditions"]}["Finished"]["reason"] == "Succeeded"


def test_a_deactivated_workload_is_evicted_until_it_is_active_again_then_it_waits_like_any_pending_one():
    """Kueue leaves Evicted True (reason Deactivated) on a reactivated Workload until its next admission, beside
    Requeued True (Reactivated) and QuotaReserved False with the reason it waits: a resumed job's condition must
    quote that reason, not the eviction that is over."""
    conds = [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "insufficient unused quota for nvidia.com/gpu"},
             {"type": "Evicted", "status": "True", "reason": "Deactivated", "message": "The workload is deactivated"},
             {"type": "Requeued", "status": "True", "reason": "Reactivated", "message": "The workload was reactivated"}]  # fmt: skip
    off = {"metadata": {"name": "w"}, "spec": {"active": False}, "status": {"conditions": conds}}
    assert kueuestatus.view(off).state == kueuestatus.EVICTED and kueuestatus.view(off).reason == "Deactivated"
    back = kueuestatus.view(off | {"spec": {"active": True}})
    assert back.state == kueuestatus.PENDING and kueuestatus.pending_sentence(back, "q") == (
        "waiting for Kueue to admit Workload w from LocalQueue q: Pending: insufficient unused quota for nvidia.com/gpu")


def test_eviction_stops_the_whole_gang_and_says_kueues_reason():
    obj = kueue_job(status={"phase": "Running", "restarts": 0, "conditions": [
        {"type": "Scheduled", "status": "True", "reason": "GangPlaced", "message": "m", "lastTransitionTime": "2026-12-03T11:00:00Z"},
        {"type": "Running", "status": "True", "reason": "AllRanksRunning", "message": "m", "lastTransitionTime": "2026-12-03T11:00:00Z"}]})
    pods = gang(obj, phase="Running", gated=False, nodes=["b0r1n1", "b0r1n2"])
    gone = kueuestatus.view({"metadata": {"name": "w"}, "spec": {"active": False}, "status": {"conditions": [
        {"type": "Evicted", "status": "True", "reason": "Deactivated", "message": "The workload is deactivated"}]}})
    stop = kueuestatus.stop_for(gone, "team-q", obj, pods)
    assert stop is not None and stop.reason == reasons.EVICTED_BY_KUEUE
    p = planner.plan(obj, pods, True, NOW, stop)
    assert p.delete_pods == ["llm-0", "llm-1"] and p.status["phase"] == "Pending"
    scheduled = next(c for c in p.status["conditions"] if c["type"] == "Scheduled")
    assert scheduled["status"] == "False" and scheduled["reason"] == reasons.EVICTED_BY_KUEUE and "Deactivated: The workload is deactivated" in scheduled["message"]
    assert kueuestatus.stop_for(kueuestatus.view(admitted("w", ["b0r1n1"])), "team-q", obj, pods) is None  # still admitted: nothing to stop


def test_pass_keeps_kueue_jobs_waiting_and_takes_their_admitted_nodes_from_railtrains_queue():
    nodes, pods = fabric(blocks=1, racks=2, per_rack=2)  # b0r0n0..1, b0r1n0..1
    waiting_job, placed_job, own = kueue_job("waits", nodes=1), kueue_job("kq", nodes=2), job_obj("own", nodes=4)
    queue = admit.read_queue([waiting_job, placed_job, own], [], [], NOW)
    views = {
        "team/waits": KueueAdmission("team-q", kueuestatus.view({"metadata": {"name": "w1"}, "spec": {}, "status": {"conditions": [
            {"type": "QuotaReserved", "status": "False", "reason": "Inadmissible", "message": "LocalQueue team-q doesn't exist"}]}})),
        "team/kq": KueueAdmission("team-q", kueuestatus.view(admitted("w2", ["b0r1n0", "b0r1n1"]))),
    }
    found = admit.decide(queue, pods, nodes, PlanSettings(levels=LEVELS), views)
    by = {d.job: d.result for d in found.decisions}
    assert by["team/waits"].reason == reasons.WAITING_FOR_KUEUE and "LocalQueue team-q doesn't exist" in by["team/waits"].message
    assert sorted(by["team/kq"].nodes) == ["b0r1n0", "b0r1n1"]
    assert isinstance(by["team/own"], Refusal)  # 4 nodes exist, but Kueue admitted two of them: railtrain's own job waits
    assert isinstance(admit.decide(queue, pods, nodes, PlanSettings(levels=LEVELS)).decisions[0].result, Refusal)  # no Workload known: waits
    dressed = workload.dress_pod(gang(placed_job)[0], "w2", {"pool": "a"}, [{"key": "k", "operator": "Exists"}], {"preferred": RACK})
    assert dressed["spec"]["nodeSelector"]["pool"] == "a" and {"key": "k", "operator": "Exists"} in dressed["spec"]["tolerations"]
    assert dressed["metadata"]["annotations"]["kueue.x-k8s.io/podset-preferred-topology"] == RACK  # Kueue's TAS counts it as the Workload's, not again
    assert dressed["metadata"]["annotations"][names.WORKLOAD_ANNOTATION] == "w2" and dressed["metadata"]["labels"][names.PODSET_LABEL] == "main"
    assert ledger.key(own) == "team/own"


def test_kueue_only_refuses_a_job_naming_no_queue_and_a_default_queue_keeps_it_from_railtrains_queue():
    nodes, pods = fabric(blocks=1, racks=1, per_rack=2)
    own, labelled = job_obj("own", nodes=1), kueue_job("kq", nodes=1)
    queue = admit.read_queue([own, labelled], [], [], NOW)
    by = lambda settings: {d.job: d.result for d in admit.decide(queue, pods, nodes, settings).decisions}  # noqa: E731
    only = by(PlanSettings(levels=LEVELS, kueue_only=True))
    assert (only["team/own"].reason, only["team/own"].message, only["team/own"].warning) == (reasons.QUEUE_NAME_REQUIRED, admit.QUEUE_REQUIRED, True)
    assert only["team/kq"].reason == reasons.WAITING_FOR_KUEUE  # a labelled job is Kueue's as before
    # With a default queue the unlabelled job is Kueue's (its label is being written), never placed by railtrain's queue.
    defaulted = by(PlanSettings(levels=LEVELS, kueue_queue="team-a", kueue_only=True))
    assert defaulted["team/own"].reason == reasons.WAITING_FOR_KUEUE
    assert isinstance(by(PlanSettings(levels=LEVELS))["team/own"], Placement)  # neither flag: railtrain's own queue places it


def test_the_operators_kueue_flags_parse_and_a_bad_queue_name_is_one_sentence():
    from railtrain.operator.settings import SettingsError, parse

    s = parse(["--kueue-default-queue", "team-a", "--kueue-only"], environ={})
    assert (s.plan.kueue_queue, s.plan.kueue_only) == ("team-a", True)
    assert (parse([], environ={}).plan.kueue_queue, parse([], environ={}).plan.kueue_only) == (None, False)
    with pytest.raises(SettingsError, match=r"^--kueue-default-queue: 'Team_A' is not a LocalQueue name"):
        parse(["--kueue-default-queue", "Team_A"], environ={})


def _ready(pod, ready=True):
    pod["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return pod


def _pods_ready(wl):
    return kueuestatus.condition(wl, kueuestatus.PODS_READY)


def _apply(wl, patch):
    return {**wl, "status": {**wl["status"], **patch}}


def test_pods_ready_follows_kueues_rules_through_start_a_gang_restart_and_recovery():
    """Issue 28, ``PodsReady`` where Kueue's ``waitForPodsReady`` waits for it: False WaitForStart while the gang's pods
    come up, True Started once the admitted count is Ready, False WaitForRecovery while a restarted gang comes back,
    True Recovered after; the job's own pods only (a stranger's Ready pod does not count); no write when nothing changed."""
    obj = kueue_job()
    pods = gang(obj, phase="Running", gated=False, nodes=["b0r1n1", "b0r1n2"])
    wl = admitted("w", ["b0r1n1", "b0r1n2"])
    assert kueuestatus.admitted_count(wl) == 2
    assert not kueuestatus.gang_ready(wl, obj, pods)  # Running, not Ready yet
    patch = kueuestatus.pods_ready_status(wl, False, NOW)
    wl = _apply(wl, patch)
    assert (_pods_ready(wl)["status"], _pods_ready(wl)["reason"]) == ("False", kueuestatus.WAIT_FOR_START)
    assert kueuestatus.pods_ready_status(wl, False, NOW) is None  # said already: no second write
    _ready(pods[0])
    other = kueue_job("other")
    stranger = _ready(gang(other, phase="Running", gated=False, nodes=["b0r1n3", "b0r1n4"])[0])
    assert not kueuestatus.gang_ready(wl, obj, pods + [stranger])  # one of two; the other job's pod is not ours
    _ready(pods[1])
    assert kueuestatus.gang_ready(wl, obj, pods)
    wl = _apply(wl, kueuestatus.pods_ready_status(wl, True, NOW))
    started = _pods_ready(wl)
    assert (started["status"], started["reason"]) == ("True", kueuestatus.STARTED) and "all 2 pods" in started["message"]
    assert [c["type"] for c in wl["status"]["conditions"]].count("PodsReady") == 1 and _pods_ready(wl)["observedGeneration"] == 1
    # the gang restarts: its pods are deleted and made again
    assert not kueuestatus.gang_ready(wl, obj, [_ready(pods[0])])
    wl = _apply(wl, kueuestatus.pods_ready_status(wl, False, NOW))
    assert (_pods_ready(wl)["status"], _pods_ready(wl)["reason"]) == ("False", kueuestatus.WAIT_FOR_RECOVERY)
    assert kueuestatus.pods_ready_status(wl, False, NOW) is None  # still recovering
    wl = _apply(wl, kueuestatus.pods_ready_status(wl, True, NOW))
    assert (_pods_ready(wl)["status"], _pods_ready(wl)["reason"]) == ("True", kueuestatus.RECOVERED)
    # a pod being deleted is not ready; a Succeeded one is
    pods[1]["metadata"]["deletionTimestamp"] = "2026-12-03T12:00:00Z"
    assert not kueuestatus.gang_ready(wl, obj, pods)
    pods[1]["metadata"].pop("deletionTimestamp")
    pods[1]["status"] = {"phase": "Succeeded"}
    assert kueuestatus.gang_ready(wl, obj, pods)


def test_pods_ready_is_wait_for_start_while_pending_or_evicted_and_counts_a_partial_admission():
    pending = {"metadata": {"name": "w", "generation": 1}, "spec": {"podSets": [{"name": "main", "count": 4}]}, "status": {}}
    assert kueuestatus.admitted_count(pending) == 4
    said = _pods_ready(_apply(pending, kueuestatus.pods_ready_status(pending, True, NOW)))
    assert (said["status"], said["reason"]) == ("False", kueuestatus.WAIT_FOR_START)  # not admitted: whatever the pods
    wl = admitted("w", ["b0r1n1", "b0r1n2"])
    wl["spec"]["podSets"] = [{"name": "main", "count": 4, "minCount": 2}]
    assert kueuestatus.admitted_count(wl) == 2  # admitted with 2 of 4: 2 ready pods are the whole gang
    wl = _apply(wl, kueuestatus.pods_ready_status(wl, True, NOW))
    wl["status"]["conditions"].append({"type": "Evicted", "status": "True", "reason": "Preempted", "message": "preempted"})
    requeued = kueuestatus.requeued_status(wl, NOW)
    after = _pods_ready(_apply(wl, kueuestatus.pods_ready_status(_apply(wl, requeued), False, NOW)))
    assert (after["status"], after["reason"]) == ("False", kueuestatus.WAIT_FOR_START)


def test_a_request_over_the_clusterqueues_maximum_capacity_is_said_to_never_fit_as_the_quota_is():
    """``submit --wait`` and ``railtrain get`` stop on "It can never fit" (crds/contract.py, PERMANENT_MARKERS): Kueue's
    "> maximum capacity" (no flavor can ever hold the request, borrowing included) is that, for the quota; "insufficient
    unused quota" (waiting or preemption can help) is not."""
    from railtrain.crds import contract

    def pending(message):
        return kueuestatus.view({"metadata": {"name": "w"}, "spec": {"active": True}, "status": {"conditions": [
            {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": message}]}})  # fmt: skip

    never = pending("couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor gpu, previously considered "
                    "podsets requests (0) + current podset request (24) > maximum capacity (16)")  # fmt: skip
    assert kueuestatus.exceeds_quota(never)
    said = kueuestatus.pending_sentence(never, "team-q")
    assert contract.NEVER_FITS in said and "LocalQueue team-q's ClusterQueue as its quota is" in said and "(24) > maximum capacity (16)" in said
    waits = pending("couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu, 8 more needed")
    assert not kueuestatus.exceeds_quota(waits) and contract.NEVER_FITS not in kueuestatus.pending_sentence(waits, "team-q")
    mixed = pending("couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor a, previously considered podsets "
                    "requests (0) + current podset request (24) > maximum capacity (16), insufficient unused quota for nvidia.com/gpu in flavor b, 8 more needed")  # fmt: skip
    assert not kueuestatus.exceeds_quota(mixed)  # flavor b can hold it once others finish
    refusal = admit_waiting_refusal(never)
    assert refusal.permanent and refusal.warning and refusal.reason == reasons.WAITING_FOR_KUEUE
    assert not admit_waiting_refusal(waits).permanent


def admit_waiting_refusal(view):
    """The refusal the admission pass gives a waiting Kueue job whose Workload reads as ``view``."""
    from railtrain.operator.job import kueueadmit

    obj = kueue_job()
    request = planner.gang_request(observe_job(obj), [], NOW)
    decisions, _ = kueueadmit.place([request], {request.job: KueueAdmission("team-q", view)}, snapshot([], []))
    return decisions[0].result


def test_an_elastic_jobs_workload_may_be_partially_admitted_and_its_gang_takes_the_admitted_count_and_never_grows_past_it():
    """Issue 28, an elastic job's ``minCount``: its Workload asks for ``spec.nodes`` pods with ``minCount`` the fewest its
    parallelism allows (Kueue's partial admission may then admit fewer); the pass places a gang of at most the
    admitted count inside the assignment; a count below every allowed size is refused with a sentence; a Kueue job
    never grows by itself (that would take nodes outside its quota); a fixed-size job has no ``minCount``."""
    from railtrain.operator.job import kueueadmit, resize

    elastic = kueue_job(nodes=4, elastic={"minNodes": 2}, parallelism={"data": 8, "fsdp": 4})  # world 4x8; fsdp 4 -> any node count
    podset = workload.desired(observe_job(elastic), LEVELS, workload.Priority(0))["spec"]["podSets"][0]
    assert (podset["count"], podset["minCount"]) == (4, 2)
    assert "minCount" not in workload.desired(observe_job(kueue_job()), LEVELS, workload.Priority(0))["spec"]["podSets"][0]
    even = kueue_job(nodes=4, elastic={"minNodes": 2}, parallelism={"data": 2, "fsdp": 16})  # inner 16 = 2 nodes: sizes 2 and 4, not 3

    nodes, pods = fabric(blocks=1, racks=2, per_rack=4)
    snap = snapshot(nodes, pods, "nvidia.com/gpu", LEVELS)
    request = admit.read_queue([elastic], [], [], NOW).waiting["team/llm"][2]
    wl = admitted("w", ["b0r1n1", "b0r1n2", "b0r1n3"])  # Kueue admitted 3 of 4
    v = kueuestatus.view(wl)
    assert v.count == 3
    decisions, _ = kueueadmit.place([request], {request.job: KueueAdmission("team-q", v)}, snap)
    placed = decisions[0].result
    assert isinstance(placed, Placement) and sorted(placed.nodes) == ["b0r1n1", "b0r1n2", "b0r1n3"]
    ev_request = admit.read_queue([even], [], [], NOW).waiting["team/llm"][2]
    ev_decisions, _ = kueueadmit.place([ev_request], {ev_request.job: KueueAdmission("team-q", v)}, snap)
    two = ev_decisions[0].result  # 3 admitted, but this parallelism runs on 2 or 4 nodes: 2 of the 3
    assert isinstance(two, Placement) and len(two.nodes) == 2 and set(two.nodes) <= {"b0r1n1", "b0r1n2", "b0r1n3"}
    one = kueuestatus.view(admitted("w", ["b0r1n1"]))
    _, refused = kueueadmit.within_admitted_count(ev_request, one)
    assert refused is not None and refused.reason == reasons.OUTSIDE_KUEUE_ASSIGNMENT and "Kueue admitted 1 pods" in refused.message

    running = kueue_job(nodes=4, elastic={"minNodes": 2}, status={"phase": "Running", "admittedNodes": 3})
    assert not resize.wants_to_grow(running)
    running["metadata"]["labels"] = {}
    assert resize.wants_to_grow(running)  # the same job in railtrain's own queue grows


def test_a_multikueue_job_without_a_queue_label_says_once_why_nothing_dispatches_it_and_takes_no_turn():
    """``spec.managedBy: kueue.x-k8s.io/multikueue`` hands the job to Kueue's MultiKueue, which dispatches only jobs
    Kueue admits: without ``kueue.x-k8s.io/queue-name`` nothing would ever run it. The manager's operator says so in
    the Scheduled condition and a Warning Event, once, creates nothing, and the job never takes a turn in railtrain's
    own queue; a job on a worker names the Workload MultiKueue prebuilt for it."""
    from railtrain.operator import kueue as runtime
    from railtrain.operator.job import request
    from tests.operator.test_controller import FakeKube

    obj = job_obj("mk", managedBy=names.MULTIKUEUE_CONTROLLER)
    kube = FakeKube([], [obj])
    assert runtime.manager_side(kube, kube.jobs[("team", "mk")], observe_job(obj), LEVELS, NOW) is None
    status = kube.jobs[("team", "mk")]["status"]
    said = [c for c in status["conditions"] if c["type"] == "Scheduled"][0]
    assert said["reason"] == reasons.MULTIKUEUE_NEEDS_QUEUE and "needs the label kueue.x-k8s.io/queue-name" in said["message"], said
    assert kube.events == [("mk", "Warning", reasons.MULTIKUEUE_NEEDS_QUEUE)] and not kube.pods and not kube.services
    runtime.manager_side(kube, kube.jobs[("team", "mk")], observe_job(kube.jobs[("team", "mk")]), LEVELS, NOW)
    assert len(kube.events) == 1  # said once
    assert request.admission_request(observe_job(obj), [], NOW) is None and workload.managed_elsewhere(obj)
    copy = job_obj("mk")
    copy["metadata"]["labels"] = {names.QUEUE_LABEL: "team-q", names.PREBUILT_WORKLOAD_LABEL: "trainingjob-mk-1a2b3"}
    assert workload.workload_name(copy["metadata"]) == "trainingjob-mk-1a2b3" and workload.prebuilt_name(copy) == "trainingjob-mk-1a2b3"
    assert workload.workload_name(obj["metadata"]) == "trainingjob-mk-uid-m" and workload.prebuilt_name(obj) is None
