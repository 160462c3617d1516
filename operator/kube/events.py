"""The core/v1 Event the operator records on an object: what it says and who it says reported it.

Events are what ``kubectl describe`` shows beside an object. The operator
reports as :data:`COMPONENT` from this host, once per Event (``count: 1``); the
write itself, best effort by Kubernetes convention, is
:meth:`railtrain.operator.kube.verbs.Kube.emit_event`.

May import: ``railtrain.crds`` and the standard library; never kopf, the kubernetes client or a domain wing.
"""

from __future__ import annotations

import socket
from datetime import datetime
from typing import Any

from railtrain.crds import times

COMPONENT = "railtrain-operator"
"""The reporting component of the operator's Events (``source.component`` and ``reportingComponent``)."""

MESSAGE_LIMIT = 1024
"""Characters of an Event's message kept; the rest is cut."""


def event_manifest(obj: dict[str, Any], type_: str, reason: str, message: str, now: datetime) -> dict[str, Any]:
    """The core/v1 Event about ``obj`` (a dict with apiVersion, kind and metadata), ready to create.

    Args:
        obj: the object the Event is about; its namespace is where the Event goes
            (``default`` for a cluster-scoped object such as a Node, as the kubelet's Events do).
        type_: ``Normal`` or ``Warning``; reason: CamelCase; message: a sentence (cut to :data:`MESSAGE_LIMIT`).
        now: when it happened (timezone-aware), written as first and last time.

    Returns:
        The Event manifest (camelCase dict) with a generated name ``<object name>.<suffix>``.
    """
    meta = obj["metadata"]
    namespace = meta.get("namespace") or "default"
    return {
        "metadata": {"generateName": f"{meta['name']}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion", "v1"),
            "kind": obj["kind"],
            "name": meta["name"],
            "namespace": meta.get("namespace", ""),
            "uid": meta.get("uid"),
        },
        "type": type_,
        "reason": reason,
        "message": message[:MESSAGE_LIMIT],
        "firstTimestamp": times.format_time(now),
        "lastTimestamp": times.format_time(now),
        "count": 1,
        "source": {"component": COMPONENT, "host": socket.gethostname()},
        "reportingComponent": COMPONENT,
        "reportingInstance": socket.gethostname(),
    }
