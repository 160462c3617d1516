"""Prometheus metrics of a training process, served over HTTP by local rank 0 of each node.

Step metrics (``railtrain_step``, ``railtrain_loss``, ``railtrain_tokens_per_second``,
``railtrain_step_seconds``, ``railtrain_mfu``) are job-wide values every rank
knows (the loss is averaged over ranks, tokens count the global batch).
Checkpoint metrics are this process's own: seconds and bytes of each tier's
save and load, and the seconds the step loop was blocked by saving.

MFU (model FLOPs utilisation, Chowdhery et al. 2022, appendix B) is
``flops_per_token × tokens/s ÷ (peak FLOP/s per device × devices)``, with the
peak given by ``--peak-tflops``; it is left unset when that is 0.
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server


def mfu(flops_per_token: float, tokens_per_s: float, peak_flops_per_device: float, devices: int) -> float:
    """Model FLOPs utilisation in ``[0, 1]`` (``0.0`` when the peak is unknown)."""
    if peak_flops_per_device <= 0 or devices <= 0:
        return 0.0
    return flops_per_token * tokens_per_s / (peak_flops_per_device * devices)


class TrainerMetrics:
    """The metrics of one process in their own registry (several trainers may share an interpreter in tests).

    Args:
        flops_per_token: model training FLOPs per token (forward + backward).
        peak_flops_per_device: peak FLOP/s of one device; 0 disables MFU.
        devices: devices of the job (the world size).
    """

    def __init__(self, flops_per_token: float, peak_flops_per_device: float, devices: int) -> None:
        self.flops_per_token = flops_per_token
        self.peak = peak_flops_per_device
        self.devices = devices
        self.registry = r = CollectorRegistry()
        self.step = Gauge("railtrain_step", "Last finished optimizer step.", registry=r)
        self.resumed_step = Gauge("railtrain_resumed_step", "The checkpoint step this process resumed from (0: a fresh start); the operator's goodput counts steps redone after it.", registry=r)
        self.total_steps = Gauge("railtrain_total_steps", "The step the trainer runs to (--steps); the operator's status.progress.totalSteps.", registry=r)
        self.loss = Gauge("railtrain_loss", "Loss of the last step, mean over ranks (nats per token).", registry=r)
        self.tokens_per_s = Gauge("railtrain_tokens_per_second", "Tokens of the global batch per second in the last step.", registry=r)
        self.step_seconds = Gauge("railtrain_step_seconds", "Wall time of the last step.", registry=r)
        self.mfu = Gauge("railtrain_mfu", "Model FLOPs utilisation of the last step (0..1); absent without --peak-tflops.", registry=r)
        self.save_seconds = Counter("railtrain_checkpoint_save_seconds", "Seconds spent writing checkpoints (this process), per tier.", ["tier"], registry=r)
        self.save_bytes = Counter("railtrain_checkpoint_save_bytes", "Bytes of checkpoints written by this process, per tier.", ["tier"], registry=r)
        self.saves = Counter("railtrain_checkpoint_saves", "Checkpoints written, per tier.", ["tier"], registry=r)
        self.last_save_seconds = Gauge("railtrain_checkpoint_last_save_seconds", "Seconds of the last checkpoint write, per tier.", ["tier"], registry=r)
        self.last_save_bytes = Gauge("railtrain_checkpoint_last_save_bytes", "Bytes of the last checkpoint write by this process, per tier.", ["tier"], registry=r)
        self.load_seconds = Gauge("railtrain_checkpoint_load_seconds", "Seconds of the checkpoint load at start (verification included), per tier.", ["tier"], registry=r)
        self.load_bytes = Gauge(
            "railtrain_checkpoint_load_bytes", "Bytes loaded at start by this process (persistent tier: the checkpoint's size over the world size), per tier.", ["tier"], registry=r
        )
        self.blocked_seconds = Counter("railtrain_checkpoint_blocked_seconds", "Seconds the step loop waited for checkpoint saves (staging, or the whole write when synchronous).", registry=r)
        self.replica_quorum = Gauge("railtrain_replica_group_quorum", "Replica groups in the last step's quorum (spec.faultTolerance; 0 without replica groups).", registry=r)
        self.replica_heals = Gauge("railtrain_replica_group_heals", "Times this process's replica group healed from a live peer (loaded its model, optimizer and step).", registry=r)
        self.replica_retried = Gauge("railtrain_replica_group_retried_steps", "Steps this replica group ran again because the quorum did not commit them (a peer died mid-step).", registry=r)
        self._server: Any = None
        self._lock = threading.Lock()

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Start the HTTP endpoint (``/metrics``) in a daemon thread.

        Raises:
            OSError: the port cannot be bound.
        """
        self._server, _ = start_http_server(port, addr=addr, registry=self.registry)

    def observe_step(self, step: int, loss: float, tokens_per_s: float, step_seconds: float) -> None:
        """Record one finished step."""
        self.step.set(step)
        self.loss.set(loss)
        self.tokens_per_s.set(tokens_per_s)
        self.step_seconds.set(step_seconds)
        if self.peak > 0:
            self.mfu.set(mfu(self.flops_per_token, tokens_per_s, self.peak, self.devices))

    def observe_replica(self, quorum: int, heals: int, retried: int) -> None:
        """Record a replica group's last quorum: groups in it, this group's heals and re-run steps so far (counts)."""
        self.replica_quorum.set(quorum)
        self.replica_heals.set(heals)
        self.replica_retried.set(retried)

    def observe_checkpoint(self, event: str, tier: str, seconds: float, nbytes: int) -> None:
        """:data:`railtrain.trainer.checkpoint.Observer`: ``event`` is ``save``, ``load`` or ``blocked``."""
        with self._lock:
            if event == "save":
                self.save_seconds.labels(tier).inc(seconds)
                self.save_bytes.labels(tier).inc(nbytes)
                self.saves.labels(tier).inc()
                self.last_save_seconds.labels(tier).set(seconds)
                self.last_save_bytes.labels(tier).set(nbytes)
            elif event == "load":
                self.load_seconds.labels(tier).set(seconds)
                self.load_bytes.labels(tier).set(nbytes)
            elif event == "blocked":
                self.blocked_seconds.inc(seconds)

    def close(self) -> None:
        """Stop the HTTP endpoint (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
