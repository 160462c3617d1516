"""Invariants of the phase machine over generated pod-phase mixes and event sequences (hypothesis).

* phase and conditions never disagree: status.phase is Running, Succeeded,
  Failed or Suspended exactly when the condition of that name is True;
* a terminal phase never leaves, and a terminal job creates or releases nothing;
* a healthy gang (every rank Running or Succeeded) is never timed out, and a
  gang whose every rank exited 0 is Succeeded.
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from railtrain.operator.job import planner
from railtrain.operator.job.conditions import TERMINAL_PHASES, find
from railtrain.operator.job.phases import ALL_PHASES, MACHINE
from railtrain.operator.job.phases.agreement import PHASE_CONDITIONS
from railtrain.operator.scheduling.placement import Placement
from railtrain.operator.scheduling.refusal import Refusal

from .builders import fail, gang, job_obj

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
POD_PHASES = ("Pending", "Running", "Succeeded", "Failed")


def assert_agree(status):
    for type_ in PHASE_CONDITIONS:
        c = find(status.get("conditions") or [], type_)
        true = bool(c and c["status"] == "True")
        assert true == (status["phase"] == type_), f"phase {status['phase']} but condition {type_}={c and c['status']}: {status['conditions']}"


def set_phase(pod, phase, code=1):
    if phase == "Failed":
        return fail(pod, code=code, message="boom")
    pod["status"] = {"phase": phase}
    return pod


def consistent_status(phase, restarts=0):
    """An observed status whose phase agrees with its conditions (as the machine leaves it)."""
    conds = [{"type": t, "status": "True" if t == phase else "False", "reason": "R", "message": "", "lastTransitionTime": "2026-11-29T11:00:00Z"}
             for t in PHASE_CONDITIONS]
    conds.append({"type": "Scheduled", "status": "True", "reason": "GangPlaced", "message": "", "lastTransitionTime": "2026-11-29T11:00:00Z"})
    status = {"phase": phase, "conditions": conds, "restarts": restarts}
    if phase in (("Running",) + tuple(TERMINAL_PHASES)):
        status["startTime"] = "2026-11-29T11:00:00Z"
    return status


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.integers(1, 4),
    old_phase=st.sampled_from(sorted(ALL_PHASES)),
    phases=st.lists(st.tuples(st.sampled_from(POD_PHASES), st.sampled_from((1, 2))), min_size=4, max_size=4),
    present=st.lists(st.booleans(), min_size=4, max_size=4),
    gated=st.booleans(),
    suspend=st.booleans(),
    deadline=st.sampled_from((None, 30, 7200)),
    later=st.integers(0, 4000),
    answer=st.sampled_from((None, "place", "refuse")),
)
def test_any_pod_phase_mix_keeps_phase_and_conditions_in_agreement(nodes, old_phase, phases, present, gated, suspend, deadline, later, answer):
    run_policy = {"suspend": suspend, "gangTimeoutSeconds": 60} | ({"activeDeadlineSeconds": deadline} if deadline else {})
    obj = job_obj(nodes=nodes, runPolicy=run_policy, status=consistent_status(old_phase))
    pods = [set_phase(p, ph, code) for p, (ph, code), keep in zip(gang(obj, gated=gated, nodes=[f"n{i}" for i in range(nodes)]), phases, present) if keep]
    if gated:
        pods = [set_phase(p, "Pending") for p in pods]
    placement = {None: None, "place": Placement(tuple(f"n{i}" for i in range(nodes))), "refuse": Refusal("Unschedulable", "no room")}[answer]
    seen = copy.deepcopy((obj, pods))
    p = planner.plan(obj, pods, True, NOW + timedelta(seconds=later), placement)
    assert (obj, pods) == seen  # the plan changes neither the job nor its pods: the operator hands it the cache's own pod dicts
    assert_agree(p.status)
    if old_phase in TERMINAL_PHASES:
        assert p.status["phase"] == old_phase
        assert not p.create_pods and not p.ungate and not p.pin and p.create_service is None
    by_rank = [ph for (ph, _), keep in zip(phases[:nodes], present) if keep]
    if not gated and not suspend and not deadline and old_phase not in TERMINAL_PHASES and len(by_rank) == nodes:
        if all(ph == "Succeeded" for ph in by_rank):
            assert p.status["phase"] == "Succeeded"
        elif all(ph in ("Running", "Succeeded") for ph in by_rank) and answer is None:
            assert p.status["phase"] == "Running" and not p.delete_pods


EVENTS = st.one_of(
    st.tuples(st.just("tick"), st.integers(1, 120)),
    st.tuples(st.just("pod"), st.integers(0, 3), st.sampled_from(POD_PHASES), st.sampled_from((1, 2))),
    st.tuples(st.just("place")),
    st.tuples(st.just("refuse")),
    st.tuples(st.just("suspend"), st.booleans()),
    st.tuples(st.just("gone"), st.integers(0, 3)),
)


def apply(pods, plan, now):
    """The effect of a plan's actions on the pods (what kube.py and the kubelet would do)."""
    for name in plan.delete_pods:
        pods.pop(name, None)
    for manifest in plan.create_pods:
        pods[manifest["metadata"]["name"]] = copy.deepcopy(manifest) | {"status": {"phase": "Pending"}}
    for name in plan.ungate:
        pod = pods[name]
        pod["spec"].pop("schedulingGates", None)
        pod["spec"]["nodeName"] = plan.pin.get(name) or pod["spec"].get("nodeSelector", {}).get("kubernetes.io/hostname")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.integers(1, 3), events=st.lists(EVENTS, min_size=1, max_size=25))
def test_event_sequences_never_break_the_invariants(nodes, events):
    obj = job_obj(nodes=nodes, runPolicy={"gangTimeoutSeconds": 60, "backoffLimit": 2})
    pods: dict = {}
    now = NOW
    terminal = None
    for event in events:
        placement = None
        if event[0] == "tick":
            now += timedelta(seconds=event[1])
        elif event[0] == "pod":
            name = f"llm-{event[1]}"
            if name in pods and not pods[name]["spec"].get("schedulingGates") and pods[name]["status"]["phase"] in ("Pending", "Running"):
                set_phase(pods[name], event[2], event[3])
        elif event[0] == "gone":
            pods.pop(f"llm-{event[1]}", None)
        elif event[0] == "suspend":
            obj["spec"]["runPolicy"]["suspend"] = event[1]
        elif planner.gang_request(obj, list(pods.values()), now) is not None:
            placement = Placement(tuple(f"n{i}" for i in range(nodes))) if event[0] == "place" else Refusal("Unschedulable", "no room")
        p = planner.plan(obj, list(pods.values()), True, now, placement)
        assert_agree(p.status)
        if terminal:
            assert p.status["phase"] == terminal and not p.create_pods and not p.ungate
        if p.status["phase"] in TERMINAL_PHASES:
            terminal = p.status["phase"]
        apply(pods, p, now)
        obj = obj | {"status": p.status}


def test_every_row_is_documented_and_named_once():
    names = [row.name for row in MACHINE]
    assert len(names) == len(set(names)) and all(row.doc for row in MACHINE)
    assert MACHINE[-1].name == "waiting"
