"""The names of Kueue's API that railtrain writes and reads (the external-framework protocol; docs/kueue.md).

Kueue (sigs.k8s.io/kueue) admits a TrainingJob labelled :data:`QUEUE_LABEL`
through a Workload railtrain's operator owns. These are the group, version and
resource names of the objects it touches, and the label, annotation and
finalizer names of Kueue's convention (``apis/kueue/v1beta2``,
``pkg/controller/constants``). Written once here so the API edge
(``operator/kube/kueue.py``) and the pure wings share them.

May import: nothing (a leaf of ``railtrain.crds``).
"""

from __future__ import annotations

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
"""The version railtrain writes: Kueue v0.17.0 serves v1beta1 and v1beta2 and stores v1beta2; v1beta1 is gone from v0.20."""
WORKLOADS = "workloads"
RESOURCE_FLAVORS = "resourceflavors"
WORKLOAD_PRIORITY_CLASSES = "workloadpriorityclasses"
QUEUE_LABEL = f"{GROUP}/queue-name"
"""A TrainingJob carrying this label is Kueue's to admit; its value names the LocalQueue."""
PRIORITY_LABEL = f"{GROUP}/priority-class"
"""The WorkloadPriorityClass of a job (Kueue's convention for every integration)."""
JOB_UID_LABEL = f"{GROUP}/job-uid"
"""On the Workload: the uid of the job it stands for."""
FINALIZER = f"{GROUP}/resource-in-use"
"""On the Workload until its job has finished with it."""
WORKLOAD_ANNOTATION = f"{GROUP}/workload"
"""On each pod of an admitted gang: the Workload's name (as Kueue's jobframework does under TAS)."""
DEACTIVATED_FOR_SUSPEND = "railtrain.dev/deactivated-for-suspend"
"""On a Workload railtrain deactivated because its job is suspended (``runPolicy.suspend``): only such a deactivation
is undone when the job resumes; one an administrator made (``spec.active: false`` by hand) stays."""
PODSET_LABEL = f"{GROUP}/podset"
"""On each pod of an admitted gang: its pod set's name."""
MULTIKUEUE_CONTROLLER = f"{GROUP}/multikueue"
"""``spec.managedBy`` of a TrainingJob Kueue's MultiKueue dispatches to a worker cluster: the operator on this (the
manager) cluster keeps its Workload and runs nothing for it; MultiKueue copies the worker's status back."""
PREBUILT_WORKLOAD_LABEL = f"{GROUP}/prebuilt-workload-name"
"""On the copy MultiKueue creates on a worker cluster: the Workload (already created there by MultiKueue) that stands
for the job; the worker's operator adopts it instead of creating one."""
MULTIKUEUE_ORIGIN_LABEL = f"{GROUP}/multikueue-origin"
"""On the objects MultiKueue creates on a worker cluster: the manager that made them."""
