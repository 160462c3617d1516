"""The operator's API edge: the only wing that talks to the Kubernetes API server.

Modules: :mod:`.errors` (the API server's answers as typed errors, each with
its sentence: the one place the client's ``ApiException`` is read),
:mod:`.connection` (kubeconfig, the API client, any client error in one
sentence), :mod:`.verbs` (:class:`Kube`: every read and write the
operator makes, fenced by leadership), :mod:`.pool` (independent calls at
once, bounded), :mod:`.events` (the Event the operator records on an object),
:mod:`.informer` (watch-fed stores),
:mod:`.cached` (a :class:`Kube` held with those stores, which serve its reads),
:mod:`.fence` (leadership as writes see it), :mod:`.crdcheck` (the installed
CRD against the fields the operator writes).

May import: ``railtrain.crds`` and the kubernetes client; never kopf, never the
``scheduling`` or ``job`` wings (constants the edge needs live in ``crds``).
The names below are the edge's public surface.
"""

from railtrain.operator.kube.connection import describe, transient, unreachable
from railtrain.operator.kube.errors import ApiError, Conflict, Forbidden, Gone, Invalid, NotFound, Rejected, ServerError, Throttled, Transient, Unreachable, server_message
from railtrain.operator.kube.events import COMPONENT
from railtrain.operator.kube.verbs import FIELD_MANAGER, Kube

__all__ = [
    "COMPONENT", "FIELD_MANAGER", "Kube", "Rejected", "describe", "server_message", "transient", "unreachable",
    "ApiError", "Conflict", "Forbidden", "Gone", "Invalid", "NotFound", "ServerError", "Throttled", "Transient", "Unreachable",
]
