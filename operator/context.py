"""The operator's context: its frozen settings and its runtime state, handed to every kopf handler as ``memo``.

kopf gives each handler a ``memo`` (``kopf.run(memo=...)``): the startup and
cleanup handlers get this very object, resource handlers a shallow copy of it
(``copy.copy``). So the context itself never changes after start; what does
change while the operator runs (why it stopped itself, the Lease it keeps, the
resync task) sits in :class:`RuntimeState`, one object that every copy shares.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from dataclasses import dataclass, field

from railtrain.operator.kube import Kube
from railtrain.operator.settings import Settings


def default_identity() -> str:
    """This process's holderIdentity for the operator's Lease: ``host/pid``."""
    return f"{socket.gethostname()}/{os.getpid()}"


@dataclass
class RuntimeState:
    """What changes while the operator runs; shared by every copy of the context.

    Attributes:
        fatal: why the operator stopped itself (one sentence), when it did.
        peer_seen: the other operator last seen holding the Lease (warned about once).
        peers_off: the Lease cannot be kept (no RBAC), so the check is off.
        resync: the periodic resync task, while it runs.
    """

    fatal: str | None = None
    peer_seen: str | None = None
    peers_off: bool = False
    resync: asyncio.Task | None = None


@dataclass(frozen=True)
class OperatorContext:
    """Everything a handler needs: settings, the API client, the stop signal and the runtime state.

    Attributes:
        settings: what the operator was told at start.
        kube: the API client every reconcile uses.
        stop: set to stop kopf (``kopf.run(stop_flag=...)``): by the resync loop
            when the API server is gone, and by a SIGTERM/SIGINT.
        identity: this operator's holderIdentity in the Lease.
        state: the mutable part (see :class:`RuntimeState`).
    """

    settings: Settings
    kube: Kube
    stop: threading.Event = field(default_factory=threading.Event)
    identity: str = field(default_factory=default_identity)
    state: RuntimeState = field(default_factory=RuntimeState)
