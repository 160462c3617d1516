"""``spec.runPolicy.failurePolicy``: what the operator does with each verdict of a failed gang (API models, pure).

The trainer ends a failed gang with a verdict (:mod:`railtrain.crds.contract`:
``user-error``, ``retryable``, ``hardware-suspect``, ``straggler``, ``hang``).
A rule maps one verdict to an action, the way JobSet's
``spec.failurePolicy.rules`` map a failure to ``FailJobSet``, ``RestartJobSet``
or ``RestartJobSetAndIgnoreMaxRestarts``. Rules the user writes replace the
default rule of the same verdict; verdicts without a rule keep
:data:`DEFAULT_RULES`:

==================  =========================  ===========  ===========  ===========
verdict             action                     quarantine   avoid node   counts as
==================  =========================  ===========  ===========  ===========
user-error          Fail                       never        no           -
retryable           Restart                    never        no           job
hardware-suspect    RestartIgnoringBackoff     1st time     yes          infra
straggler           RestartIgnoringBackoff     never        yes          infra
hang                Restart                    2nd time     no           job
==================  =========================  ===========  ===========  ===========

(``hang`` and ``straggler`` quarantine only once two different ranks were named
on the node: :mod:`railtrain.crds.recovery`, rule 3.)

``Restart`` spends ``runPolicy.backoffLimit`` (a job restart);
``RestartIgnoringBackoff`` does not (an infrastructure restart: the fault lies
with a node, not the job). ``quarantineAfter: N`` quarantines a node once
verdicts of this kind named it N times in this job (0: never); ``avoidNodes``
makes the next gang of this job avoid the named nodes without quarantining
them. ``maxQuarantinesPerHour`` bounds how many nodes one job may quarantine in
any hour: beyond it the job fails (reason ``QuarantineLimitExceeded``), so a
job that breaks every node it touches cannot drain the cluster. The platform's
own bound (the operator's ``--max-quarantines-per-hour``, for the whole
cluster) comes first: a job's setting can only lower what it may do. What a
verdict may claim, and how the decision is made, is
:mod:`railtrain.crds.recovery`.
"""

from __future__ import annotations

from enum import Enum

from pydantic import Field

from railtrain.crds import contract
from railtrain.crds.base import Model


class FailureAction(str, Enum):
    """What to do with the job when a gang fails with a verdict."""

    FAIL = "Fail"
    RESTART = "Restart"
    RESTART_IGNORING_BACKOFF = "RestartIgnoringBackoff"


class Verdict(str, Enum):
    """A trainer verdict (:data:`railtrain.crds.contract.VERDICTS`)."""

    USER_ERROR = contract.VERDICT_USER_ERROR
    RETRYABLE = contract.VERDICT_RETRYABLE
    HARDWARE_SUSPECT = contract.VERDICT_HARDWARE_SUSPECT
    STRAGGLER = contract.VERDICT_STRAGGLER
    HANG = contract.VERDICT_HANG


class FailurePolicyRule(Model):
    """The action for one verdict."""

    verdict: Verdict = Field(description="The trainer's verdict this rule applies to: user-error, retryable, hardware-suspect, straggler or hang.")
    action: FailureAction = Field(description="Fail: the job fails now; Restart: the whole gang restarts and runPolicy.backoffLimit is spent; RestartIgnoringBackoff: the gang restarts without spending backoffLimit (counted in status.infrastructureRestarts).")
    quarantine_after: int = Field(0, ge=0, le=100, description="Quarantine a node (taint railtrain.dev/quarantined:NoSchedule) once verdicts of this kind named it this many times in this job; 0 never quarantines.")
    avoid_nodes: bool = Field(False, description="The next gang of this job avoids the nodes the verdict named (without quarantining them for other jobs).")


DEFAULT_RULES: dict[str, FailurePolicyRule] = {
    r.verdict: r  # type: ignore[misc]
    for r in (
        FailurePolicyRule(verdict=Verdict.USER_ERROR, action=FailureAction.FAIL),
        FailurePolicyRule(verdict=Verdict.RETRYABLE, action=FailureAction.RESTART),
        FailurePolicyRule(verdict=Verdict.HARDWARE_SUSPECT, action=FailureAction.RESTART_IGNORING_BACKOFF, quarantine_after=1, avoid_nodes=True),
        FailurePolicyRule(verdict=Verdict.STRAGGLER, action=FailureAction.RESTART_IGNORING_BACKOFF, avoid_nodes=True),
        FailurePolicyRule(verdict=Verdict.HANG, action=FailureAction.RESTART, quarantine_after=2),
    )
}
"""The safe defaults, one rule per verdict (see the module docstring's table)."""


class FailurePolicy(Model):
    """Per-verdict actions for a failed gang; verdicts without a rule keep the defaults (see docs/operator.md)."""

    rules: list[FailurePolicyRule] = Field(default_factory=list, max_length=5, description="At most one rule per verdict; each replaces that verdict's default rule.")
    max_quarantines_per_hour: int = Field(2, ge=0, le=1000, description="Most nodes this job may quarantine within any hour; a verdict that would quarantine one more fails the job with reason QuarantineLimitExceeded.")

    def rule(self, verdict: str) -> FailurePolicyRule:
        """The rule for ``verdict``: the user's, else the default (an unknown verdict is treated as retryable)."""
        for r in self.rules:
            if r.verdict == verdict:
                return r
        return DEFAULT_RULES.get(verdict, DEFAULT_RULES[contract.VERDICT_RETRYABLE])


def unique_verdicts(policy: FailurePolicy) -> bool:
    """Whether ``policy`` has at most one rule per verdict (the Python twin of the CEL rule in ``SPEC_RULES``)."""
    seen = [r.verdict for r in policy.rules]
    return len(seen) == len(set(seen))


class CleanPodPolicy(str, Enum):
    """Which pods of a finished job (Succeeded or Failed) are deleted; a pod still running is always deleted."""

    RUNNING = "Running"
    ALL = "All"


class QuarantineRecord(Model):
    """A node this job quarantined (``status.quarantines``), kept to apply ``maxQuarantinesPerHour``."""

    node: str = Field(description="The Kubernetes node.")
    verdict: str = Field(description="The verdict that named it.")
    time: str = Field(description="When it was quarantined (RFC 3339).")


class SuspectRecord(Model):
    """How often this job's verdicts named one node (``status.suspects``), for ``quarantineAfter``."""

    node: str = Field(description="The Kubernetes node.")
    verdict: str = Field(description="The verdict kind.")
    count: int = Field(ge=1, description="Times verdicts of this kind named the node in this job.")
    ranks: list[int] = Field(default_factory=list, description="For hang and straggler: the ranks that ran on the node when verdicts named it; the node is quarantined only once two different ranks were named there.")


class NodeFailureRecord(Model):
    """How often this job lost pods to the infrastructure on one node (``status.nodeFailures``)."""

    node: str = Field(description="The Kubernetes node.")
    count: int = Field(ge=1, description="Pods of this job the node's kubelet evicted or refused, or lost with the node.")


class InPlaceRecord(Model):
    """The current gang's in-place restarts the operator has counted (``status.inPlace``; crds/inplace.py's ledger)."""

    restarts: int = Field(ge=0, description="The gang's restart count (status.restarts) this record belongs to.")
    attempt: int = Field(0, ge=0, description="The gang's attempt counted so far (0 before its first in-place restart); every rank of the gang agrees on it.")
    job_restarts: int = Field(0, ge=0, description="Of them, in-place restarts that spent runPolicy.backoffLimit (counted in status.jobRestarts).")
    infrastructure_restarts: int = Field(0, ge=0, description="Of them, in-place restarts counted in status.infrastructureRestarts.")
    causes: dict[str, int] = Field(default_factory=dict, description="In-place restarts by the verdict that caused them.")
    nodes_left: int = Field(0, ge=0, description="Nodes the gang left for a verdict while hot spares took their ranks, acted on so far (quarantined or avoided).")
