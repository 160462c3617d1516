"""bench/allreduce.py at its smallest size (gloo on CPU), and its bandwidth formula."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from allreduce import bus_bandwidth, profile_env  # noqa: E402


def test_bus_bandwidth_is_nccl_tests_definition():
    # 1 GB in 1 s over 8 ranks: algbw 1 GB/s, busbw × 2·7/8
    assert bus_bandwidth(10**9, 1.0, 8) == pytest.approx(1.75e9)
    assert bus_bandwidth(10**9, 0.5, 2) == pytest.approx(2e9)


def test_profile_env_resolves_the_node_hcas():
    assert profile_env("infiniband", "mlx5_0,mlx5_1") == {"NCCL_CROSS_NIC": "0", "NCCL_SOCKET_IFNAME": "=eth0", "NCCL_IB_HCA": "=mlx5_0,mlx5_1"}
    assert "NCCL_IB_HCA" not in profile_env("infiniband")


def test_dry_run_on_cpu_compares_off_and_on(tmp_path):
    out = tmp_path / "allreduce.json"
    proc = subprocess.run(
        [sys.executable, "bench/allreduce.py", "--device", "cpu", "--gpus", "2", "--sizes", "4096", "--iters", "2", "--warmup", "1",
         "--repeats", "1", "--fabric-profile", "aws", "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| bytes" in proc.stdout and "profile aws off vs on" in proc.stdout, proc.stdout
    record = json.loads(out.read_text())["result"]
    assert record["env"] == {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_SOCKET_IFNAME": "=eth0"}
    (row,) = record["sizes"]
    assert row["bytes"] == 4096 and row["busbw_off"] > 0 and row["busbw_on"] > 0
    assert row["ratio"] == pytest.approx(row["busbw_on"] / row["busbw_off"])
