"""The termination-message verdict: the trainer's verdict in words, read by the operator.

Part of the pod-environment contract (re-exported by :mod:`railtrain.crds.contract`,
which callers import). The trainer writes a small JSON object with
:func:`write_termination_message`; the kubelet copies it into
``containerStatuses[].state.terminated.message``; the operator reads it back with
:func:`parse_termination_message`. This module imports neither kopf nor torch.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Mapping, TypedDict

ENV_TERMINATION_MESSAGE_PATH = "RAILTRAIN_TERMINATION_MESSAGE_PATH"
"""Optional: where :func:`write_termination_message` writes (default :data:`TERMINATION_MESSAGE_PATH`); tests and local runs."""
TERMINATION_MESSAGE_PATH = "/dev/termination-log"

# --- termination message: the trainer's verdict in words --------------------
# torchrun reports any failed worker as exit code 1, so a worker's exit code 2
# does not reach the pod; the termination message (a small JSON object the
# kubelet copies into containerStatuses[].state.terminated.message) does.
VERDICT_RETRYABLE = "retryable"
"""Restarting the gang may help (node or network trouble, a crash): counts against backoffLimit."""
VERDICT_USER_ERROR = "user-error"
"""The job's own input is wrong (flags, data, parallel degrees): fail the job now."""
VERDICT_HARDWARE_SUSPECT = "hardware-suspect"
"""The trainer's health checks caught a device computing wrong numbers (silent data corruption:
parameter bytes that disagree across replicas, a known-answer test that disagrees, or a step
whose re-execution gives a different result). ``nodes``/``ranks`` name the suspects; restarting
on the same node is likely to repeat it."""
VERDICT_STRAGGLER = "straggler"
"""A rank was consistently slower than the others for long enough to cost more than the job's
allowed share of throughput (health action ``stop``); ``nodes``/``ranks`` name it."""
VERDICT_HANG = "hang"
"""A rank stopped making progress (no heartbeat for the watchdog's deadline); ``nodes``/``ranks``
name the rank that stopped first."""
VERDICTS = (VERDICT_RETRYABLE, VERDICT_USER_ERROR, VERDICT_HARDWARE_SUSPECT, VERDICT_STRAGGLER, VERDICT_HANG)
HEALTH_VERDICTS = (VERDICT_HARDWARE_SUSPECT, VERDICT_STRAGGLER, VERDICT_HANG)
"""The verdicts of the trainer's health checks (:mod:`railtrain.trainer.health`); each names suspects."""

# reasons the health checks write (CamelCase, as Kubernetes reasons)
REASON_PARAMETER_MISMATCH = "ParameterMismatch"
"""hardware-suspect: parameter fingerprints of ranks that must hold identical bytes disagree."""
REASON_KNOWN_ANSWER_MISMATCH = "KnownAnswerMismatch"
"""hardware-suspect: a rank's known-answer test result differs from the others' or its own re-run."""
REASON_RERUN_MISMATCH = "RerunMismatch"
"""hardware-suspect: re-executing an anomalous step gave a different result on the named rank."""
REASON_DATA_ANOMALY = "DataAnomaly"
"""user-error: a step's loss/gradient is not finite or spikes, and re-execution reproduces it."""
REASON_NON_FINITE_UPDATE = "NonFiniteUpdate"
"""user-error: the run diverged: a non-finite gradient norm or loss on two steps in a row (reproduced by
re-execution), or parameters/optimizer state that turned non-finite, so no update or checkpoint of it was
made. ``step`` names the step; re-running it from the newest checkpoint (which is finite) repeats it, so
the settings (learning rate, warmup, clipping, data) must change."""
REASON_SLOW_RANK = "SlowRank"
"""straggler: the named rank's robust slowness score stayed over the threshold."""
REASON_NO_PROGRESS = "NoProgress"
"""hang: the named rank's heartbeat is older than the watchdog's deadline."""
REASON_CHECKPOINT_MISMATCH = "CheckpointMismatch"
"""user-error: the checkpoint to resume from was written by another model (a tensor missing, extra
or of another shape; the message names it). Loading it again would fail the same way."""

REASON_QUORUM_LOST = "QuorumLost"
"""retryable: a replica group (spec.faultTolerance) waited ``quorumTimeoutSeconds`` for a quorum of ``minReplicas``
live groups and none formed (torchft's Lighthouse); the group gave up. The same word as the operator's Failed reason
(:data:`railtrain.crds.reasons.QUORUM_LOST`): whether the job then fails is the operator's decision (or ``railtrain
run --local``'s), because restarting this group alone cannot bring the missing ones back. ``step`` is the last step the
group committed."""

TERMINATION_MESSAGE_MAX_BYTES = 4096
"""The kubelet keeps at most this many bytes of a termination message."""
_REASON = re.compile(r"[A-Z][A-Za-z0-9]*\Z")


class Verdict(TypedDict):
    """The parsed termination message (:func:`parse_termination_message`); every key is always present.

    Keys:
        verdict: one of :data:`VERDICTS`.
        reason: one CamelCase word (Kubernetes ``reason`` convention).
        message: one human-readable sentence.
        nodes: suspect Kubernetes node names (:data:`ENV_NODE_NAME`), ``[]`` if none or unknown.
        ranks: suspect global ranks, ``[]`` if none.
        step: the optimizer step the finding refers to, ``None`` if none.
        evidence: what was measured, e.g. ``{"fingerprints": {...}, "score": 4.2}``;
            JSON values only, ``{}`` if none.
    """

    verdict: str
    reason: str
    message: str
    nodes: list[str]
    ranks: list[int]
    step: int | None
    evidence: dict[str, Any]


def _verdict_json(verdict: str, reason: str, message: str, nodes: list[str], ranks: list[int], step: int | None, evidence: dict[str, Any]) -> str:
    data: dict[str, Any] = {"verdict": verdict, "reason": reason, "message": message}
    if nodes:
        data["nodes"] = nodes
    if ranks:
        data["ranks"] = ranks
    if step is not None:
        data["step"] = step
    if evidence:
        data["evidence"] = evidence
    return json.dumps(data, separators=(",", ":"), sort_keys=False)


def format_termination_message(
    verdict: str,
    reason: str,
    message: str,
    *,
    nodes: list[str] | tuple[str, ...] = (),
    ranks: list[int] | tuple[int, ...] = (),
    step: int | None = None,
    evidence: Mapping[str, Any] | None = None,
) -> str:
    """The termination message as compact JSON: ``{"verdict", "reason", "message"}`` plus, when
    given, ``"nodes"``, ``"ranks"``, ``"step"`` and ``"evidence"`` (see :class:`Verdict`).

    Without the optional fields the text is the original three-key form, so old
    readers keep working.

    Args:
        verdict: one of :data:`VERDICTS`.
        reason: one CamelCase word, e.g. ``InvalidConfiguration``.
        message: one human-readable sentence; shortened so the whole text fits
            :data:`TERMINATION_MESSAGE_MAX_BYTES`.
        nodes, ranks, step, evidence: the suspects, the step and what was measured
            (``evidence`` must be JSON-serialisable; it is replaced by
            ``{"truncated": true}`` if it alone would overflow the limit).

    Raises:
        ValueError: unknown verdict, a reason that is not CamelCase, a negative rank or step,
            or evidence that is not JSON-serialisable.
    """
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {', '.join(VERDICTS)}, got {verdict!r}")
    if not _REASON.match(reason):
        raise ValueError(f"reason must be one CamelCase word, got {reason!r}")
    node_list, rank_list = [str(n) for n in nodes], [int(r) for r in ranks]
    if any(r < 0 for r in rank_list) or (step is not None and step < 0):
        raise ValueError(f"ranks and step must be >= 0, got ranks={rank_list} step={step}")
    ev: dict[str, Any] = dict(evidence or {})
    try:
        text = _verdict_json(verdict, reason, message, node_list, rank_list, step, ev)
    except TypeError as err:
        raise ValueError(f"evidence must be JSON-serialisable: {err}") from None
    limit = TERMINATION_MESSAGE_MAX_BYTES
    if ev and len(text.encode()) > limit and len(_verdict_json(verdict, reason, "", node_list, rank_list, step, ev).encode()) > limit - 64:
        ev = {"truncated": True}
        text = _verdict_json(verdict, reason, message, node_list, rank_list, step, ev)
    while len(text.encode()) > limit and len(node_list) + len(rank_list) > 2 and len(_verdict_json(verdict, reason, "", node_list, rank_list, step, ev).encode()) > limit - 64:
        node_list, rank_list = node_list[: max(1, len(node_list) // 2)], rank_list[: max(1, len(rank_list) // 2)]
        text = _verdict_json(verdict, reason, message, node_list, rank_list, step, ev)
    while len(text.encode()) > limit:
        message = message[: max(0, len(message) - (len(text.encode()) - limit) - 4)] + "..."
        text = _verdict_json(verdict, reason, message, node_list, rank_list, step, ev)
    return text


def json_object(text: str | None) -> dict[str, Any] | None:
    """``text`` (a termination message) read as one JSON object, or None when it is empty, not JSON, or not an object."""
    if not text:
        return None
    try:
        data = json.loads(text.strip())
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def parse_termination_message(text: str | None) -> Verdict | None:
    """Read a termination message back as a :class:`Verdict` (all seven keys), or ``None``.

    Accepts the original three-key form (``nodes``/``ranks`` become ``[]``,
    ``step`` ``None``, ``evidence`` ``{}``). ``None`` means the container left
    no verdict: an empty message, or (with ``terminationMessagePolicy:
    FallbackToLogsOnError``) the tail of its log, or JSON that is not this
    format (including optional fields of the wrong type). Treat that as
    :data:`VERDICT_RETRYABLE`.
    """
    data = json_object(text)
    if data is None or data.get("verdict") not in VERDICTS:
        return None
    reason, message = data.get("reason"), data.get("message", "")
    if not isinstance(reason, str) or not _REASON.match(reason) or not isinstance(message, str):
        return None
    nodes, ranks, step, evidence = data.get("nodes", []), data.get("ranks", []), data.get("step"), data.get("evidence", {})
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        return None
    if not isinstance(ranks, list) or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in ranks):
        return None
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
        return None
    if not isinstance(evidence, dict):
        return None
    return Verdict(verdict=data["verdict"], reason=reason, message=message, nodes=nodes, ranks=ranks, step=step, evidence=evidence)


def write_termination_message(verdict: str, reason: str, message: str, environ: Mapping[str, str] = os.environ, **details: Any) -> bool:
    """Write the termination message if this process runs where one is collected.

    ``details`` are :func:`format_termination_message`'s keyword fields
    (``nodes``, ``ranks``, ``step``, ``evidence``).

    The path is :data:`ENV_TERMINATION_MESSAGE_PATH` if set, else
    :data:`TERMINATION_MESSAGE_PATH`. The file must already exist (the kubelet
    creates it before the container starts), so a local run writes nothing.

    Returns:
        Whether the message was written.
    """
    path = environ.get(ENV_TERMINATION_MESSAGE_PATH) or TERMINATION_MESSAGE_PATH
    if not os.path.isfile(path) or not os.access(path, os.W_OK):
        return False
    try:
        with open(path, "w") as fh:
            fh.write(format_termination_message(verdict, reason, message, **details))
    except OSError:
        return False
    return True

