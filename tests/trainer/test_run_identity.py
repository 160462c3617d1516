"""A run's node-local checkpoints belong to that run (docs/checkpoints.md, "Run identity").

Real trainer gangs (one ``torchrun`` per simulated node) started from the pods the
operator renders: each node's disk is a directory of its own, and the local tier's
``hostPath`` volume is that disk's copy of the rendered path, as the kubelet mounts it.
"""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

from railtrain.crds import contract
from railtrain.crds.api import TrainingJob
from railtrain.operator.job import render
from tests.trainer.tierkit import RUN_TIMEOUT_S, clean_env, free_port, read_losses, torchrun

NAMESPACE = "team"
HOST_PATH = "/var/lib/railtrain/checkpoints"


def job(run_id: str | None = None, location: str | None = None) -> TrainingJob:
    """A 2-node × 1-process job with a node-disk local tier every 2 steps (and a persistent one at ``location``)."""
    checkpoint: dict = {"local": {"interval": 2, "keep": 2, "hostPath": HOST_PATH}}
    if run_id:
        checkpoint["runId"] = run_id
    if location:
        checkpoint |= {"location": location, "interval": 2}
    return TrainingJob.model_validate(
        {
            "apiVersion": "railtrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "llm"},
            "spec": {"image": "img:1", "command": ["torchrun", "-m", "railtrain.trainer"], "nodes": 2, "procsPerNode": 1, "checkpoint": checkpoint},
        }
    )  # fmt: skip


def local_tier_on(disk: Path, pod: dict) -> Path:
    """Where node ``disk`` keeps the rendered pod's local-tier ``hostPath``."""
    (path,) = [v["hostPath"]["path"] for v in pod["spec"]["volumes"] if v["name"] == "checkpoint-local"]
    return disk / path.lstrip("/")


def submit(tmp: Path, j: TrainingJob, uid: str, *args: str) -> tuple[str, dict[int, float], list[Path]]:
    """Run the gang of ``j`` (as created with ``uid``) to the end; returns node 0's output, its losses and each node's local tier."""
    port, metrics = free_port(), tmp / f"metrics-{uid}.jsonl"
    procs, outputs, tiers = [], [], []
    for pod in render.render_gang(j, NAMESPACE, uid):
        rank = int(pod["metadata"]["labels"][contract.LABEL_NODE_RANK])
        container = pod["spec"]["containers"][0]
        tier = local_tier_on(tmp / f"disk-{rank}", pod)
        env = contract.read_env({e["name"]: e["value"] for e in container["env"] if "value" in e})
        env = replace(env, rdzv_addr="127.0.0.1", rdzv_port=port, metrics_port=0, node_name=f"node-{rank}", checkpoint_local_dir=str(tier))
        out = (tmp / f"{uid}-node{rank}.log").open("w")
        cmd = torchrun(*args, "--log-every", "1", "--metrics-file", str(metrics))
        procs.append(subprocess.Popen(cmd, cwd=tmp, env=clean_env(contract.pod_env(env)), stdout=out, stderr=subprocess.STDOUT))
        outputs.append(out)
        tiers.append(tier)
    rcs = [p.wait(timeout=RUN_TIMEOUT_S) for p in procs]
    for out in outputs:
        out.close()
    logs = [Path(o.name).read_text() for o in outputs]
    assert rcs == [0, 0], f"nodes exited {rcs}:\n" + "\n----\n".join(logs)
    return logs[0], read_losses(metrics), tiers


def steps_in(tier: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in tier.glob("step-*")) if tier.is_dir() else []


def test_a_job_deleted_and_submitted_again_does_not_resume_the_old_jobs_local_tier(tmp_path: Path) -> None:
    out, old_losses, old_tiers = submit(tmp_path, job(), "uid-old", "--steps", "4", "--seed", "1")
    assert [steps_in(t) for t in old_tiers] == [[2, 4], [2, 4]]  # no persistent tier: the local tier is the only copy and stays
    assert "kept the local tier(s) of this run at step 4" in out

    out, new_losses, new_tiers = submit(tmp_path, job(), "uid-new", "--steps", "4", "--seed", "2")
    assert "resumed from step" not in out and "nothing to train" not in out, out
    assert sorted(new_losses) == [1, 2, 3, 4]  # trained from scratch, with its own seed
    assert new_losses[1] != old_losses[1]
    assert [steps_in(t) for t in new_tiers] == [[2, 4], [2, 4]] and set(new_tiers).isdisjoint(old_tiers)
    assert [steps_in(t) for t in old_tiers] == [[2, 4], [2, 4]]  # the old job's shards are untouched


def test_the_same_run_id_resumes_on_purpose_and_success_removes_the_node_local_tier(tmp_path: Path) -> None:
    _, _, first_tiers = submit(tmp_path, job(run_id="exp-7"), "uid-first", "--steps", "4", "--seed", "1")
    assert [steps_in(t) for t in first_tiers] == [[2, 4], [2, 4]]

    location = str(tmp_path / "persistent")
    out, losses, tiers = submit(tmp_path, job(run_id="exp-7", location=location), "uid-second", "--steps", "6", "--seed", "1")
    assert tiers == first_tiers
    assert "resumed from step 4 (tier local" in out, out
    assert sorted(losses) == [5, 6]
    # It succeeded and the persistent tier holds step 6: the run's node-local tier is emptied.
    assert f"removed the local tier(s) of this run (4 shard(s)): the run succeeded and {location} holds step 6" in out, out
    assert [steps_in(t) for t in tiers] == [[], []]
    assert (Path(location) / "step-6" / "railtrain-manifest.json").is_file()
