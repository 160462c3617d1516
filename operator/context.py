"""The operator's context: its frozen settings and its runtime state, handed to every kopf handler as ``memo``.

kopf gives each handler a ``memo`` (``kopf.run(memo=...)``): the startup and
cleanup handlers get this very object, resource handlers a shallow copy of it
(``copy.copy``). So the context itself never changes after start; what does
change while the operator runs (why it stopped itself, the Lease it keeps, the
resync task) sits in :class:`RuntimeState`, one object that every copy shares,
and the reconcile state (job locks, coalescer, pass counter, pool) in the one
:class:`~railtrain.operator.reconciler.Reconciler`, shared the same way.

May import: any operator wing, ``railtrain.crds``, kopf and the kubernetes client (the runtime sits above the wings); never torch.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from dataclasses import dataclass, field

from railtrain.operator.kube.fence import Leadership
from railtrain.operator.kube.verbs import Kube
from railtrain.operator.progress import Reader
from railtrain.operator.reconciler import Reconciler
from railtrain.operator.serve import Health
from railtrain.operator.settings import Settings


def default_identity() -> str:
    """This process's holderIdentity for the operator's Lease: ``host/pid``."""
    return f"{socket.gethostname()}/{os.getpid()}"


@dataclass
class RuntimeState:
    """What changes while the operator runs; shared by every copy of the context.

    Attributes:
        fatal: why the operator stopped itself (one sentence), when it did.
        leader: this operator holds the Lease: it admits and reconciles (set by
            :func:`railtrain.operator.leader.keep_lease`; a standby does nothing else).
        resync: the periodic resync task, while it runs.
        lease: the leader-election task, while it runs.
        wake: set to start a resync pass now (a new leader's first pass).
        progress: reads rank 0's metrics of Running jobs into status.progress (the leader's resync polls it).
        leadership: whether this operator may write now, by its own clock (:mod:`railtrain.operator.kube.fence`;
            the same object fences every write of ``kube``); None: ``leader`` alone decides (tests).
        swept: when the leader last looked for Workloads whose TrainingJob is gone (``time.monotonic()`` seconds;
            :func:`railtrain.operator.kueue.sweep`); None: not yet.
    """

    fatal: str | None = None
    leader: bool = False
    resync: asyncio.Task | None = None
    lease: asyncio.Task | None = None
    wake: asyncio.Event | None = None
    progress: Reader | None = None
    leadership: Leadership | None = None
    swept: float | None = None

    def leading(self) -> bool:
        """Whether this operator may act now: it holds the Lease (``leader``) and its last renewal is within the renew deadline (``leadership``)."""
        return self.leader and (self.leadership is None or self.leadership.held())


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
        health: when the loop last completed a pass (``/healthz``, ``/readyz``).
        reconciler: reconciles jobs and runs admission passes (built once by
            :func:`railtrain.operator.main.run`); when none is given, one over ``kube`` and
            ``settings`` with the wall clock and a pool of its own.
    """

    settings: Settings
    kube: Kube
    stop: threading.Event = field(default_factory=threading.Event)
    identity: str = field(default_factory=default_identity)
    state: RuntimeState = field(default_factory=RuntimeState)
    health: Health = field(default_factory=Health)
    reconciler: Reconciler = field(default=None)  # type: ignore[assignment]  # set in __post_init__ when not given

    def __post_init__(self) -> None:
        if self.reconciler is None:
            object.__setattr__(self, "reconciler", Reconciler(self.kube, self.settings.plan, self.settings.namespace))
