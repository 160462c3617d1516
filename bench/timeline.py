"""When each pod of a measurement was first seen, pinned, bound and Running, read from one watch.

A benchmark opens a pod watch on its namespace *before* it acts (creates pods
or TrainingJobs), starts the clock, performs the action on a background
thread, and reads events until every expected pod is Running. Times are the
arrival of the watch event at this process, relative to the start of the
action; every mode measured is timed the same way, so the watch's own latency
cancels out of the ratios.

The watch is read as raw JSON lines (no client-side model objects), which is
what keeps the reader cheap enough for 800 pods on two cores.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from railtrain.crds import contract


@dataclass
class Timeline:
    """Per-pod event times (seconds since the action started), keyed by pod name.

    Attributes:
        seen: first event of the pod (its creation).
        ungated: first event with no scheduling gates.
        bound: first event with ``spec.nodeName`` set.
        running: first event in phase Running.
        job_of: pod name → the value of its ``railtrain.dev/job-name`` label.
    """

    seen: dict[str, float] = field(default_factory=dict)
    ungated: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    job_of: dict[str, str] = field(default_factory=dict)

    def observe(self, pod: dict[str, Any], t: float) -> None:
        """Record what one watch event tells about one pod at time ``t``."""
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        name = meta.get("name", "")
        self.seen.setdefault(name, t)
        self.job_of.setdefault(name, (meta.get("labels") or {}).get(contract.LABEL_JOB_NAME, ""))
        if not spec.get("schedulingGates"):
            self.ungated.setdefault(name, t)
        if spec.get("nodeName"):
            self.bound.setdefault(name, t)
        if (pod.get("status") or {}).get("phase") == "Running":
            self.running.setdefault(name, t)

    @staticmethod
    def _last(times: dict[str, float]) -> float:
        return max(times.values()) if times else float("nan")

    def milestones(self) -> dict[str, float]:
        """When the last pod was created, ungated, bound and Running (the gang's milestones)."""
        return {
            "all_created_s": self._last(self.seen),
            "all_ungated_s": self._last(self.ungated),
            "all_bound_s": self._last(self.bound),
            "all_running_s": self._last(self.running),
            "first_running_s": min(self.running.values()) if self.running else float("nan"),
        }

    def job_running_times(self) -> list[float]:
        """For each job, when its last pod became Running, sorted."""
        per_job: dict[str, float] = {}
        for pod, t in self.running.items():
            job = self.job_of.get(pod, "")
            per_job[job] = max(per_job.get(job, 0.0), t)
        return sorted(per_job.values())


def _json_lines(response: Any) -> Iterator[dict[str, Any]]:
    """Decode a watch response (urllib3, chunked) into events as they arrive."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)


def act_and_watch(core: Any, namespace: str, expected: int, action: Callable[[], None], timeout: float) -> Timeline:
    """Run ``action`` and time every pod of ``namespace`` until ``expected`` of them are Running.

    Args:
        core: a ``kubernetes.client.CoreV1Api``.
        namespace: the namespace to watch; it should hold no pods beforehand.
        expected: how many pods must reach Running.
        action: what creates the pods (directly or through the operator); it
            runs on a background thread right after the watch is open.
        timeout: seconds before giving up.

    Returns:
        The :class:`Timeline` of every pod seen.

    Raises:
        TimeoutError: fewer than ``expected`` pods Running after ``timeout``
            seconds; the message counts pods per milestone.
        Exception: whatever ``action`` raised.
    """
    listing = json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)
    version = listing["metadata"]["resourceVersion"]
    timeline, errors = Timeline(), []

    def run() -> None:
        try:
            action()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            errors.append(exc)

    worker = threading.Thread(target=run, name="bench-action", daemon=True)
    deadline = time.perf_counter() + timeout
    start = None
    while len(timeline.running) < expected:
        remaining = deadline - time.perf_counter()
        if errors:
            raise errors[0]
        if remaining <= 0:
            counts = {k: len(getattr(timeline, k)) for k in ("seen", "ungated", "bound", "running")}
            raise TimeoutError(f"{expected} pods in {namespace} not Running after {timeout:.0f}s: {counts}")
        response = core.list_namespaced_pod(
            namespace, watch=True, resource_version=version, timeout_seconds=max(1, int(min(remaining, 30))),
            allow_watch_bookmarks=True, _preload_content=False,
        )
        try:
            if start is None:
                start = time.perf_counter()
                worker.start()
            for event in _json_lines(response):
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    raise RuntimeError(f"watch of {namespace} failed: {obj.get('message')}")
                version = (obj.get("metadata") or {}).get("resourceVersion", version)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    timeline.observe(obj, time.perf_counter() - start)
                    if len(timeline.running) >= expected:
                        break
        finally:
            response.close()
            response.release_conn()
    worker.join(timeout=max(1.0, deadline - time.perf_counter()))
    if errors:
        raise errors[0]
    return timeline
