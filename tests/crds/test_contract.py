"""The pod-environment contract round-trips and fails clearly."""

import pytest

from railtrain.crds import contract


def make_env(**kw):
    base = dict(job_name="llm", namespace="team-a", nnodes=4, node_rank=2, procs_per_node=8, rdzv_addr="llm-0.llm.team-a.svc")
    return contract.PodEnvironment(**(base | kw))


def test_round_trip_preserves_every_field():
    env = make_env(rdzv_port=1234, parallelism="data=2,fsdp=16,tensor=1,pipeline=1", checkpoint_dir="s3://b/ck", checkpoint_interval=7, metrics_port=9999, restart_count=3)
    assert contract.read_env(contract.pod_env(env)) == env


def test_torchrun_variables_match_the_gang():
    out = contract.pod_env(make_env())
    assert out["PET_NNODES"] == "4" and out["PET_NPROC_PER_NODE"] == "8" and out["PET_NODE_RANK"] == "2"
    assert out["PET_MASTER_ADDR"] == "llm-0.llm.team-a.svc" and out["PET_MASTER_PORT"] == str(contract.DEFAULT_RDZV_PORT)
    assert make_env().world_size == 32


def test_missing_required_variable_is_named():
    environ = contract.pod_env(make_env())
    del environ[contract.ENV_NNODES]
    with pytest.raises(contract.ContractError, match=contract.ENV_NNODES):
        contract.read_env(environ)


def test_non_integer_is_named():
    environ = contract.pod_env(make_env()) | {contract.ENV_NODE_RANK: "two"}
    with pytest.raises(contract.ContractError, match=f"{contract.ENV_NODE_RANK} must be an integer"):
        contract.read_env(environ)


def test_parallelism_round_trip():
    text = contract.format_parallelism(2, 4, 8, 1)
    assert contract.parse_parallelism(text) == {"data": 2, "fsdp": 4, "tensor": 8, "pipeline": 1}
    assert text == "data=2,fsdp=4,tensor=8,pipeline=1"  # context=1 is not written: an older trainer reads it as before
    with_cp = contract.format_parallelism(2, 1, 2, 1, context=4)
    assert with_cp == "data=2,fsdp=1,tensor=2,pipeline=1,context=4"
    assert contract.parse_parallelism(with_cp) == {"data": 2, "fsdp": 1, "tensor": 2, "pipeline": 1, "context": 4}
    with pytest.raises(contract.ContractError):
        contract.parse_parallelism("data=two")


def test_no_other_module_spells_the_variable_names():
    """Only the contract (crds/contract.py and the parts it re-exports) may spell RAILTRAIN_* / PET_* variable names."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    contract_files = {root / "crds" / name for name in ("contract.py", "verdicts.py", "health_settings.py", "faults.py", "threads.py")}
    offenders = []
    for folder in ("operator", "trainer", "cli", "crds"):
        for path in (root / folder).rglob("*.py"):
            if path in contract_files:
                continue
            text = path.read_text()
            for name in [v for k, v in vars(contract).items() if k.startswith("ENV_")]:
                if f'"{name}"' in text or f"'{name}'" in text:
                    offenders.append(f"{path.relative_to(root)}: {name}")
    assert offenders == []
