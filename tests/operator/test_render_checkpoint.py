"""Checkpoint tiers in the rendered pods: volumes, mounts and the contract's variables."""

from railtrain.cli.local import local_tier_dirs
from railtrain.crds import contract
from railtrain.crds.api import TrainingJob
from railtrain.operator.job import render


def job(**checkpoint):
    return TrainingJob.model_validate(
        {
            "apiVersion": "railtrain.dev/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {"name": "llm"},
            "spec": {"image": "img:1", "nodes": 2, "procsPerNode": 4, "checkpoint": checkpoint},
        }
    )


def _pod(j, uid="uid"):
    pod = render.render_pod(j, "team", uid, 1)
    container = pod["spec"]["containers"][0]
    return pod["spec"].get("volumes", []), container.get("volumeMounts", []), {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_no_tiers_no_volumes():
    volumes, mounts, env = _pod(job(location="s3://b/x"))
    assert volumes == [] and mounts == []
    assert env[contract.ENV_CHECKPOINT_DIR] == "s3://b/x" and env[contract.ENV_CHECKPOINT_MEMORY_DIR] == ""


def test_node_volumes_outlive_the_pod():
    volumes, mounts, env = _pod(job(location="/ckpt", volumeClaim="shared", memory={"interval": 5}, local={"hostPath": "/mnt/nvme"}))
    assert volumes == [
        {"name": "checkpoint-memory", "hostPath": {"path": "/dev/shm/railtrain/team/llm/uid", "type": "DirectoryOrCreate"}},
        {"name": "checkpoint-local", "hostPath": {"path": "/mnt/nvme/team/llm/uid", "type": "DirectoryOrCreate"}},
        {"name": "checkpoint-persistent", "persistentVolumeClaim": {"claimName": "shared"}},
    ]
    assert [(m["name"], m["mountPath"]) for m in mounts] == [
        ("checkpoint-memory", contract.MEMORY_TIER_MOUNT), ("checkpoint-local", contract.LOCAL_TIER_MOUNT), ("checkpoint-persistent", "/ckpt"),
    ]  # fmt: skip
    pod_env = contract.read_env(env)
    assert (pod_env.checkpoint_memory_dir, pod_env.checkpoint_memory_interval, pod_env.checkpoint_memory_keep) == (contract.MEMORY_TIER_MOUNT, 5, 1)
    assert (pod_env.checkpoint_local_dir, pod_env.checkpoint_local_interval, pod_env.checkpoint_local_keep) == (contract.LOCAL_TIER_MOUNT, 50, 2)


def test_pod_volumes_are_empty_dirs():
    volumes, _, _ = _pod(job(memory={"volume": "pod", "sizeLimit": "8Gi"}, local={"volume": "pod"}))
    assert volumes == [
        {"name": "checkpoint-memory", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
        {"name": "checkpoint-local", "emptyDir": {}},
    ]


def _host_paths(volumes):
    return {v["name"]: v["hostPath"]["path"] for v in volumes if "hostPath" in v}


def test_node_local_tiers_belong_to_the_job_uid_so_a_resubmitted_job_starts_empty():
    tiers = job(memory={}, local={"hostPath": "/mnt/nvme"})
    old_volumes, _, old_env = _pod(tiers, uid="0d1e-old")
    new_volumes, _, new_env = _pod(tiers, uid="7a2b-new")
    assert _host_paths(old_volumes) == {"checkpoint-memory": "/dev/shm/railtrain/team/llm/0d1e-old", "checkpoint-local": "/mnt/nvme/team/llm/0d1e-old"}
    assert _host_paths(new_volumes) == {"checkpoint-memory": "/dev/shm/railtrain/team/llm/7a2b-new", "checkpoint-local": "/mnt/nvme/team/llm/7a2b-new"}
    assert (contract.read_env(old_env).run_id, contract.read_env(new_env).run_id) == ("0d1e-old", "7a2b-new")


def test_an_explicit_run_id_resumes_across_jobs_on_purpose():
    tiers = job(local={"hostPath": "/mnt/nvme"}, runId="llm-exp-3")
    (old_volumes, _, old_env), (new_volumes, _, new_env) = _pod(tiers, uid="0d1e-old"), _pod(tiers, uid="7a2b-new")
    assert _host_paths(old_volumes) == _host_paths(new_volumes) == {"checkpoint-local": "/mnt/nvme/team/llm/llm-exp-3"}
    assert contract.read_env(old_env).run_id == contract.read_env(new_env).run_id == "llm-exp-3"


def test_local_runs_give_each_node_its_own_tier_directories():
    env = render.pod_environment(job(memory={}, local={}).spec, "llm", "local", 0, uid="run-1")
    zero, one = local_tier_dirs(env, "llm", 0), local_tier_dirs(env, "llm", 1)
    assert zero["checkpoint_memory_dir"].endswith("llm/run-1/node-0") and zero["checkpoint_memory_dir"] != one["checkpoint_memory_dir"]
    assert zero["checkpoint_local_dir"] != one["checkpoint_local_dir"]
    assert local_tier_dirs(render.pod_environment(job().spec, "llm", "local", 0), "llm", 0) == {}
