"""What a job asks of the admission pass (pure): its spec parsed and checked, its gang request, its hold.

A job's request is read from its spec, its status records and its pods: a
pod pinned by nodeSelector is capacity promised to its gang, an in-force
admission record names ranks being created, and a hold keeps a restarting
gang's nodes.

May import: ``railtrain.crds`` and the pure ``railtrain.operator.scheduling`` and
``railtrain.operator.job`` modules; never kopf or the kubernetes client.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from railtrain.crds import parallel
from railtrain.crds.api import TrainingJob
from railtrain.operator.job import conditions as cond
from railtrain.operator.job import render
from railtrain.operator.scheduling.snapshot import parse_quantity, pod_node
from railtrain.operator.scheduling.nodefit import pod_needs
from railtrain.operator.scheduling.queue import Hold
from railtrain.operator.scheduling.placement import GangRequest
from railtrain.operator.job.pods import NAME_TAKEN, admitted_nodes, current_gang, is_gated, lingering, owned, rank_of
from railtrain.operator.job.records import admission_record, hold_record, parse_time, waiting_since



def parse_job(obj: dict[str, Any]) -> TrainingJob:
    """Validate a TrainingJob object read from the API server (status ignored).

    Raises:
        pydantic.ValidationError: the stored spec does not match the models.
    """
    return TrainingJob.model_validate({k: obj[k] for k in ("apiVersion", "kind", "spec")} | {"metadata": {"name": obj["metadata"]["name"]}})


def _quantity_problem(field: str, value: Any) -> str | None:
    try:
        amount = parse_quantity(value)
    except ValueError:
        return f"{field}: {value!r} is not a Kubernetes quantity (e.g. 500m, 4, 64Gi)"
    return f"{field}: {value!r} must not be negative" if amount < 0 else None


def spec_problem(job: TrainingJob, namespace: str = "", uid: str = "") -> str | None:
    """Why a job whose spec parses still cannot become pods: a resource amount the API server refuses in a Pod.

    The CRD schema and the models may let such a value through (an object
    stored before a stricter schema, or a field the schema types only as a
    string), so the operator checks before it places or creates anything.
    ``spec.resources.cpu``, ``.memory`` and ``.shm`` are named as the user
    wrote them; then every amount of the rendered rank-0 pod (containers'
    requests and limits, ``emptyDir.sizeLimit``, ``overhead``) is checked,
    which covers the pod template.

    Args:
        job: the parsed TrainingJob; namespace, uid: as rendered into the pod.

    Returns:
        One sentence naming the field and its value, or None when every
        amount is a non-negative quantity (:data:`~railtrain.operator.scheduling.snapshot.QUANTITY`).
    """
    res = job.spec.resources
    for name in ("cpu", "memory", "shm"):
        value = getattr(res, name)
        if value is not None and (problem := _quantity_problem(f"spec.resources.{name}", value)):
            return problem
    try:
        pod = render.render_pod(job, namespace, uid, 0)
    except ValueError as err:
        return str(err)
    spec = pod.get("spec") or {}
    for group in ("initContainers", "containers"):
        for c in spec.get(group) or []:
            for kind in ("requests", "limits"):
                for key, value in ((c.get("resources") or {}).get(kind) or {}).items():
                    if problem := _quantity_problem(f"container {c.get('name')} resources.{kind}.{key}", value):
                        return problem
    for v in spec.get("volumes") or []:
        size = (v.get("emptyDir") or {}).get("sizeLimit")
        if size is not None and (problem := _quantity_problem(f"volume {v.get('name')} emptyDir.sizeLimit", size)):
            return problem
    for key, value in (spec.get("overhead") or {}).items():
        if problem := _quantity_problem(f"overhead.{key}", value):
            return problem
    return None


def admission_request(obj: dict[str, Any], pods: list[dict[str, Any]], now: datetime | None = None) -> tuple[GangRequest, bool] | None:
    """The job's entry in the admission queue, if it waits for placement.

    Args:
        obj: the TrainingJob as read from the API server.
        pods: every pod labelled with the job's name (only those the job owns count).
        now: the current time (UTC); None skips the time-based rules.

    Returns:
        ``(request, ready)``, or None when the job does not wait: terminal,
        suspended, invalid (the models refuse it, or :func:`spec_problem`), backing off after a gang timeout
        (``status.requeueAfter`` in the future), or every rank already released.
        ``ready`` is True when every pod of the gang exists so placement can be
        applied now. A job that is not ready (pods still being created, or the
        previous gang still terminating) still takes its turn in the queue, and
        so holds back later jobs, for at most ``runPolicy.gangTimeoutSeconds``
        after it started waiting; after that it is left out, so a job whose pods
        cannot be created never blocks the queue.
    """
    status = obj.get("status") or {}
    if status.get("phase") in cond.TERMINAL_PHASES or (obj["spec"].get("runPolicy") or {}).get("suspend"):
        return None
    try:
        job = parse_job(obj)
    except ValidationError:
        return None
    if spec_problem(job, obj["metadata"].get("namespace", ""), obj["metadata"].get("uid", "")):
        return None  # the reconcile fails it with InvalidSpec; it never takes a turn in the queue
    spec = job.spec
    after = parse_time(status.get("requeueAfter"))
    if now is not None and after is not None and now < after:
        return None
    if admission_record(status) is not None:
        return None  # admitted: its pods are being created pinned, and the record holds its nodes
    gang = current_gang(obj, owned(obj, pods))
    n = admitted_nodes(spec, gang)
    gang = [p for p in gang if 0 <= rank_of(p) < n]
    ranks = {rank_of(p) for p in gang} | {int(r) for r in status.get("succeededRanks") or [] if 0 <= int(r) < n}  # exited 0 earlier: complete
    fresh = not ranks  # no pod yet: placed from the spec alone, then created pinned and ungated (admit before creating)
    scheduled = cond.find(status.get("conditions") or [], cond.SCHEDULED) or {}
    blocked = scheduled.get("reason") in NAME_TAKEN  # the reconcile reported a pod or Service in the way of the gang's names
    ready = len(ranks) == n or (fresh and not blocked and not lingering(obj, pods))
    if not fresh and len(ranks) == n and not any(is_gated(p) for p in gang):
        return None
    since = waiting_since(obj)
    if not ready and now is not None and since is not None and now - since > timedelta(seconds=spec.run_policy.gang_timeout_seconds):
        return None
    released = any(not is_gated(p) for p in gang)
    par = spec.effective_parallelism()
    meta = obj["metadata"]
    request = GangRequest(
        job=f"{meta.get('namespace', '')}/{meta['name']}",
        nodes=n,
        gpus_per_node=spec.resources.gpus,
        fixed={rank_of(p): node for p in gang if (node := pod_node(p))},
        counts=(n,) if released else tuple(spec.node_counts()),
        procs_per_node=spec.procs_per_node,
        dp_stride=parallel.dp_stride(par),
        policy=str(spec.topology.policy),
        level=spec.topology.level,
        priority=spec.priority,
        created=meta.get("creationTimestamp", ""),
        gpu_resource=spec.resources.gpu_resource_name,
        needs=pod_needs(render.render_pod(job, meta.get("namespace", ""), meta.get("uid", ""), 0), spec.resources.gpu_resource_name),
        avoid=frozenset(status.get("avoidNodes") or []),
        nvlink=spec.topology.nvlink_domain,
        prefer=tuple(str(n or "") for n in (hold.get("nodes") or [])) if fresh and (hold := hold_record(status, now)) else (),
    )
    return request, ready


def gang_request(obj: dict[str, Any], pods: list[dict[str, Any]], now: datetime | None = None) -> GangRequest | None:
    """The placement request of a job whose whole gang exists and waits for nodes, else None.

    Same as :func:`admission_request`, keeping only ready jobs.
    """
    entry = admission_request(obj, pods, now)
    return entry[0] if entry and entry[1] else None


def promised_pods(obj: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods an admitted gang is promised but does not have yet, as the pinned pods they will be (pure).

    These are the ranks of an in-force :func:`admission_record` not yet marked
    ``created`` whose pod is absent (the operator wrote the record, then
    crashed or is still creating). The admission pass counts them as taken,
    exactly as it counts the created ones by their pins.

    Args:
        obj: the TrainingJob as read; pods: its pods (labelled with its name).

    Returns:
        Rendered pod manifests pinned to their recorded node (empty for most jobs).
    """
    status = obj.get("status") or {}
    record = admission_record(status)
    if record is None or record.get("created"):
        return []
    try:
        job = parse_job(obj)
    except ValidationError:
        return []
    live = {rank_of(p) for p in current_gang(obj, owned(obj, pods))} | {int(r) for r in status.get("succeededRanks") or []}
    meta = obj["metadata"]
    return [
        render.pin_to_node(render.render_pod(job, meta.get("namespace", ""), meta.get("uid", ""), rank, int(record["restarts"])), node)
        for rank, node in enumerate(record["nodes"]) if rank not in live
    ]


def hold_of(obj: dict[str, Any], now: datetime | None = None) -> Hold | None:
    """The capacity ``obj`` holds for its restarting gang (:func:`hold_record`), as the admission pass counts it (pure).

    Returns:
        A :class:`~railtrain.operator.scheduling.queue.Hold` (one pod's GPUs and other
        requests on each held node), or None when the job holds nothing or its
        spec cannot be read.
    """
    record = hold_record(obj.get("status") or {}, now)
    if record is None or (obj["spec"].get("runPolicy") or {}).get("suspend"):
        return None
    try:
        job = parse_job(obj)
    except ValidationError:
        return None
    spec, meta = job.spec, obj["metadata"]
    needs = pod_needs(render.render_pod(job, meta.get("namespace", ""), meta.get("uid", ""), 0), spec.resources.gpu_resource_name)
    return Hold(tuple(dict.fromkeys(n for n in record["nodes"] if n)), spec.resources.gpus, dict(needs.requests), spec.resources.gpu_resource_name)
