"""CPU threads of a training process (crds/threads.py; issue 25, item 7): the pure choice, the cgroup readers, the rendered contract."""

from __future__ import annotations

import pytest

from railtrain.crds import threads
from railtrain.crds.threads import ENV_CPU_SHARERS, ENV_OMP_NUM_THREADS, ENV_OMP_WAIT_POLICY, ENV_THREADS, choose_threads


@pytest.mark.parametrize(
    "cpus, environ, local_world, flag, want",
    [
        (2, {ENV_THREADS: "auto", ENV_CPU_SHARERS: "1"}, 1, 0, 2),  # one process on 2 CPUs: both
        (2, {ENV_THREADS: "auto", ENV_CPU_SHARERS: "2"}, 1, 0, 1),  # a local 2-node gang on 2 CPUs: one each
        (16, {ENV_THREADS: "auto", ENV_CPU_SHARERS: "3"}, 3, 0, 5),  # floor(16 / 3)
        (0.5, {ENV_THREADS: "auto"}, 1, 0, 1),  # a 500m quota: never below 1
        (8, {ENV_THREADS: "auto", ENV_OMP_NUM_THREADS: "1"}, 4, 0, 2),  # torchrun's OMP_NUM_THREADS=1 is not the user's
        (8, {}, 4, 0, 2),  # started by hand, no contract: torchrun's LOCAL_WORLD_SIZE shares the CPUs
        (8, {ENV_THREADS: "user", ENV_OMP_NUM_THREADS: "3"}, 1, 0, 3),  # the user's OMP_NUM_THREADS wins
        (8, {ENV_OMP_NUM_THREADS: "6"}, 1, 0, 6),  # by hand: an OMP_NUM_THREADS present is the user's
        (8, {ENV_THREADS: "user", ENV_OMP_NUM_THREADS: "junk"}, 2, 0, 4),  # unusable: railtrain's choice
        (8, {ENV_THREADS: "user", ENV_OMP_NUM_THREADS: "3"}, 1, 7, 7),  # --threads wins over everything
    ],
)
def test_choose_threads(cpus, environ, local_world, flag, want):
    assert choose_threads(cpus, environ, local_world, flag).threads == want


def test_the_reason_names_the_rule():
    assert choose_threads(2, {ENV_THREADS: "auto", ENV_CPU_SHARERS: "1"}).reason == "2 CPUs ÷ 1 process"
    assert choose_threads(8, {ENV_OMP_NUM_THREADS: "4"}).reason == "OMP_NUM_THREADS=4 set by the user"


@pytest.mark.parametrize("user, want_mark, want_policy", [
    (set(), "auto", "PASSIVE"),
    ({ENV_OMP_NUM_THREADS}, "user", "PASSIVE"),
    ({ENV_OMP_WAIT_POLICY}, "auto", None),
    ({"GOMP_SPINCOUNT"}, "auto", None),
])  # fmt: skip
def test_thread_env_leaves_the_users_variables_alone(user, want_mark, want_policy):
    env = threads.thread_env(4, user)
    assert env[ENV_THREADS] == want_mark and env[ENV_CPU_SHARERS] == "4"
    assert env.get(ENV_OMP_WAIT_POLICY) == want_policy


@pytest.mark.parametrize("text, want", [("max 100000", None), ("200000 100000", 2.0), ("50000 100000", 0.5), ("junk", None), ("", None)])
def test_parse_cpu_max(text, want):
    assert threads.parse_cpu_max(text) == want


def test_cgroup_v1_quota_and_none(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert threads.cgroup_cpus(tmp_path) == 3.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert threads.cgroup_cpus(tmp_path) is None
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # v2 first
    assert threads.cgroup_cpus(tmp_path) == 1.5


def test_process_cpus_is_within_the_affinity():
    import os

    assert 0 < threads.process_cpus() <= len(os.sched_getaffinity(0))


def test_pods_and_local_runs_render_the_thread_contract(tmp_path):
    """A pod shares its CPUs among procsPerNode processes; a local run's whole gang shares this machine; the user's variables win."""
    from railtrain.cli import local
    from railtrain.crds.validation import parse_manifest
    from railtrain.operator.job import render
    from tests.cli import manifests

    job = parse_manifest(manifests.job(nodes=2, procsPerNode=3, command=["torchrun", "-m", "railtrain.trainer"], args=["--data", "x"]))
    pod_env = {e["name"]: e.get("value") for e in render.render_pod(job, "ns", "uid", 0)["spec"]["containers"][0]["env"]}
    assert (pod_env[ENV_THREADS], pod_env[ENV_CPU_SHARERS], pod_env[ENV_OMP_WAIT_POLICY]) == ("auto", "3", "PASSIVE")
    nodes = local.plan_local(job, rdzv_port=23456, metrics_ports=[1, 2], base_dir=tmp_path, uid="u", environ={})
    assert (nodes[0].env[ENV_THREADS], nodes[0].env[ENV_CPU_SHARERS], nodes[0].env[ENV_OMP_WAIT_POLICY]) == ("auto", "6", "PASSIVE")
    shell = local.plan_local(job, rdzv_port=23456, metrics_ports=[1, 2], base_dir=tmp_path, uid="u", environ={ENV_OMP_NUM_THREADS: "2", ENV_OMP_WAIT_POLICY: "ACTIVE"})
    assert shell[0].env[ENV_THREADS] == "user" and ENV_OMP_WAIT_POLICY not in shell[0].env  # the shell's reach the process
    mine = parse_manifest(manifests.job(command=["python", "-c", "pass"], env=[{"name": ENV_OMP_NUM_THREADS, "value": "4"}]))
    pod_env = {e["name"]: e.get("value") for e in render.render_pod(mine, "ns", "uid", 0)["spec"]["containers"][0]["env"]}
    assert (pod_env[ENV_THREADS], pod_env[ENV_OMP_NUM_THREADS]) == ("user", "4")
