"""What the pods of a job say about its gang (pure): rank, gate, admitted size, and the admission request.

The pods are the record of what was decided: a pod pinned by nodeSelector is
capacity promised to its gang, a pod without the gang gate has been released,
and a released pod's :data:`~railtrain.crds.contract.ANNOTATION_NNODES` is the
size the gang was admitted with. Reading these back, rather than trusting a
status the operator may have crashed before writing, keeps admission correct
across operator restarts.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from railtrain.crds import contract, parallel
from railtrain.crds.api import TrainingJob, TrainingJobSpec
from railtrain.crds.podtemplate import TRAINER
from railtrain.operator import conditions as cond
from railtrain.operator import render
from railtrain.operator.cluster import parse_quantity, pod_node
from railtrain.operator.nodefit import pod_needs
from railtrain.operator.admission import Hold
from railtrain.operator.placement import GangRequest

NAME_TAKEN = ("PodNameTaken", "ServiceNameTaken")
"""Scheduled reasons of a job whose pod or Service names are held by objects it does not own (operator/phases/ownership.py)."""
REQUEUE_BASE_SECONDS = 10
"""Backoff after the first gang timeout; it doubles with each further timeout."""
REQUEUE_MAX_SECONDS = 600
"""Longest backoff between gang timeouts."""


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
        amount is a non-negative quantity (:data:`~railtrain.operator.cluster.QUANTITY`).
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


def restart_of(pod: dict[str, Any]) -> int:
    """The restart count a pod belongs to (its annotation), -1 when malformed."""
    try:
        return int((pod["metadata"].get("annotations") or {}).get(contract.ANNOTATION_RESTART, "0"))
    except ValueError:
        return -1


def rank_of(pod: dict[str, Any]) -> int:
    """A pod's node rank (its label), -1 when malformed."""
    try:
        return int((pod["metadata"].get("labels") or {}).get(contract.LABEL_NODE_RANK, "-1"))
    except ValueError:
        return -1


def pod_phase(pod: dict[str, Any]) -> str:
    """``status.phase`` of the pod itself, Pending when absent: whether it still runs (and holds its node), not how its rank ended."""
    return (pod.get("status") or {}).get("phase", "Pending")


def trainer_exit(pod: dict[str, Any]) -> int | None:
    """The exit code of the pod's trainer container (:data:`~railtrain.crds.podtemplate.TRAINER`) once it has terminated, else None."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == TRAINER:
            term = (cs.get("state") or {}).get("terminated")
            if term is None:
                return None
            try:
                return int(term.get("exitCode", contract.EXIT_FAILED))
            except (TypeError, ValueError):
                return contract.EXIT_FAILED
    return None


def phase(pod: dict[str, Any]) -> str:
    """The phase of the pod's rank: decided by its trainer container alone, never by a sidecar.

    A rank is Succeeded once its trainer container exited 0 and Failed once it
    exited non-zero, whatever the template's sidecars do (regular containers,
    or native sidecars: init containers with ``restartPolicy: Always``): a
    metrics exporter that runs forever keeps the pod Running, and one that
    crashed makes a pod whose trainer exited 0 Failed (Kubernetes pod phases,
    "Pod lifecycle"; issue 15, kind 2). Before the trainer has terminated, or
    when the pod failed without it terminating (evicted, node lost), it is the
    pod's own phase (:func:`pod_phase`).

    Returns:
        Pending, Running, Succeeded, Failed or Unknown.
    """
    code = trainer_exit(pod)
    if code is not None:
        return "Succeeded" if code == 0 else "Failed"
    return pod_phase(pod)


def finished_but_running(pod: dict[str, Any]) -> bool:
    """Whether the pod's rank has finished (its trainer terminated) while the pod still runs (a sidecar has not ended)."""
    return trainer_exit(pod) is not None and pod_phase(pod) not in ("Succeeded", "Failed")


def is_gated(pod: dict[str, Any]) -> bool:
    """Whether the pod still carries railtrain's gang scheduling gate."""
    return any(g.get("name") == contract.SCHEDULING_GATE for g in (pod["spec"].get("schedulingGates") or []))


def controller_uid(pod: dict[str, Any]) -> str | None:
    """The uid of the pod's controller ownerReference (the one with ``controller: true``), None when it has none."""
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None


def owned(obj: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods whose controller ownerReference is this job's uid.

    The Kubernetes controller convention: a controller acts only on objects it
    owns, and labels only narrow the list (a pod carrying the job's labels but
    not its ownerReference is someone else's, and is never adopted).
    """
    uid = obj["metadata"].get("uid")
    return [p for p in pods if uid and controller_uid(p) == uid]


def rank_names(obj: dict[str, Any]) -> list[str]:
    """The deterministic pod names of the job's ranks, ``<job>-<rank>`` for every rank below ``spec.nodes``."""
    try:
        nodes = int((obj.get("spec") or {}).get("nodes", 1))
    except (TypeError, ValueError):
        return []
    return [contract.pod_name(obj["metadata"]["name"], r) for r in range(max(0, min(nodes, 4096)))]


def in_the_way(obj: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods not owned by the job that hold one of its ranks' names, by name."""
    names, mine = set(rank_names(obj)), {id(p) for p in owned(obj, pods)}
    return sorted((p for p in pods if id(p) not in mine and p["metadata"]["name"] in names), key=lambda p: p["metadata"]["name"])


def current_gang(obj: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods of the job's current restart count, not being deleted, ordered by rank."""
    restarts = int((obj.get("status") or {}).get("restarts", 0))
    live = [p for p in pods if restart_of(p) == restarts and not p["metadata"].get("deletionTimestamp")]
    return sorted(live, key=rank_of)


def admitted_nodes(spec: TrainingJobSpec, gang: list[dict[str, Any]]) -> int:
    """The gang size: the admitted count a released pod carries, else ``spec.nodes`` (not yet admitted).

    Returns:
        An int in ``[1, spec.nodes]``; a malformed annotation falls back to ``spec.nodes``.
    """
    for pod in gang:
        if not is_gated(pod):
            try:
                n = int((pod["metadata"].get("annotations") or {}).get(contract.ANNOTATION_NNODES, spec.nodes))
            except ValueError:
                return spec.nodes
            return n if 1 <= n <= spec.nodes else spec.nodes
    return spec.nodes


def admission_record(status: dict[str, Any]) -> dict[str, Any] | None:
    """The admitted placement of the current gang (``status.admission``) while it is in force, else None (pure).

    A record is in force while its ``restarts`` equals ``status.restarts``, the
    Scheduled condition is True and the job is neither finished nor suspended:
    every path that stops a gang (restart, gang timeout, suspend, pods in the
    way) sets Scheduled False or raises the restart count, which voids it.

    Args:
        status: the job's ``status`` as stored (may be empty).

    Returns:
        ``{"restarts": int, "nodes": [node of rank 0, ...], "created": bool}``, or None.
    """
    record = status.get("admission")
    if not isinstance(record, dict) or not record.get("nodes"):
        return None
    if int(record.get("restarts", -1)) != int(status.get("restarts") or 0) or status.get("phase") in (*cond.TERMINAL_PHASES, "Suspended"):
        return None
    return record if cond.is_true(status.get("conditions") or [], cond.SCHEDULED) else None


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


def ended_pods(obj: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The current gang's pods that ended (Succeeded or Failed) while their job goes on, as pods that still hold their node (pure).

    A pod in a terminal phase holds nothing in kube-scheduler's accounting, but its job has not
    decided yet what follows: the rank that failed is about to restart the gang (whose
    ``status.hold`` then keeps the node), the rank that finished waits for its peers. Counting
    them until the job's status moves on closes the window in which another job could be given
    the node of a rank that just failed. A job that is finished, suspended or being deleted holds
    nothing.

    Returns:
        Copies of those pods with phase ``Running`` (what the admission pass's ledger counts).
    """
    status = obj.get("status") or {}
    if status.get("phase") in (*cond.TERMINAL_PHASES, "Suspended") or obj["metadata"].get("deletionTimestamp"):
        return []
    restarts = int(status.get("restarts") or 0)
    return [
        p | {"status": {**(p.get("status") or {}), "phase": "Running"}}
        for p in owned(obj, pods)
        if pod_phase(p) in ("Succeeded", "Failed") and restart_of(p) == restarts and pod_node(p)
    ]


def hold_record(status: dict[str, Any], now: datetime | None = None) -> dict[str, Any] | None:
    """The nodes a restarting gang holds (``status.hold``) while the hold is in force, else None (pure).

    A hold is in force while its ``restarts`` equals ``status.restarts``, no
    admission record of that gang is in force yet (:func:`admission_record`:
    admitting it replaces the hold), the job is neither finished nor
    suspended, and ``now`` is before its ``until`` (the restart's backoff plus
    ``runPolicy.gangTimeoutSeconds``: a gang that cannot come back does not
    keep its nodes forever). ``now`` None skips the time rule.

    Returns:
        ``{"restarts": int, "nodes": [node of rank r or "", ...], "until": str}``, or None.
    """
    record = status.get("hold")
    if not isinstance(record, dict) or not any(record.get("nodes") or []):
        return None
    if int(record.get("restarts", -1)) != int(status.get("restarts") or 0) or status.get("phase") in (*cond.TERMINAL_PHASES, "Suspended"):
        return None
    if admission_record(status) is not None:
        return None
    until = parse_time(record.get("until"))
    if now is not None and (until is None or now >= until):
        return None
    return record


def hold_of(obj: dict[str, Any], now: datetime | None = None) -> Hold | None:
    """The capacity ``obj`` holds for its restarting gang (:func:`hold_record`), as the admission pass counts it (pure).

    Returns:
        A :class:`~railtrain.operator.admission.Hold` (one pod's GPUs and other
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


def lingering(obj: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
    """Whether a pod of the job not in its current gang (an earlier restart's, or being deleted) still holds a rank's name."""
    restarts = int((obj.get("status") or {}).get("restarts", 0))
    return any(restart_of(p) != restarts or p["metadata"].get("deletionTimestamp") for p in owned(obj, pods))


def requeue_delay(requeues: int) -> timedelta:
    """Backoff before the ``requeues``-th re-admission: 10 s, 20 s, 40 s ... at most 600 s."""
    return timedelta(seconds=min(REQUEUE_MAX_SECONDS, REQUEUE_BASE_SECONDS * 2 ** max(0, requeues - 1)))


def parse_time(text: str | None) -> datetime | None:
    """Parse an RFC 3339 time as the API server writes it; None when absent."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def waiting_since(obj: dict[str, Any]) -> datetime | None:
    """When the job started waiting for its current gang: Scheduled turning False, else creation."""
    c = cond.find((obj.get("status") or {}).get("conditions") or [], cond.SCHEDULED)
    if c and c.get("status") != "True":
        return parse_time(c.get("lastTransitionTime"))
    return parse_time(obj["metadata"].get("creationTimestamp"))


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
