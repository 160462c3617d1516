"""One job's lifecycle, pure: its request, plan, pods, records and conditions.

Modules: :mod:`.observed` (a job as one pass reads it: its spec parsed and checked
once, its status read through the models), :mod:`.stored` (a stored status read back
leniently as the crds models), :mod:`.request` (the gang request, the hold, the promised pods),
:mod:`.pods` (what the pods say: rank, restart, phase, gate), :mod:`.records`
(the admission and hold records in status, as the crds models), :mod:`.planner` (one pass's plan
for one job, through the :mod:`.phases` table), :mod:`.render` (pods and the
rendezvous Service), :mod:`.template` (``spec.template`` merged into a pod),
:mod:`.binding` (a pod pinned or bound to its node), :mod:`.nvlink` (ComputeDomains), :mod:`.conditions`,
:mod:`.attempts` (restart history and goodput), :mod:`.ledger` (the nodes each
job holds, for the admission pass), :mod:`.resize` (an elastic job's size).

May import: ``railtrain.crds``, the ``scheduling`` wing and this wing; never
kopf, the kubernetes client, or the ``kube`` wing.
"""
