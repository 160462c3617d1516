"""Render a TrainingJob into the Kubernetes objects of its gang (pure; no I/O).

One headless Service, selecting node rank 0 only, gives rank 0 a stable DNS
name for the torchrun rendezvous (pod ``hostname`` + ``subdomain``, the
Kubernetes DNS convention for pods behind a headless Service). One pod per node rank carries the
pod-environment contract (:mod:`railtrain.crds.contract`), job and rank labels,
an ownerReference to the job (so deleting the job garbage-collects the gang)
and the gang scheduling gate (KEP-3521), which the operator lifts only after
every rank has a node. ``railtrain run --local`` renders the same pods and runs
their containers as local processes.

A job with replica groups (``spec.faultTolerance``, issue 31) has each group
rendered as a torchrun world of its own (:func:`group_environment`: the group's
node count, node rank and first pod as rendezvous host), with the group's labels
(:func:`group_labels`) and the replica-group variables (:func:`group_env_items`);
its Service selects every group's first pod (:func:`rendezvous_selector`).

May import: ``railtrain.crds``, ``operator/scheduling`` and this wing (``operator/job``); never kopf, the kubernetes client or ``operator/kube``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from railtrain.crds import contract, fabric, launcher, replica_groups, supervisor, threads
from railtrain.crds.api import Checkpoint, TierVolume, TrainingJob, TrainingJobSpec
from railtrain.crds.podtemplate import SHM_MOUNT, SHM_VOLUME, TRAINER
from railtrain.crds.precision import contract_values
from railtrain.operator.job import nvlink
from railtrain.operator.job.template import merge_template

CONTAINER_NAME = TRAINER


def owner_reference(name: str, uid: str) -> dict[str, Any]:
    """The controller ownerReference pointing at TrainingJob ``name``/``uid``."""
    return {
        "apiVersion": f"{contract.API_GROUP}/{contract.API_VERSION}",
        "kind": contract.KIND,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def job_labels(name: str) -> dict[str, str]:
    """Labels shared by every object of job ``name``."""
    return {contract.LABEL_JOB_NAME: name, contract.LABEL_MANAGED_BY: contract.MANAGED_BY}


def run_id(ck: Checkpoint, uid: str) -> str:
    """The run that owns a job's node-local checkpoint tiers: ``spec.checkpoint.runId`` if set, else the job's ``uid``.

    A job deleted and submitted again gets a new uid, so it does not resume the
    old job's node-local shards unless both set the same ``runId`` (docs/checkpoints.md,
    "Run identity"). Returns ``""`` when neither is known (pods rendered only to size them).
    """
    return ck.run_id or uid


def pod_environment(
    spec: TrainingJobSpec, name: str, namespace: str, rank: int, restarts: int = 0, rdzv_addr: str | None = None, nnodes: int | None = None,
    uid: str = "",
) -> contract.PodEnvironment:  # fmt: skip
    """The contract values for node ``rank`` of a job.

    Args:
        spec: the job spec.
        name: job name; namespace: its namespace.
        rank: node rank in ``[0, nnodes)``.
        restarts: the job's restart count (a new gang per restart).
        rdzv_addr: override of node rank 0's address (``127.0.0.1`` for local runs);
            defaults to the headless-Service DNS name.
        nnodes: the admitted gang size (default ``spec.nodes``); an elastic
            job's data-parallel degree scales with it.
        uid: the TrainingJob's ``metadata.uid``, the default run identity (:func:`run_id`).

    Raises:
        ValueError: rank out of range, or ``nnodes`` not admissible for the spec.
    """
    n = spec.nodes if nnodes is None else nnodes
    if not 0 <= rank < n:
        raise ValueError(f"rank must be in [0, {n}), got {rank}")
    par = spec.effective_parallelism(n)
    return contract.PodEnvironment(
        job_name=name,
        namespace=namespace,
        nnodes=n,
        node_rank=rank,
        procs_per_node=spec.procs_per_node,
        rdzv_addr=rdzv_addr or contract.rdzv_host(name, namespace),
        parallelism=contract.format_parallelism(par.data, par.fsdp, par.tensor, par.pipeline, par.context),
        checkpoint_dir=spec.checkpoint.location or "",
        checkpoint_interval=spec.checkpoint.interval,
        **checkpoint_tier_environment(spec.checkpoint),
        restart_count=restarts,
        **contract_values(spec.precision),
        run_id=run_id(spec.checkpoint, uid),
    )


def group_environment(spec: TrainingJobSpec, env: contract.PodEnvironment, rank: int) -> contract.PodEnvironment:
    """The contract values of job-wide node ``rank`` as a pod of its replica group sees them (``spec.faultTolerance``).

    Each replica group is a torchrun world of its own (issue 31): ``nnodes`` is the group's node count (spec.nodes / R),
    ``node_rank`` the rank inside the group, the rendezvous host the group's first pod
    (:func:`railtrain.crds.replica_groups.group_rdzv_host`) and the parallelism the group's (data / R; fsdp, tensor,
    pipeline and context unchanged). So ``PET_NNODES``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR`` and the
    ``RAILTRAIN_*`` twins describe the group. A job without replica groups gets ``env`` back unchanged.

    Args:
        spec: the job spec; env: the job-wide values of node ``rank`` (:func:`pod_environment`); rank: the job-wide node rank.

    Returns:
        The group's values (a new :class:`~railtrain.crds.contract.PodEnvironment`).

    Raises:
        ValueError: ``rank`` outside ``[0, spec.nodes)``.
    """
    ft = spec.fault_tolerance
    if ft is None:
        return env
    group = replica_groups.layout(spec.nodes, spec.procs_per_node, ft.replica_groups)[replica_groups.group_of(rank, spec.nodes, ft.replica_groups)]
    par = spec.effective_parallelism(spec.nodes)
    return dataclasses.replace(
        env,
        nnodes=group.nodes,
        node_rank=group.node_rank(rank),
        rdzv_addr=replica_groups.group_rdzv_host(env.job_name, env.namespace, group),
        parallelism=contract.format_parallelism(par.data // ft.replica_groups, par.fsdp, par.tensor, par.pipeline, par.context),
    )


def group_labels(spec: TrainingJobSpec, rank: int) -> dict[str, str]:
    """The replica-group labels of job-wide node ``rank`` (its group and its node rank inside it); ``{}`` without replica groups."""
    ft = spec.fault_tolerance
    if ft is None:
        return {}
    group = replica_groups.group_of(rank, spec.nodes, ft.replica_groups)
    per = spec.nodes // ft.replica_groups
    return {replica_groups.LABEL_REPLICA_GROUP: str(group), replica_groups.LABEL_GROUP_NODE_RANK: str(rank - group * per)}


def group_env_items(spec: TrainingJobSpec, name: str, namespace: str, rank: int) -> list[dict[str, str]]:
    """The replica-group variables of node ``rank`` (:func:`railtrain.crds.replica_groups.replica_group_env`: the
    Lighthouse's Service address, the group, R, minReplicas, the quorum timeout) as ``EnvVar`` dicts, the names the
    user's ``spec.env`` sets left out; ``[]`` without replica groups."""
    ft = spec.fault_tolerance
    if ft is None:
        return []
    keep = {v.name for v in spec.env}
    address = replica_groups.lighthouse_address(replica_groups.lighthouse_host(name, namespace))
    values = replica_groups.replica_group_env(ft, replica_groups.group_of(rank, spec.nodes, ft.replica_groups), address)
    return [{"name": k, "value": v} for k, v in values.items() if k not in keep]


_FROM_ANNOTATION = {
    contract.ENV_NNODES: contract.ANNOTATION_NNODES,
    contract.ENV_PET_NNODES: contract.ANNOTATION_NNODES,
    contract.ENV_PARALLELISM: contract.ANNOTATION_PARALLELISM,
}


def container_env(spec: TrainingJobSpec, env: contract.PodEnvironment) -> list[dict[str, str]]:
    """Container ``env`` list: the contract first, then the user's variables (which may override).

    A job placed inside one NVLink domain (``spec.topology.nvlinkDomain``) also gets
    :data:`~railtrain.crds.contract.ENV_NVLINK_DOMAIN` ``=1``, so the trainer applies the domain's node rule
    (:func:`railtrain.crds.parallel.problems`) in a pod and in ``railtrain run --local`` alike.
    """
    merged = contract.pod_env(env)
    if spec.topology.nvlink_domain and contract.ENV_NVLINK_DOMAIN not in fabric.user_names(spec):
        merged[contract.ENV_NVLINK_DOMAIN] = "1"
    merged |= threads.thread_env(env.procs_per_node, fabric.user_names(spec))  # the CPU threads' contract (crds/threads.py)
    for var in spec.env:
        merged[var.name] = var.value
    return [{"name": k, "value": v} for k, v in merged.items()]


def gang_annotations(spec: TrainingJobSpec, nnodes: int) -> dict[str, str]:
    """Pod annotations describing a gang of ``nnodes``: :data:`~railtrain.crds.contract.ANNOTATION_NNODES` and the parallelism.

    Raises:
        ValueError: ``nnodes`` is not admissible for the spec.
    """
    par = spec.effective_parallelism(nnodes)
    return {
        contract.ANNOTATION_NNODES: str(nnodes),
        contract.ANNOTATION_PARALLELISM: contract.format_parallelism(par.data, par.fsdp, par.tensor, par.pipeline, par.context),
    }


def _from_annotations(items: list[dict[str, str]], keep: set[str]) -> list[dict[str, Any]]:
    """Read the gang size and parallelism from the pod's annotations (Downward API ``fieldRef``).

    Variables named in ``keep`` (the user's own ``spec.env``) stay literal.
    """
    out: list[dict[str, Any]] = []
    for item in items:
        key = _FROM_ANNOTATION.get(item["name"])
        if key and item["name"] not in keep:
            out.append({"name": item["name"], "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{key}']"}}})
        else:
            out.append(item)
    return out


def _downward_api(items: list[dict[str, Any]], keep: set[str]) -> list[dict[str, Any]]:
    """Variables of :data:`~railtrain.crds.contract.DOWNWARD_API_FIELDS` (the node name) read from the pod itself
    (``valueFrom.fieldRef``); variables named in ``keep`` (the user's own ``spec.env``) stay literal."""
    fields = contract.DOWNWARD_API_FIELDS
    return [
        {"name": i["name"], "valueFrom": {"fieldRef": {"fieldPath": fields[i["name"]]}}} if i["name"] in fields and i["name"] not in keep else i
        for i in items
    ]


def checkpoint_tier_environment(ck: Checkpoint) -> dict[str, Any]:
    """:class:`~railtrain.crds.contract.PodEnvironment` fields of the node-local tiers (mount paths, intervals, keeps)."""
    out: dict[str, Any] = {"checkpoint_keep": ck.keep}
    if ck.memory is not None:
        out |= {"checkpoint_memory_dir": contract.MEMORY_TIER_MOUNT, "checkpoint_memory_interval": ck.memory.interval, "checkpoint_memory_keep": ck.memory.keep}
    if ck.local is not None:
        out |= {"checkpoint_local_dir": contract.LOCAL_TIER_MOUNT, "checkpoint_local_interval": ck.local.interval, "checkpoint_local_keep": ck.local.keep}
    return out


def checkpoint_volumes(ck: Checkpoint, name: str, namespace: str, uid: str = "") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Pod volumes and container mounts of the checkpoint tiers.

    memory: the node's tmpfs through ``hostPath`` (``<hostPath>/<namespace>/<job>/<run id>``,
    :func:`run_id` of ``uid``; outlives the pod, so a gang of the same run restarted on the same
    node finds it, and a new job of the same name does not) or a
    memory-backed ``emptyDir`` (survives container restarts only). local: the
    same choice on disk. persistent: the ``volumeClaim`` mounted at
    ``location``; a URI or an unmanaged path needs no volume.
    """
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for vol_name, tier, mount, medium in (
        ("checkpoint-memory", ck.memory, contract.MEMORY_TIER_MOUNT, {"medium": "Memory"}),
        ("checkpoint-local", ck.local, contract.LOCAL_TIER_MOUNT, {}),
    ):
        if tier is None:
            continue
        if tier.volume == TierVolume.NODE.value:
            rid = run_id(ck, uid)
            path = f"{tier.host_path.rstrip('/')}/{namespace}/{name}" + (f"/{rid}" if rid else "")
            source: dict[str, Any] = {"hostPath": {"path": path, "type": "DirectoryOrCreate"}}
        else:
            source = {"emptyDir": {**medium, **({"sizeLimit": tier.size_limit} if tier.size_limit else {})}}
        volumes.append({"name": vol_name, **source})
        mounts.append({"name": vol_name, "mountPath": mount})
    if ck.volume_claim:
        volumes.append({"name": "checkpoint-persistent", "persistentVolumeClaim": {"claimName": ck.volume_claim}})
        mounts.append({"name": "checkpoint-persistent", "mountPath": ck.location})
    return volumes, mounts


def _resources(spec: TrainingJobSpec) -> dict[str, Any]:
    amounts: dict[str, str] = {}
    if spec.resources.gpus:
        amounts[spec.resources.gpu_resource_name] = str(spec.resources.gpus)
    if spec.resources.cpu is not None:  # int-or-string quantities; 0 is a request too
        amounts["cpu"] = str(spec.resources.cpu)
    if spec.resources.memory is not None:
        amounts["memory"] = str(spec.resources.memory)
    # requests == limits: Guaranteed QoS, the class training pods want.
    return {"requests": dict(amounts), "limits": dict(amounts)} if amounts else {}


def gang_tolerations(spec: TrainingJobSpec) -> list[dict[str, str]]:
    """Tolerations of every gang pod: the NoSchedule taint keyed by the GPU resource name.

    This is the toleration Kubernetes' ExtendedResourceToleration admission
    plugin adds to pods requesting an extended resource; adding it here makes
    pods behave the same on clusters without that plugin, and it is the one
    taint :func:`railtrain.operator.scheduling.snapshot.snapshot` treats as tolerated.
    """
    return [{"key": spec.resources.gpu_resource_name, "operator": "Exists", "effect": "NoSchedule"}]


def shm_volume(spec: TrainingJobSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The memory-backed ``/dev/shm`` of ``spec.resources.shm``: ``([volume], [mount])``, or two empty lists.

    An ``emptyDir`` with ``medium: Memory`` is a tmpfs sized by ``sizeLimit``;
    the container runtime's own ``/dev/shm`` is 64 MiB, too little for PyTorch
    DataLoader workers and NCCL's shared-memory transport.
    """
    if not spec.resources.shm:
        return [], []
    return [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": spec.resources.shm}}], [{"name": SHM_VOLUME, "mountPath": SHM_MOUNT}]


def rendezvous_selector(spec: TrainingJobSpec) -> dict[str, str]:
    """The label the rendezvous Service selects besides the job's name: node rank 0, or with replica groups every
    group's node rank 0 (each group's own rendezvous host, :func:`group_environment`)."""
    if spec.fault_tolerance is not None:
        return {replica_groups.LABEL_GROUP_NODE_RANK: "0"}
    return {contract.LABEL_NODE_RANK: "0"}


def render_service(job: TrainingJob, namespace: str, uid: str) -> dict[str, Any]:
    """The headless rendezvous Service of a job (``clusterIP: None``, not-ready addresses published), selecting node rank 0 only.

    torchrun's rendezvous needs one name, rank 0's (:func:`railtrain.crds.contract.rdzv_host`); the
    other ranks reach it and each other by the addresses the rendezvous hands out, never by DNS. A
    Service selecting the whole gang made the EndpointSlice and Endpoints controllers rewrite the
    job's endpoints as each rank got its address: for a 256-pod gang about 90 writes beside the
    gang's 512 (`apiserver_request_total`, docs/bench-operator.md), fanned out to every watcher of
    EndpointSlices (CoreDNS). With rank 0 alone they are one or two per attempt.

    Args:
        job: the validated TrainingJob; namespace: where it lives; uid: its uid (the ownerReference).

    Returns:
        The Service manifest (a dict, camelCase).
    """
    name = job.metadata.name
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": contract.service_name(name),
            "namespace": namespace,
            "labels": job_labels(name),
            "ownerReferences": [owner_reference(name, uid)],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {contract.LABEL_JOB_NAME: name, **rendezvous_selector(job.spec)},
            "ports": [{"name": "rendezvous", "port": contract.DEFAULT_RDZV_PORT, "targetPort": contract.DEFAULT_RDZV_PORT}],
        },
    }


def trainer_env(spec: TrainingJobSpec, env: contract.PodEnvironment, profile: fabric.FabricProfile | None) -> list[dict[str, Any]]:
    """The training container's ``env`` list for one rank's contract values ``env``.

    The contract and the user's variables (:func:`container_env`); for an elastic
    job the gang size and parallelism read from the pod's annotations, since the
    size is known only at admission; the node name from the Downward API; then
    the fabric ``profile``'s variables the user does not set. Returns
    Kubernetes ``EnvVar`` dicts (``value`` or ``valueFrom``).
    """
    keep = {v.name for v in spec.env}
    env_items: list[dict[str, Any]] = list(container_env(spec, env))
    if spec.elastic is not None:
        env_items = _from_annotations(env_items, keep)
    return _downward_api(env_items, keep) + fabric.container_env(profile, spec)


def pod_volumes(spec: TrainingJobSpec, name: str, namespace: str, uid: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every volume of a gang pod and its mount in the training container: ``(volumes, mounts)``.

    The checkpoint tiers (:func:`checkpoint_volumes`, ``uid`` naming the run)
    first, then the ``/dev/shm`` tmpfs (:func:`shm_volume`); both lists empty when
    the job needs neither.
    """
    volumes, mounts = checkpoint_volumes(spec.checkpoint, name, namespace, uid)
    shm, shm_mounts = shm_volume(spec)
    return volumes + shm, mounts + shm_mounts


def trainer_container(job: TrainingJob, env_items: list[dict[str, Any]], mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """The training container of a gang pod, before the template's ``trainer`` entry is merged.

    Takes the job, its rank's ``env`` list (:func:`trainer_env`) and volume
    mounts (:func:`pod_volumes`); returns the v1 Container dict: image, command
    and args, the rendezvous and metrics ports, the termination message the
    operator reads verdicts from, Guaranteed-QoS resources and, for an NVLink
    domain job, the IMEX channel's claim.
    """
    spec = job.spec
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        "env": env_items,
        "ports": [
            {"name": "rendezvous", "containerPort": contract.DEFAULT_RDZV_PORT},
            {"name": "metrics", "containerPort": contract.DEFAULT_METRICS_PORT},
        ],
        "terminationMessagePath": contract.TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if spec.command:
        container["command"] = launcher.entry_command(spec)
        if spec.run_policy.restart_in_place:
            container["env"] = [*env_items, *supervisor.supervisor_env(job.spec.run_policy, job.status)]
    if spec.args:
        container["args"] = list(spec.args)
    resources = _resources(spec)
    if nvlink.wants(job):
        resources["claims"] = nvlink.container_claims()
    if resources:
        container["resources"] = resources
    if mounts:
        container["volumeMounts"] = mounts
    return container


def render_pod(job: TrainingJob, namespace: str, uid: str, rank: int, restarts: int = 0, profile: fabric.FabricProfile | None = None) -> dict[str, Any]:
    """The gated pod of node ``rank``, with ``spec.template`` merged in (:func:`railtrain.operator.job.template.merge_template`).

    ``profile`` (the operator's fabric profile, :mod:`railtrain.crds.fabric`)
    adds its NCCL/libfabric variables to the training container, the names the
    user sets left out, and names itself in the pod's
    :data:`~railtrain.crds.fabric.ANNOTATION_PROFILE`; its per-node values are
    read from annotations the operator sets when it releases the pod.

    An elastic job's pods read the gang size and parallelism from their
    annotations (:func:`gang_annotations`, rendered for ``spec.nodes``), which
    the operator sets to the admitted size in the same patch that pins and
    ungates the pod, before any container starts.

    Returns:
        A v1 Pod manifest with ``schedulingGates`` set and no ``nodeSelector``
        yet; :func:`railtrain.operator.job.binding.pin_to_node` adds the node once the gang is placed.

    Raises:
        ValueError: rank out of range.
    """
    name = job.metadata.name
    spec = job.spec
    env = group_environment(spec, pod_environment(spec, name, namespace, rank, restarts, uid=uid), rank)  # unchanged without replica groups
    env_items = trainer_env(spec, env, profile) + group_env_items(spec, name, namespace, rank)
    volumes, mounts = pod_volumes(spec, name, namespace, uid)
    container = trainer_container(job, env_items, mounts)
    labels = job_labels(name) | {contract.LABEL_NODE_RANK: str(rank)} | group_labels(spec, rank)
    annotations = {contract.ANNOTATION_RESTART: str(restarts), **gang_annotations(spec, spec.nodes)}
    if profile is not None:
        annotations[fabric.ANNOTATION_PROFILE] = profile.name
    pod_spec: dict[str, Any] = {
        "hostname": contract.pod_name(name, rank),
        "subdomain": contract.service_name(name),
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "schedulingGates": [{"name": contract.SCHEDULING_GATE}],
        "tolerations": gang_tolerations(spec),
        "containers": [container],
        **({"volumes": volumes} if volumes else {}),
        **({"resourceClaims": nvlink.pod_claims(name)} if nvlink.wants(job) else {}),
    }
    if spec.template is not None:
        labels = {**spec.template.metadata.labels, **labels}
        annotations = {**spec.template.metadata.annotations, **annotations}
        pod_spec = merge_template(pod_spec, spec.template.spec)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": contract.pod_name(name, rank),
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(name, uid)],
        },
        "spec": pod_spec,
    }


def render_gang(job: TrainingJob, namespace: str, uid: str, restarts: int = 0, profile: fabric.FabricProfile | None = None) -> list[dict[str, Any]]:
    """All pods of the gang, ordered by node rank (``profile`` as for :func:`render_pod`)."""
    return [render_pod(job, namespace, uid, r, restarts, profile) for r in range(job.spec.nodes)]
