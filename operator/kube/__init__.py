"""The operator's API edge: the only wing that talks to the Kubernetes API server.

Modules: :mod:`.connection` (kubeconfig, the API client, what an ApiException
means in one sentence), :mod:`.verbs` (:class:`Kube`: every read and write the
operator makes, fenced by leadership), :mod:`.informer` (watch-fed stores),
:mod:`.cached` (a :class:`Kube` whose reads come from those stores),
:mod:`.fence` (leadership as writes see it), :mod:`.crdcheck` (the installed
CRD against the fields the operator writes).

May import: ``railtrain.crds`` and the kubernetes client; never kopf, never the
``scheduling`` or ``job`` wings (constants the edge needs live in ``crds``).
The names below are the edge's public surface.
"""

from railtrain.operator.kube.verbs import COMPONENT, FIELD_MANAGER, Kube, Rejected, describe, server_message, transient, unreachable

__all__ = ["COMPONENT", "FIELD_MANAGER", "Kube", "Rejected", "describe", "server_message", "transient", "unreachable"]
