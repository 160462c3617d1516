"""The health parts of the pod contract: verdicts with suspects, node name, settings, heartbeats, faults."""

import json

import pytest

from railtrain.crds import contract


@pytest.mark.parametrize("verdict", contract.HEALTH_VERDICTS)
def test_health_verdicts_round_trip_with_suspects(verdict):
    evidence = {"fingerprints": {"0": "a1b2", "1": "ffff"}, "score": 4.25, "age_s": 12.5}
    text = contract.format_termination_message(verdict, "ParameterMismatch", "rank 1 disagrees", nodes=["gpu-7"], ranks=[1], step=40, evidence=evidence)
    assert contract.parse_termination_message(text) == {
        "verdict": verdict, "reason": "ParameterMismatch", "message": "rank 1 disagrees",
        "nodes": ["gpu-7"], "ranks": [1], "step": 40, "evidence": evidence,
    }  # fmt: skip


def test_old_three_key_messages_still_parse():
    text = json.dumps({"verdict": "retryable", "reason": "Crash", "message": "boom"})
    assert contract.parse_termination_message(text) == {
        "verdict": "retryable", "reason": "Crash", "message": "boom", "nodes": [], "ranks": [], "step": None, "evidence": {},
    }  # fmt: skip
    # and a message without suspects is written in exactly the old form
    assert json.loads(contract.format_termination_message("retryable", "Crash", "boom")) == {"verdict": "retryable", "reason": "Crash", "message": "boom"}


@pytest.mark.parametrize(
    "extra",
    [{"nodes": "gpu-7"}, {"nodes": [1]}, {"ranks": [-1]}, {"ranks": ["1"]}, {"ranks": [True]}, {"step": "5"}, {"step": -2}, {"evidence": [1]}],
)
def test_malformed_suspect_fields_are_no_verdict(extra):
    assert contract.parse_termination_message(json.dumps({"verdict": "hang", "reason": "NoProgress", "message": ""} | extra)) is None


def test_huge_evidence_and_suspect_lists_still_fit():
    text = contract.format_termination_message(
        "straggler", "SlowRank", "m" * 5000, nodes=[f"node-{i:04d}" for i in range(2000)], ranks=list(range(2000)), step=3, evidence={"x": "y" * 8000}
    )
    assert len(text.encode()) <= contract.TERMINATION_MESSAGE_MAX_BYTES
    parsed = contract.parse_termination_message(text)
    assert parsed is not None and parsed["evidence"] == {"truncated": True} and parsed["nodes"][0] == "node-0000" and parsed["ranks"][0] == 0


def test_unserialisable_evidence_is_refused():
    with pytest.raises(ValueError, match="JSON"):
        contract.format_termination_message("hang", "NoProgress", "", evidence={"x": object()})


def test_written_verdict_carries_suspects(tmp_path):
    path = tmp_path / "termination-log"
    path.write_text("")
    environ = {contract.ENV_TERMINATION_MESSAGE_PATH: str(path)}
    assert contract.write_termination_message("hang", "NoProgress", "rank 2 stopped", environ, nodes=["n2"], ranks=[2], step=9)
    parsed = contract.parse_termination_message(path.read_text())
    assert (parsed["verdict"], parsed["nodes"], parsed["ranks"], parsed["step"]) == ("hang", ["n2"], [2], 9)


def test_node_name_round_trips_and_comes_from_the_downward_api():
    env = contract.PodEnvironment(job_name="j", namespace="n", nnodes=1, node_rank=0, procs_per_node=1, rdzv_addr="a", node_name="gpu-3")
    assert contract.read_env(contract.pod_env(env)).node_name == "gpu-3"
    assert contract.DOWNWARD_API_FIELDS[contract.ENV_NODE_NAME] == "spec.nodeName"


def test_health_settings_round_trip_and_errors():
    settings = contract.HealthSettings(fingerprint_interval=7, straggler_threshold=0.25, straggler_action="stop", hang_floor_s=2.5)
    assert contract.read_health(contract.health_env(settings)) == settings
    assert contract.read_health({}) == contract.HealthSettings()
    with pytest.raises(contract.ContractError, match="RAILTRAIN_HEALTH_KAT_INTERVAL must be an int"):
        contract.read_health({"RAILTRAIN_HEALTH_KAT_INTERVAL": "often"})
    with pytest.raises(contract.ContractError, match="RAILTRAIN_HEALTH_STRAGGLER_ACTION must be 'report' or 'stop'"):
        contract.read_health({"RAILTRAIN_HEALTH_STRAGGLER_ACTION": "panic"})
    with pytest.raises(contract.ContractError, match="RAILTRAIN_HEALTH_FINGERPRINT_INTERVAL must be >= 1"):
        contract.read_health({"RAILTRAIN_HEALTH_FINGERPRINT_INTERVAL": "0"})
    with pytest.raises(contract.ContractError, match="unknown field 'nope'"):
        contract.health_from_mapping({"nope": 1}, where="health.json")
    assert contract.health_from_mapping({"spike_threshold": 3}, settings).spike_threshold == 3.0


def test_heartbeat_round_trip():
    beat = contract.Heartbeat(rank=5, step=120, phase="collective", time=1700000000.25, node="gpu,odd")
    assert contract.parse_heartbeat(contract.format_heartbeat(beat).encode()) == beat
    with pytest.raises(contract.ContractError, match="heartbeat"):
        contract.parse_heartbeat("5,x,compute,1.0,n")


FAULTS = contract.Faults(
    bitflip=contract.BitFlipFault(rank=1, step=20, mode="persistent", bit=3, index=17, target="activation"),
    slow=contract.SlowFault(rank=2, factor=1.2, from_step=10),
    hang=contract.HangFault(rank=0, step=5, kind="collective"),
    kill=contract.KillFault(rank=3, step=8),
    bad_batch=contract.BadBatchFault(step=6, rank=-1),
    hold_checkpoint_step=4,
)


def test_faults_round_trip():
    env = contract.fault_env(FAULTS)
    assert set(env) == set(contract.FAULT_VARIABLES)
    assert contract.read_faults(env) == FAULTS and FAULTS.any()
    assert contract.read_faults({}) == contract.Faults() and not contract.Faults().any()
    assert contract.read_faults({contract.ENV_FAULT_HANG: "rank=1,step=2"}).hang == contract.HangFault(1, 2, "compute")


@pytest.mark.parametrize(
    ("variable", "value", "match"),
    [
        (contract.ENV_FAULT_BITFLIP, "rank=1", "needs step"),
        (contract.ENV_FAULT_BITFLIP, "rank=1,step=2,mode=sometimes", "mode must be one of once, persistent"),
        (contract.ENV_FAULT_HANG, "rank=1,step=2,kind=io", "kind must be one of compute, collective"),
        (contract.ENV_FAULT_SLOW, "rank=1,factor=0.5", "factor must be >= 1"),
        (contract.ENV_FAULT_KILL, "rank=x,step=1", "rank must be an int"),
        (contract.ENV_FAULT_KILL, "rank:1,step=1", "key=value pairs"),
        (contract.ENV_FAULT_KILL, "rank=-1,step=1", ">= 0"),
        (contract.ENV_FAULT_HOLD_CHECKPOINT_STEP, "soon", "must be an int"),
    ],
)
def test_bad_fault_values_name_the_variable(variable, value, match):
    with pytest.raises(contract.ContractError, match=match) as info:
        contract.read_faults({variable: value})
    assert variable in str(info.value)
