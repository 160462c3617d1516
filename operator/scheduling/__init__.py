"""Scheduling, pure: where a gang may go and which gangs go now.

Modules: :mod:`.snapshot` (a frozen view of nodes and the pods on them),
:mod:`.topology` (rack/block/NVLink levels from node labels), :mod:`.domains`
(the smallest domain that fits), :mod:`.nodefit` (one pod's needs against one
node), :mod:`.placement` (a gang's nodes and rank order), :mod:`.refusal` (why a
gang cannot be placed now, in sentences), :mod:`.queue` (the
admission queue over all waiting gangs), :mod:`.quarantine` (the node labels
and taints of a quarantined node).

May import: ``railtrain.crds`` and modules of this wing only; never kopf, the
kubernetes client, or the ``job``/``kube`` wings. Functions take plain data and
``now``.
"""
