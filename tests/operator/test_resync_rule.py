"""Which jobs the resync reconciles (operator/resync.py, ``resyncs``): pure, with ``now``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from railtrain.operator import resync
from railtrain.operator.job.workload import QUEUE_LABEL

from .builders import job_obj

NOW = datetime(2026, 12, 4, 13, 0, tzinfo=timezone.utc)


def succeeded(ago_s: float | None, queue: str | None = None, ttl: int | None = None) -> dict:
    status = {"phase": "Succeeded"} | ({"completionTime": (NOW - timedelta(seconds=ago_s)).strftime("%Y-%m-%dT%H:%M:%SZ")} if ago_s is not None else {})
    job = job_obj("done", nodes=1, status=status, **({"runPolicy": {"ttlSecondsAfterFinished": ttl}} if ttl is not None else {}))
    if queue:
        job["metadata"].setdefault("labels", {})[QUEUE_LABEL] = queue
    return job


@pytest.mark.parametrize(
    "job,wanted",
    [
        (job_obj("running", nodes=1, status={"phase": "Running"}), True),
        (job_obj("failed", nodes=1, status={"phase": "Failed"}), True),
        (succeeded(5), False),  # railtrain's own queue: nothing left to do
        (succeeded(5, ttl=60), True),  # its TTL will delete it
        (succeeded(5, queue="team"), True),  # Kueue: its Workload's finalizer may still wait for a pod's end
        (succeeded(resync.KUEUE_FINISHED_RESYNC_SECONDS + 1, queue="team"), False),  # long finished: its pods are gone
        (succeeded(None, queue="team"), True),  # no completionTime written: not known to be old
    ],
    ids=["running", "failed", "succeeded", "succeeded-ttl", "kueue-just-finished", "kueue-long-finished", "kueue-no-completion-time"],
)
def test_the_resync_reconciles_every_job_but_a_succeeded_one_with_nothing_left_to_do(job, wanted):
    assert resync.resyncs(job, NOW) is wanted
