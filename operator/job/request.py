"""What a job asks of the admission pass (pure): its gang request, its hold, the pods promised to it.

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

from railtrain.crds import parallel, replica_groups
from railtrain.crds.api import TopologyPolicy
from railtrain.crds.kueue import MULTIKUEUE_CONTROLLER
from railtrain.operator.job import conditions as cond
from railtrain.operator.job import binding, render
from railtrain.operator.job import inplace as job_inplace
from railtrain.operator.job import workload
from railtrain.operator.job.observed import Observed, observed
from railtrain.operator.scheduling.snapshot import pod_node
from railtrain.operator.scheduling.nodefit import pod_needs
from railtrain.operator.scheduling.queue import Hold
from railtrain.operator.scheduling.placement import GangRequest
from railtrain.operator.job.pods import NAME_TAKEN, admitted_nodes, current_gang, is_gated, lingering, owned, rank_of
from railtrain.operator.job.records import admission_record, hold_record, waiting_since



def admission_request(job: Observed | dict[str, Any], pods: list[dict[str, Any]], now: datetime | None = None) -> tuple[GangRequest, bool] | None:
    """The job's entry in the admission queue, if it waits for placement.

    Args:
        job: the TrainingJob as observed in this pass (:func:`~railtrain.operator.job.observed.observe_job`),
            or as read from the API server.
        pods: every pod labelled with the job's name (only those the job owns count).
        now: the current time (UTC); None skips the time-based rules.

    Returns:
        ``(request, ready)``, or None when the job does not wait: terminal,
        suspended, invalid (the models refuse it, or :func:`~railtrain.operator.job.observed.spec_problem`), backing off after a gang timeout
        (``status.requeueAfter`` in the future), or every rank already released.
        ``ready`` is True when every pod of the gang exists so placement can be
        applied now. A job that is not ready (pods still being created, or the
        previous gang still terminating) still takes its turn in the queue, and
        so holds back later jobs, for at most ``runPolicy.gangTimeoutSeconds``
        after it started waiting; after that it is left out, so a job whose pods
        cannot be created never blocks the queue.

    Raises:
        ValueError: the stored status is corrupt (:attr:`~railtrain.operator.job.observed.Observed.status_error`):
            the pass names the job and leaves it out rather than act on a guess.
    """
    seen = observed(job)
    obj, status = seen.obj, seen.status
    if seen.status_error:
        raise ValueError(seen.status_error)
    if status.phase in cond.TERMINAL_PHASES or (obj["spec"].get("runPolicy") or {}).get("suspend"):
        return None
    if (obj["spec"].get("managedBy") or "") == MULTIKUEUE_CONTROLLER:
        return None  # Kueue's MultiKueue runs it on a worker cluster: it never takes a turn here
    if seen.usable is None or seen.pod0 is None:
        return None  # the models refuse it or it cannot become pods: the reconcile fails it with InvalidSpec; it never takes a turn in the queue
    spec = seen.usable.spec
    after = status.requeue_after
    if now is not None and after is not None and now < after:
        return None
    if admission_record(status) is not None:
        return relocation_request(seen, pods, now)  # admitted: None, unless a replica group must be placed again
    gang = current_gang(seen, owned(obj, pods))
    n = admitted_nodes(spec, gang)
    gang = [p for p in gang if 0 <= rank_of(p) < n]
    ranks = {rank_of(p) for p in gang} | {r for r in status.succeeded_ranks if 0 <= r < n}  # exited 0 earlier: complete
    fresh = not ranks  # no pod yet: placed from the spec alone, then created pinned and ungated (admit before creating)
    scheduled = cond.condition_of(status, cond.SCHEDULED)
    blocked = scheduled is not None and scheduled.reason in NAME_TAKEN  # the reconcile reported a pod or Service in the way of the gang's names
    ready = len(ranks) == n or (fresh and not blocked and not lingering(seen, pods))
    if not fresh and len(ranks) == n and not any(is_gated(p) for p in gang):
        return None
    since = waiting_since(status, obj["metadata"])
    if not ready and now is not None and since is not None and now - since > timedelta(seconds=spec.run_policy.gang_timeout_seconds):
        return None
    return _queue_entry(seen, gang, n, fresh, now), ready


def relocating_groups(status: Any, restarts: int) -> list[int]:
    """The replica groups of the current gang (``restarts``) that wait to be placed again (phase Relocating), in order."""
    return sorted(g.group for g in status.replica_groups if g.phase == replica_groups.GROUP_RELOCATING and g.gang == restarts)


def relocation_request(seen: Observed, pods: list[dict[str, Any]], now: datetime | None) -> tuple[GangRequest, bool] | None:
    """The queue entry of an admitted job with replica groups whose group must leave a node (pure; docs/operator.md, "Replica groups").

    The gang's admission record stays in force; the request is the whole gang with every live pod's rank kept where it
    is (``fixed``), so the pass places only the relocating groups' ranks, on free nodes it may give (its queue order,
    its capacity ledger, the job's avoided nodes). It is asked only once the relocating groups' old pods are gone (their
    names and nodes free), and is always ready.

    Returns:
        ``(request, True)``, or None when the job has no relocating group or its old pods are not gone yet.
    """
    status, spec = seen.status, seen.usable.spec
    if spec.fault_tolerance is None or status.phase != cond.RUNNING or workload.queue_name(seen) is not None:
        return None  # a Kueue job's groups are never relocated (their failures restart the whole gang)
    groups = relocating_groups(status, status.restarts)
    record = admission_record(status)
    if not groups or record is None:
        return None
    n, per = len(record.nodes), len(record.nodes) // spec.fault_tolerance.replica_groups
    moving = {k for g in groups for k in range(g * per, (g + 1) * per)}
    mine = owned(seen.obj, pods)
    if any(rank_of(p) in moving for p in mine):
        return None  # an old pod of a relocating group still holds its name (it is being deleted)
    gang = [p for p in current_gang(seen, mine) if 0 <= rank_of(p) < n]
    return _queue_entry(seen, gang, n, False, now), True


def _queue_entry(seen: Observed, gang: list[dict[str, Any]], n: int, fresh: bool, now: datetime | None) -> GangRequest:
    """The :class:`~railtrain.operator.scheduling.placement.GangRequest` of a job :func:`admission_request` found waiting.

    Args:
        seen: the job as observed (its spec usable, rank 0 rendered); gang: its current pods of rank below ``n``;
        n: the gang size to place; fresh: no pod exists yet (a hold's nodes are then preferred); now: UTC or None.

    Returns:
        The request: pinned ranks kept where they are, an elastic job's admissible sizes unless a rank is
        already released, the pod's needs besides GPUs, topology, priority, avoided and preferred nodes.
    """
    obj, status = seen.obj, seen.status
    spec = seen.usable.spec
    released = any(not is_gated(p) for p in gang)
    par = spec.effective_parallelism()
    meta = obj["metadata"]
    return GangRequest(
        job=f"{meta.get('namespace', '')}/{meta['name']}",
        nodes=n,
        gpus_per_node=spec.resources.gpus,
        fixed={rank_of(p): node for p in gang if (node := pod_node(p))},
        counts=(n,) if released else tuple(spec.node_counts()),
        procs_per_node=spec.procs_per_node,
        dp_stride=parallel.dp_stride(par),
        policy=TopologyPolicy(spec.topology.policy).value,  # the default is the enum member (use_enum_values applies to given values only)
        level=spec.topology.level,
        priority=spec.priority,
        created=meta.get("creationTimestamp", ""),
        gpu_resource=spec.resources.gpu_resource_name,
        needs=pod_needs(seen.pod0, spec.resources.gpu_resource_name),
        avoid=frozenset(status.avoid_nodes),
        nvlink=spec.topology.nvlink_domain,
        prefer=tuple(hold.nodes) if fresh and (hold := hold_record(status, now)) else (),
        groups=spec.fault_tolerance.replica_groups if spec.fault_tolerance is not None else 1,  # each group in its own tightest domain
    )


def gang_request(job: Observed | dict[str, Any], pods: list[dict[str, Any]], now: datetime | None = None) -> GangRequest | None:
    """The placement request of a job whose whole gang exists and waits for nodes, else None.

    Same as :func:`admission_request`, keeping only ready jobs.
    """
    entry = admission_request(job, pods, now)
    return entry[0] if entry and entry[1] else None


def promised_pods(job: Observed | dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods an admitted gang is promised but does not have yet, as the pinned pods they will be (pure).

    These are the ranks of an in-force :func:`admission_record` not yet marked
    ``created`` whose pod is absent (the operator wrote the record, then
    crashed or is still creating). The admission pass counts them as taken,
    exactly as it counts the created ones by their pins.

    Args:
        job: the TrainingJob as observed in this pass, or as read; pods: its pods (labelled with its name).

    Returns:
        Rendered pod manifests pinned to their recorded node (empty for most jobs).
    """
    seen = observed(job)
    obj, status = seen.obj, seen.status
    record = admission_record(status)
    if record is None or record.created or seen.job is None:
        return []
    live = {rank_of(p) for p in current_gang(seen, owned(obj, pods))} | set(status.succeeded_ranks)
    meta = seen.meta
    spent = job_inplace.spent_of(status)
    return [
        binding.pin_to_node(job_inplace.with_spent(render.render_pod(seen.job, meta.get("namespace", ""), meta.get("uid", ""), rank, record.restarts), spent), node)
        for rank, node in enumerate(record.nodes) if rank not in live
    ]


def hold_of(job: Observed | dict[str, Any], now: datetime | None = None) -> Hold | None:
    """The capacity ``job`` (as observed in this pass, or as read) holds for its restarting gang (:func:`hold_record`), as the admission pass counts it (pure).

    Returns:
        A :class:`~railtrain.operator.scheduling.queue.Hold` (one pod's GPUs and other
        requests on each held node), or None when the job holds nothing or its
        spec cannot be read.

    Raises:
        ValueError: the spec parses but its pod cannot be rendered (the pass names the job and leaves its hold out).
    """
    seen = observed(job)
    record = hold_record(seen.status, now)
    if record is None or (seen.obj["spec"].get("runPolicy") or {}).get("suspend") or seen.job is None:
        return None
    if seen.pod0 is None:
        raise ValueError(seen.spec_error)
    spec = seen.job.spec
    needs = pod_needs(seen.pod0, spec.resources.gpu_resource_name)
    return Hold(tuple(dict.fromkeys(n for n in record.nodes if n)), spec.resources.gpus, dict(needs.requests), spec.resources.gpu_resource_name)
