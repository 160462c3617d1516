"""Paired measurement on kind (issue 29): a killed rank restarted in place vs the whole gang restarted, on real pods.

Not collected by the suite (the file name does not start with ``test_``): ``bench/recovery_kind.py`` runs it with
``RAILTRAIN_E2E_INPLACE_PAIRS`` pairs and reads the ``PAIR {json}`` lines it prints. Each pair is two jobs of the tiny
example, 2 nodes, the same checkpoint settings (memory tier every 10 steps) and the same fault: rank 1's trainer
worker killed (``kill -9``) at step >= 40. The first job has ``runPolicy.restartInPlace`` (the supervisor restarts
the processes inside the running pods); the second has not (the operator deletes and recreates every pod). The clock
runs from the kill to the first step rank 0 logs in the next attempt (steps logged every step), read from
``kubectl logs`` every 0.5 s. The jobs run one after the other, alternating which path goes first, each on the
same 3 workers, and each is deleted before the next starts. ``RAILTRAIN_E2E_INPLACE_ARMS`` adds ``in-place-cold``
(the supervisor's warm launcher off) to compare the launcher's effect in the same run. Every pair also checks what it names: in place, the pods'
uids are unchanged and one in-place restart is counted; as a gang, every pod is new.
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from .conftest import wait_for
from .test_kind import KILL_WORKER, _restart_job, _run_until_step, pod_uids, rank0_log

pytestmark = [pytest.mark.kind, pytest.mark.timeout(7200)]

PAIRS = int(os.environ.get("RAILTRAIN_E2E_INPLACE_PAIRS", "1"))
ARMS = [a for a in os.environ.get("RAILTRAIN_E2E_INPLACE_ARMS", "in-place,gang").split(",") if a]
"""The paths each pair runs, in this order for even pairs and reversed for odd ones: ``in-place`` (the supervisor's
warm launcher on, the default), ``in-place-cold`` (``RAILTRAIN_SUPERVISOR_WARM=off``), ``gang``."""
STEP = re.compile(r"^step=(\d+) loss=", re.MULTILINE)
IN_PLACE_LINE = "[path in-place, verdict retryable]"
CHECKPOINT = {"interval": 1000, "memory": {"interval": 10, "keep": 1, "hostPath": "/run/railtrain-memory"}}
KILL_STEP = int(os.environ.get("RAILTRAIN_E2E_INPLACE_KILL_STEP", "40"))
"""The step rank 0 has logged when rank 1's worker is killed (later: the warm launcher has surely started)."""


def _kill_and_time(kind_cluster, ns: str, name: str, arm: str, tmp_path) -> dict:
    """Run job ``name`` to step :data:`KILL_STEP`, kill rank 1's worker, and time the kill → rank 0's first step of the
    next attempt."""
    in_place = arm != "gang"
    env = [{"name": "RAILTRAIN_SUPERVISOR_WARM", "value": "off"}] if arm == "in-place-cold" else []
    _restart_job(tmp_path, kind_cluster, ns, name, CHECKPOINT, steps=400, log_every=1, runPolicy={"restartInPlace": in_place}, env=env)
    _run_until_step(kind_cluster, ns, name, KILL_STEP)
    before = pod_uids(kind_cluster, name, ns)
    at_kill = max(int(n) for n in STEP.findall(rank0_log(kind_cluster, name, ns)))
    killed = time.monotonic()
    kind_cluster.kubectl("exec", f"{name}-1", "-n", ns, "--", "sh", "-c", KILL_WORKER)

    def trained_again() -> int | None:
        log = rank0_log(kind_cluster, name, ns)
        if in_place:
            after = log[log.index(IN_PLACE_LINE):] if IN_PLACE_LINE in log else ""
        else:  # a new rank-0 pod: its whole log is the next attempt's
            after = log if pod_uids(kind_cluster, name, ns).get(f"{name}-0") not in (None, before[f"{name}-0"]) else ""
        found = STEP.search(after)
        return int(found.group(1)) if found else None

    first = wait_for(trained_again, 600, f"{name}: rank 0 training again", interval=0.5)
    seconds = time.monotonic() - killed
    now = pod_uids(kind_cluster, name, ns)
    if in_place:  # the operator counts it when its progress reader next reads the ledger (every 5 s)
        status = wait_for(lambda: (st := kind_cluster.job(name, ns).get("status", {})).get("inPlaceRestarts") == 1 and st, 60, f"{name}'s in-place restart counted")
        assert now == before, (before, now, status)
    else:
        assert not set(now.values()) & set(before.values()), (before, now)
    warm = "attempt 1 started in the warm launcher" in rank0_log(kind_cluster, name, ns)  # read before the job is deleted
    kind_cluster.kubectl("delete", "trainingjob", name, "-n", ns, "--wait=true", timeout=300)
    wait_for(lambda: not pod_uids(kind_cluster, name, ns), 300, f"{name}'s pods gone")
    return {"path": arm, "seconds": round(seconds, 2), "killed_at_step": at_kill, "resumed_step": first, "rank0_warm_start": warm}


@pytest.mark.parametrize("pair", range(PAIRS))
def test_pair(kind_cluster, kind_ns, tmp_path, pair):
    out = {"pair": pair}
    for arm in ARMS if pair % 2 == 0 else ARMS[::-1]:
        sample = _kill_and_time(kind_cluster, kind_ns, f"{arm}-{pair}", arm, tmp_path)
        out[arm] = sample
        out[f"load_after_{arm}"] = os.getloadavg()[0]
    print("PAIR " + json.dumps(out), flush=True)
