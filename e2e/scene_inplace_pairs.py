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
import statistics
import time
from datetime import datetime

import pytest

from .conftest import wait_for
from .test_kind import KILL_WORKER, _restart_job, _run_until_step, pod_uids, rank0_log

pytestmark = [pytest.mark.kind, pytest.mark.timeout(7200)]

PAIRS = int(os.environ.get("RAILTRAIN_E2E_INPLACE_PAIRS", "1"))
ARMS = [a for a in os.environ.get("RAILTRAIN_E2E_INPLACE_ARMS", "in-place,gang").split(",") if a]
"""The paths each pair runs, in this order for even pairs and reversed for odd ones: ``in-place`` (the supervisor's
warm launcher on, the default), ``in-place-cold`` (``RAILTRAIN_SUPERVISOR_WARM=off``), ``gang``, ``groups`` (the job
as two replica groups: only the killed rank's group is replaced, issue 31)."""
STEP = re.compile(r"^step=(\d+) loss=", re.MULTILINE)
IN_PLACE_LINE = "[path in-place, verdict retryable]"
IN_PLACE_PREFIX = "[path in-place, verdict "
CHECKPOINT = {"interval": 1000, "memory": {"interval": 10, "keep": 1, "hostPath": "/run/railtrain-memory"}}
KILL_STEP = int(os.environ.get("RAILTRAIN_E2E_INPLACE_KILL_STEP", "40"))
"""The step rank 0 has logged when rank 1's worker is killed (later: the warm launcher has surely started); with
``RAILTRAIN_E2E_INPLACE_FAULT`` ``hang`` or ``data``, the step the injected fault fires at."""
FAULT = os.environ.get("RAILTRAIN_E2E_INPLACE_FAULT", "kill")
"""The fault of every pair: ``kill`` (rank 1's worker ``kill -9``), ``hang`` (``RAILTRAIN_FAULT_HANG``: rank 1 never
enters the step's next collective; the watchdogs end the attempt with a hang verdict), ``data``
(``RAILTRAIN_FAULT_BAD_BATCH``: the step's batch gives a non-finite loss on every rank; the health check re-executes
it and skips the batch, no restart on either path)."""
STAMPED_STEP = re.compile(r"^(\S+) step=(\d+) loss=", re.MULTILINE)
STAMPED_HANG = re.compile(r"^(\S+) health: verdict=hang rank ", re.MULTILINE)
STAMPED_FAULT = re.compile(r"^(\S+) fault: rank 1 never enters the next collective", re.MULTILINE)


def stamp(text: str) -> float:
    """Seconds since the epoch of a ``kubectl logs --timestamps`` prefix (RFC 3339, nanoseconds cut to microseconds)."""
    head, _, frac = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00").timestamp()


def stamped_log(kind_cluster, pod: str, ns: str) -> str:
    """``pod``'s log, every line prefixed with the container runtime's timestamp ("" when it has none yet)."""
    return kind_cluster.kubectl("logs", pod, "-n", ns, "--timestamps", check=False).stdout


def _hang_and_time(kind_cluster, ns: str, name: str, arm: str, tmp_path) -> dict:
    """Run job ``name`` with rank 1 hanging before step :data:`KILL_STEP`'s collective; time the hang (rank 1's fault
    line) → the first hang verdict → rank 0's first step of the next attempt, from the runtime's log timestamps."""
    in_place = arm != "gang"
    env = [{"name": "RAILTRAIN_FAULT_HANG", "value": f"rank=1,step={KILL_STEP},kind=collective"}]
    env += [{"name": "RAILTRAIN_SUPERVISOR_WARM", "value": "off"}] if arm == "in-place-cold" else []
    _restart_job(tmp_path, kind_cluster, ns, name, CHECKPOINT, steps=400, log_every=1, runPolicy={"restartInPlace": in_place}, env=env)
    wait_for(lambda: kind_cluster.phase(name, ns) == "Running", 300, f"{name} Running")
    before = wait_for(lambda: len(uids := pod_uids(kind_cluster, name, ns)) == 2 and uids, 300, f"{name}'s two pods")
    seen: dict[str, float] = {}

    def trained_again() -> int | None:
        for pod in (f"{name}-0", f"{name}-1"):  # the old pods' lines, read while they exist
            if pod_uids(kind_cluster, name, ns).get(pod) != before[pod]:
                continue
            log = stamped_log(kind_cluster, pod, ns)
            if "fault" not in seen and (m := STAMPED_FAULT.search(log)):
                seen["fault"] = stamp(m.group(1))
            if m := STAMPED_HANG.search(log):
                seen["verdict"] = min(seen.get("verdict", float("inf")), stamp(m.group(1)))
        log = stamped_log(kind_cluster, f"{name}-0", ns)
        if in_place:
            after = log[log.index(IN_PLACE_PREFIX):] if IN_PLACE_PREFIX in log else ""
        else:
            after = log if pod_uids(kind_cluster, name, ns).get(f"{name}-0") not in (None, before[f"{name}-0"]) else ""
        found = STAMPED_STEP.search(after)
        if found and "fault" in seen:
            seen["trained"] = stamp(found.group(1))
            return int(found.group(2))
        return None

    first = wait_for(trained_again, 600, f"{name}: rank 0 training again", interval=0.5)
    now = pod_uids(kind_cluster, name, ns)
    if in_place:
        wait_for(lambda: kind_cluster.job(name, ns).get("status", {}).get("inPlaceRestarts") == 1, 60, f"{name}'s in-place restart counted")
        assert now == before, (before, now)
    else:
        assert not set(now.values()) & set(before.values()), (before, now)
    _delete(kind_cluster, ns, name)
    verdict = seen.get("verdict", seen["fault"])
    return {"path": arm, "seconds": round(seen["trained"] - seen["fault"], 2), "detect_seconds": round(verdict - seen["fault"], 2),
            "verdict_to_step_seconds": round(seen["trained"] - verdict, 2), "fault_step": KILL_STEP, "resumed_step": first}  # fmt: skip


def _data_and_time(kind_cluster, ns: str, name: str, arm: str, tmp_path) -> dict:
    """Run job ``name`` with step :data:`KILL_STEP`'s batch poisoned on every rank; the time it cost: rank 0's step
    ``KILL_STEP + 1`` line minus step ``KILL_STEP - 1``'s, less two median step intervals (timestamps of the runtime),
    and that nothing restarted (the same pods, no restart counted of either kind)."""
    env = [{"name": "RAILTRAIN_FAULT_BAD_BATCH", "value": f"rank=-1,step={KILL_STEP}"}]
    _restart_job(tmp_path, kind_cluster, ns, name, CHECKPOINT, steps=400, log_every=1, runPolicy={"restartInPlace": arm != "gang"}, env=env)
    _run_until_step(kind_cluster, ns, name, KILL_STEP + 10)
    log = stamped_log(kind_cluster, f"{name}-0", ns)
    at = {int(n): stamp(t) for t, n in STAMPED_STEP.findall(log)}
    status = kind_cluster.job(name, ns).get("status", {})
    restarts = status.get("restarts", 0) + status.get("infrastructureRestarts", 0) + status.get("inPlaceRestarts", 0)
    steps = sorted(n for n in at if 10 <= n < KILL_STEP - 1)
    median = statistics.median(at[n + 1] - at[n] for n in steps)
    skipped = "skipping the batch" in log
    _delete(kind_cluster, ns, name)
    assert restarts == 0 and skipped, (status, log[-2000:])
    return {"path": arm, "seconds": round(at[KILL_STEP + 1] - at[KILL_STEP - 1] - 2 * median, 2), "median_step_seconds": round(median, 3),
            "fault_step": KILL_STEP, "restarts": restarts}  # fmt: skip


def _delete(kind_cluster, ns: str, name: str) -> None:
    kind_cluster.kubectl("delete", "trainingjob", name, "-n", ns, "--wait=true", timeout=300)
    wait_for(lambda: not pod_uids(kind_cluster, name, ns), 300, f"{name}'s pods gone")


def _run_and_kill(kind_cluster, ns: str, name: str, tmp_path, steps: int, **spec) -> tuple[dict[str, str], int, float, float]:
    """Submit job ``name`` (``spec``: more fields), run it to step :data:`KILL_STEP` and kill rank 1's worker
    (``kill -9``); returns the pods' uids before, rank 0's last step at the kill, and the kill's monotonic and
    wall-clock times."""
    _restart_job(tmp_path, kind_cluster, ns, name, CHECKPOINT, steps=steps, log_every=1, **spec)
    _run_until_step(kind_cluster, ns, name, KILL_STEP)
    before = pod_uids(kind_cluster, name, ns)
    at_kill = max(int(n) for n in STEP.findall(rank0_log(kind_cluster, name, ns)))
    killed, wall = time.monotonic(), time.time()
    kind_cluster.kubectl("exec", f"{name}-1", "-n", ns, "--", "sh", "-c", KILL_WORKER)
    return before, at_kill, killed, wall


def _kill_and_time(kind_cluster, ns: str, name: str, arm: str, tmp_path) -> dict:
    """Run job ``name`` to step :data:`KILL_STEP`, kill rank 1's worker, and time the kill → rank 0's first step of the
    next attempt."""
    in_place = arm != "gang"
    env = [{"name": "RAILTRAIN_SUPERVISOR_WARM", "value": "off"}] if arm == "in-place-cold" else []
    before, at_kill, killed, _ = _run_and_kill(kind_cluster, ns, name, tmp_path, steps=400, runPolicy={"restartInPlace": in_place}, env=env)

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
    _delete(kind_cluster, ns, name)
    return {"path": arm, "seconds": round(seconds, 2), "killed_at_step": at_kill, "resumed_step": first, "rank0_warm_start": warm}


def _group_kill_and_time(kind_cluster, ns: str, name: str, arm: str, tmp_path) -> dict:
    """The same job as two replica groups (``spec.faultTolerance: {replicaGroups: 2, minReplicas: 1}``, one node each):
    run to step :data:`KILL_STEP`, kill group 1's worker (pod ``<name>-1``, as the gang arm kills rank 1's) and time
    the kill → the replacement's first step (back at full strength: it healed from group 0 and steps with it).
    Also what the survivor lost: its longest gap between steps across the replacement (``stall_seconds``) and the
    steps it skipped (0: its step lines stay consecutive); its pod is never touched."""
    before, at_kill, _, killed = _run_and_kill(kind_cluster, ns, name, tmp_path, steps=100000, faultTolerance={"replicaGroups": 2, "minReplicas": 1})

    def rejoined() -> float | None:
        if pod_uids(kind_cluster, name, ns).get(f"{name}-1") in (None, before[f"{name}-1"]):
            return None
        found = STAMPED_STEP.search(stamped_log(kind_cluster, f"{name}-1", ns))
        return stamp(found.group(1)) if found else None

    back = wait_for(rejoined, 600, f"{name}: group 1's replacement stepping", interval=0.5)
    survivor = wait_for(lambda: (s := [(stamp(t), int(n)) for t, n in STAMPED_STEP.findall(stamped_log(kind_cluster, f"{name}-0", ns))])
                        and s[-1][0] > back + 3 and s, 120, f"{name}: group 0 stepping past the rejoin", interval=0.5)
    assert pod_uids(kind_cluster, name, ns)[f"{name}-0"] == before[f"{name}-0"], "group 0's pod was replaced"
    numbers = [n for _, n in survivor]
    lost = (numbers[-1] - numbers[0] + 1) - len(set(numbers))
    gaps = [b[0] - a[0] for a, b in zip(survivor, survivor[1:]) if b[0] >= killed and a[0] <= back]
    _delete(kind_cluster, ns, name)
    return {"path": arm, "seconds": round(back - killed, 2), "stall_seconds": round(max(gaps, default=0.0), 2), "survivor_steps_lost": lost,
            "killed_at_step": at_kill, "resumed_step": at_kill}  # fmt: skip  (the survivor goes on: nothing to resume)


@pytest.mark.parametrize("pair", range(PAIRS))
def test_pair(kind_cluster, kind_ns, tmp_path, pair):
    out = {"pair": pair}
    for arm in ARMS if pair % 2 == 0 else ARMS[::-1]:
        timed = {"kill": _kill_and_time, "hang": _hang_and_time, "data": _data_and_time}[FAULT]
        if arm == "groups":
            assert FAULT == "kill", "the groups arm times a killed group only (RAILTRAIN_E2E_INPLACE_FAULT=kill)"
            timed = _group_kill_and_time
        sample = timed(kind_cluster, kind_ns, f"{arm}-{pair}", arm, tmp_path)
        out[arm] = sample
        out[f"load_after_{arm}"] = os.getloadavg()[0]
    print("PAIR " + json.dumps(out), flush=True)
