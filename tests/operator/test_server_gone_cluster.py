"""Finding 2 of the new-user trial on a real control plane: the API server goes away under a running operator.

The README's ``railtrain operator &`` followed by ``railtrain dev down`` left an
operator logging 1,434 lines with 45 tracebacks in 30 s, forever. Now every
failed try is one line (the operator's resync and kopf's own watch retries)
and once no resync has reached the server for ``--unreachable-seconds`` the
operator exits with status 1 and one sentence saying so (a Lease it cannot renew
is said once, not per poll). This test starts its
own control plane, since it stops it.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from railtrain.cli.controlplane.cluster import LocalCluster
from railtrain.cli.controlplane.operator_process import OperatorProcess
from tests.polling import wait_for

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]


def test_an_operator_whose_api_server_is_gone_exits_1_with_one_sentence_and_no_traceback(tmp_path):
    local = LocalCluster(f"gone-{uuid.uuid4().hex[:6]}")
    local.start(owner_pid=os.getpid())
    op = OperatorProcess(Path(local.kubeconfig), tmp_path / "operator.log", resync_seconds=1, extra_args=("--unreachable-seconds", "10"))
    try:
        local.install_crds(sorted((REPO / "crds").glob("*.yaml")))
        op.start()
        wait_for(lambda: "Initial authentication has finished" in op.log_path.read_text(errors="replace"), 60, "the operator to start watching")
    finally:
        local.stop()
    try:
        wait_for(lambda: not op.running(), 90, "the operator to stop by itself")
        assert op.proc.returncode == 1
        lines = op.log_path.read_text(errors="replace").splitlines()
        assert "Traceback" not in "\n".join(lines)
        assert any("resync pass failed: the API server does not answer" in line for line in lines)
        assert "has not answered for" in lines[-1] and "the operator stops" in lines[-1]
        assert not [line for line in lines if " ERROR " in line], "a retried failure is a WARNING, not an ERROR"
        lease = [line for line in lines if "could not renew the Lease" in line]
        assert len(lease) == 1, lease  # said once for the outage, not once per poll (about ten polls here)
    finally:
        op.stop()
