"""Every reason the operator writes on a TrainingJob's conditions and Events, named once with the sentence saying when.

The reasons are part of the API a user reads (``kubectl describe``, ``railtrain status``) and
that tools key on: :data:`railtrain.crds.goodput.REASON_CAUSE` turns a gang's end reason into a
cause, the CLI's views pick reasons to show, tests and docs/operator.md name them. One module
lists them, as jobset's ``constants.go`` does, so a reason is spelled in one place; the phase
rows, the recovery decision and the admission pass use these names. Messages stay with the rows
that write them (they carry the numbers of the moment).

May import: nothing (a leaf of ``railtrain.crds``).
"""

from __future__ import annotations

# Scheduled: whether the gang holds nodes.
GANG_PLACED = "GangPlaced"
"""Scheduled True: every rank has a node (the admission pass placed the gang, or its pods were found bound)."""
UNSCHEDULABLE = "Unschedulable"
"""Scheduled False: too few nodes fit the gang cluster-wide (permanent when no node of the cluster ever could)."""
TOPOLOGY_UNSATISFIABLE = "TopologyUnsatisfiable"
"""Scheduled False: enough nodes fit, but not inside the topology domain the job requires."""
UNKNOWN_TOPOLOGY_LEVEL = "UnknownTopologyLevel"
"""Scheduled False (refusal, permanent): ``spec.topology.level`` is required but is not one of the operator's topology levels."""
WAITING_FOR_EARLIER_JOBS = "WaitingForEarlierJobs"
"""Scheduled False (refusal, a Normal Event): the gang fits the free capacity, but it is promised to jobs ahead in the queue."""
NO_NVLINK_DOMAIN_LEVEL = "NoNVLinkDomainLevel"
"""Scheduled False (refusal): the job asks for one NVLink domain and the operator knows no NVLink-domain level."""
PINNED_NODE_UNAVAILABLE = "PinnedNodeUnavailable"
"""Scheduled False (refusal): a rank is pinned to a node that is gone or ineligible; only a new gang can fix it."""
WAITING_FOR_RESTARTING_GANGS = "WaitingForRestartingGangs"
"""Scheduled False: the job would fit but for nodes that restarting gangs hold (``status.hold``)."""
POD_NAME_TAKEN = "PodNameTaken"
"""Scheduled False: a pod the job does not own holds one of its ranks' names."""
SERVICE_NAME_TAKEN = "ServiceNameTaken"
"""Scheduled False: a Service the job does not own holds the rendezvous Service's name."""
POD_NAMES_FREE = "PodNamesFree"
"""Scheduled False: the objects that were in the way of the gang's names are gone; the gang waits for admission."""
WAITING_FOR_OLD_PODS = "WaitingForOldPods"
"""Scheduled False: pods of the previous gang still hold a rank's name while they terminate."""
OLD_PODS_GONE = "OldPodsGone"
"""Scheduled False: the previous gang's pods are gone; the new gang waits for admission."""
GANG_GONE = "GangGone"
"""Scheduled False: an admitted gang has no released pod left and nothing recorded why; the job waits for admission again."""
GANG_TIMEOUT = "GangTimeout"
"""Scheduled and Running False: a released gang was not fully Running within ``runPolicy.gangTimeoutSeconds``; re-queued."""

# Running: whether every rank runs.
ALL_RANKS_RUNNING = "AllRanksRunning"
"""Running True: every rank's pod is Running."""
RANKS_FINISHING = "RanksFinishing"
"""Running True: some ranks exited 0, the others still run."""
RANKS_NOT_RUNNING = "RanksNotRunning"
"""Running False: not every rank's pod is Running yet."""
FAILED_SCHEDULING = "FailedScheduling"
"""Running False: kube-scheduler or the kubelet refused a released rank; the gang is placed again."""
POD_FAILED = "PodFailed"
"""Running False: a rank's trainer failed (its verdict decides what follows)."""
COMPLETED = "Completed"
"""Running False and Succeeded True: every rank exited 0."""

# Suspended.
SUSPENDED = "Suspended"
"""Suspended True (and Running, Scheduled False): ``runPolicy.suspend`` is true; the gang is stopped."""
RESUMED = "Resumed"
"""Suspended False: ``runPolicy.suspend`` went back to false; the job waits for admission."""

# Failed: why the job ended.
INVALID_SPEC = "InvalidSpec"
"""Failed True: the stored spec does not match the models or cannot become pods."""
POD_REJECTED = "PodRejected"
"""Failed True: the API server refuses the job's pods or Service as invalid (400/422), which would repeat on every try."""
DEADLINE_EXCEEDED = "DeadlineExceeded"
"""Failed True: the job ran longer than ``runPolicy.activeDeadlineSeconds``."""
USER_ERROR = "UserError"
"""Failed True: the trainer reported a configuration error; not retried."""
FAILURE_POLICY = "FailurePolicy"
"""Failed True: ``runPolicy.failurePolicy`` maps the verdict to Fail."""
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
"""Failed True: a failure would need one more job restart than ``runPolicy.backoffLimit`` allows."""
QUARANTINE_LIMIT_EXCEEDED = "QuarantineLimitExceeded"
"""Failed True: the job's verdicts would quarantine more nodes than ``failurePolicy.maxQuarantinesPerHour``."""
INFRASTRUCTURE_RESTART_LIMIT_EXCEEDED = "InfrastructureRestartLimitExceeded"
"""Failed True: one more infrastructure restart than ``runPolicy.maxInfrastructureRestarts``."""

# Restarts: the reason of Scheduled and Running False (and the Event) when the whole gang restarts.
RESTARTING = "Restarting"
"""A job restart: a rank failed with a retryable verdict (spends ``runPolicy.backoffLimit``)."""
NODE_LOST = "NodeLost"
"""An infrastructure restart: a node under the gang was deleted or NotReady past ``runPolicy.nodeLostGraceSeconds``."""
RANK_VANISHED = "RankVanished"
"""An infrastructure restart: a released rank's pod was deleted, evicted or preempted while the gang ran."""
RANK_EVICTED = "RankEvicted"
"""An infrastructure restart: the kubelet ended a rank's pod for its node's sake."""
ADMISSION_REFUSED = "AdmissionRefused"
"""An infrastructure restart: the kubelet refused to admit a rank's pod."""
NODE_QUARANTINED = "NodeQuarantined"
"""An infrastructure restart after a verdict quarantined its node (also the Event on the Node and the job)."""
NODE_AVOIDED = "NodeAvoided"
"""An infrastructure restart after a verdict named nodes the job's next gangs avoid (its rule has avoidNodes, or the cluster's quarantine bound is reached)."""
INFRASTRUCTURE_RESTART = "InfrastructureRestart"
"""An infrastructure restart decided by a verdict without a node quarantined or avoided (e.g. it names every node of the gang)."""
ELASTIC_GROW = "ElasticGrow"
"""An infrastructure restart that grows an elastic gang back when capacity returns."""
REPLICA_GROUP_REPLACED = "ReplicaGroupReplaced"
"""Running True (and a Warning Event): one replica group's pods are being replaced alone while the other groups train on (spec.faultTolerance)."""
REPLICA_GROUP_LOST = "ReplicaGroupLost"
"""A Warning Event: a replica group spent its restart budget and is not replaced again; the others train on while they keep the quorum."""
QUORUM_LOST = "QuorumLost"
"""Failed: fewer replica groups than spec.faultTolerance.minReplicas can be kept (each lost group spent its budget)."""

# Events only.
GANG_CREATED = "GangCreated"
"""Normal Event: the gang's pods (and the rendezvous Service) were created."""
TTL_EXPIRED = "TTLExpired"
"""Normal Event: the job is deleted, ``runPolicy.ttlSecondsAfterFinished`` after it finished."""
CLAIM_IGNORED = "ClaimIgnored"
"""Warning Event: a verdict named nodes this gang did not run on (or that do not exist); nothing was done to them."""
FABRIC_DEVICE_MISSING = "FabricDeviceMissing"
"""Warning Event: the operator's fabric profile expects an RDMA device this multi-node job does not request (emitted once, with the first gang)."""
FABRIC_NODE_VALUE_INVALID = "FabricNodeValueInvalid"
"""Warning Event: a node's per-node fabric annotation (``railtrain.dev/hcas``) cannot be used."""

# Kueue's admission (a job labelled kueue.x-k8s.io/queue-name; docs/kueue.md).
WAITING_FOR_KUEUE = "WaitingForKueue"
"""Scheduled False (refusal, a Normal Event): the job's Workload is not admitted by Kueue yet; the message quotes Kueue's reason."""
QUEUE_NAME_REQUIRED = "QueueNameRequired"
"""Scheduled False (refusal, a Warning Event): the operator admits only through Kueue (``--kueue-only``) and the job names no LocalQueue."""
OUTSIDE_KUEUE_ASSIGNMENT = "OutsideKueueAssignment"
"""Scheduled False (refusal): Kueue admitted the Workload, but its assigned nodes cannot hold the gang now."""
MULTIKUEUE_NEEDS_QUEUE = "MultiKueueNeedsQueue"
"""Scheduled False (a Warning Event): ``spec.managedBy`` is Kueue's MultiKueue but the job names no LocalQueue, so nothing dispatches it."""
EVICTED_BY_KUEUE = "EvictedByKueue"
"""Scheduled False: Kueue evicted the job's Workload (preempted, deactivated, ...); the whole gang was stopped and the job waits to be admitted again."""
