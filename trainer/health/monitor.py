"""The health checks as the training loop sees them: one :class:`HealthMonitor` per rank.

Per step the loop calls :meth:`HealthMonitor.begin_step`, runs forward/backward (hooks time
the forward and apply injected faults), :meth:`~HealthMonitor.before_collective`,
:meth:`~HealthMonitor.check_numeric` before the optimizer step, and
:meth:`~HealthMonitor.end_step` after it. Every decision is taken from gathered values that
are identical on every rank, so all ranks raise the same :class:`HealthVerdict` at the same
step (the operator never has to guess which rank's message to believe).

Classification by re-execution follows Megatron-LM's rerun state machine
(``megatron/core/rerun_state_machine.py``): on a NaN/Inf or a spiking loss or gradient norm,
re-run the same step's forward/backward on the same micro-batch from the same parameters; a
different result on some rank is a transient hardware fault there, the same result is a
property of the data. A known-answer test then catches a device that is *consistently* wrong.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Any, Callable, Mapping

import torch
import torch.distributed as dist
from torch import nn

from railtrain.crds import contract
from railtrain.trainer.health import stats
from railtrain.trainer.health.faults import FaultInjector
from railtrain.trainer.health.fingerprint import known_answer, model_fingerprint
from railtrain.trainer.health.metrics import HealthMetrics
from railtrain.trainer.health.reload import SettingsReload
from railtrain.trainer.health.timing import ComputeTiming, timed_modules
from railtrain.trainer.health.verdict import HealthVerdict, json_number, process_group_timeout_s
from railtrain.trainer.health.watchdog import Progress, Watchdog, open_store
from railtrain.trainer.model import Attention, FeedForward


WARMUP_SAMPLES = 2
"""Timing samples ignored at the start of a run (allocator and cache warm-up)."""
STOP_PERSISTENCE = 3
"""Consecutive timing checks a rank must stay flagged before ``straggler_action=stop`` ends the job."""


def _bits(t: torch.Tensor) -> bytes:
    return t.detach().float().cpu().numpy().tobytes()


class HealthMonitor(ComputeTiming, SettingsReload):
    """The detectors of one rank.

    Args:
        settings: thresholds and intervals (from the pod contract).
        faults: injected faults (off by default).
        model: the wrapped model (hooks on its forward).
        rank, world_size, distributed, device: this process.
        coordinates: mesh coordinates of every rank (``ParallelDims.coordinates``), for the replica groups.
        node: this rank's node name.
        registry: Prometheus registry for :class:`HealthMetrics`.
        enabled: ``False`` keeps only fault injection (for the overhead benchmark and ``RAILTRAIN_HEALTH=0``).
        log: prints on rank 0.
        settings_file: path re-read (by rank 0, broadcast) at every fingerprint interval, or ``""``.
    """

    def __init__(
        self, settings: contract.HealthSettings, faults: contract.Faults, model: nn.Module, *, rank: int, world_size: int,
        distributed: bool, device: torch.device, coordinates: list[Mapping[str, int]], node: str, registry: Any,
        enabled: bool = True, log: Callable[[str], None] = print, settings_file: str = "",
    ) -> None:  # fmt: skip
        self.settings, self.model, self.rank, self.world = settings, model, rank, world_size
        self.distributed, self.device, self.enabled, self.log = distributed, device, enabled, log
        self.node, self.nodes = node, [node] * world_size
        self.injector = FaultInjector(faults, rank)
        self.groups = stats.replica_groups(coordinates)
        self.metrics = HealthMetrics(registry)
        self.straggler = stats.StragglerDetector(world_size, settings.straggler_threshold, settings.straggler_window)
        self.loss_spikes = stats.SpikeDetector(settings.spike_threshold, ratio=settings.spike_ratio)
        self.grad_spikes = stats.SpikeDetector(settings.spike_threshold, ratio=settings.spike_ratio)
        self.progress, self.step_times = Progress(), deque(maxlen=50)
        self.settings_file, self._settings_mtime = settings_file, 0.0
        self.reference_kat: int | None = None
        self._last_kat = 0
        self.skipped = 0
        self._last_skip = -2
        self.forward_s = 0.0
        self._t0 = 0.0
        self._flagged: list[int] = []
        self._flagged_for = 0  # consecutive timing checks with the same flagged ranks
        self._timed = 0
        self._score_gauges: list[Any] = []  # railtrain_health_straggler_score's child per rank (looked up once)
        self.last_times: list[float] = []
        self._times: list[float] | None = None
        self.spent_s = 0.0
        """Wall seconds this rank spent in the health checks' own work in the current step (hooks, checks,
        gathers; not the watchdog thread); rank 0 writes it to --metrics-file as ``health_s``."""
        """The per-rank compute seconds of the last timing check (rank 0 adds them to --metrics-file)."""
        self.watchdog: Watchdog | None = None
        self._events: list[tuple[Any, Any]] = []
        self.across_groups: Callable[[list[int]], dict[int, list[int]] | None] | None = None
        """With replica groups (``spec.faultTolerance``): gathers a list of integers from this rank's counterpart in every
        group of the quorum, ``{group: values}`` (None when the gather failed: a peer left mid-way); set by the trainer
        (:meth:`railtrain.trainer.replica.ReplicaSync.gather`). :meth:`check_fingerprints` then compares the groups too."""
        self.replica_group = -1
        """This process's replica group (-1 without groups)."""
        if not enabled and not faults.any():
            return  # nothing to time or inject: no hooks at all (the "off" baseline of bench/health.py)
        model.register_forward_hook(self._post_forward)
        for module in timed_modules(model, (Attention, FeedForward)):
            module.register_forward_pre_hook(self._pre_compute)
            module.register_forward_hook(self._post_compute)


    # -- life cycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Gather the node names, run the first known-answer test, start the watchdog (collective)."""
        if self.distributed:
            names: list[Any] = [None] * self.world
            dist.all_gather_object(names, self.node)
            self.nodes = [str(n) for n in names]
        if not self.enabled:
            return
        self.check_known_answer(0)
        self.watchdog = Watchdog(open_store(self.distributed), self.rank, self.world, self.node, self.progress, self.step_times, lambda: self.settings)
        self.watchdog.publish()
        self.watchdog.start()
        s = self.settings
        self.log(
            f"health: on fingerprint_interval={s.fingerprint_interval} kat_interval={s.kat_interval} timing_interval={s.timing_interval} "
            f"replica_groups={len(self.groups)} straggler_threshold={s.straggler_threshold} hang_deadline=max({s.hang_factor}x median step, {s.hang_floor_s}s) hang_warmup={s.hang_warmup_s}s"
        )

    def stop(self, failed: bool = False) -> None:
        """Mark this rank done and stop the watchdog (idempotent); ``failed`` keeps the watchdog for :meth:`shared_hang`."""
        self.progress.mark(self.progress.step, "done")
        if self.watchdog is not None and not failed:
            try:
                self.watchdog.publish()
            except Exception:  # the store may already be gone
                pass
            self.watchdog.stop()
            self.watchdog = None

    def shared_hang(self) -> HealthVerdict | None:
        """The gang's hang verdict if a watchdog set one (a rank whose collective broke because a hung
        peer's process ended reports it instead of its own error), else ``None``."""
        found = self.watchdog.shared_verdict() if self.watchdog is not None else None
        if found is None:
            return None
        return HealthVerdict(contract.VERDICT_HANG, found["reason"], found["message"], found["nodes"], found["ranks"], found["step"], found["evidence"])

    def phase(self, step: int, name: str, at_least_s: float | None = None) -> None:
        """Record progress: ``name`` is e.g. ``checkpoint`` (see :data:`watchdog.SLOW_PHASES`); ``at_least_s``: the
        phase may last that long before it is a hang (:meth:`watchdog.Progress.mark`)."""
        self.progress.mark(step, name, at_least_s)

    # -- per step -------------------------------------------------------------------------------
    def begin_step(self, step: int) -> None:
        """Before the step's compute."""
        self.spent_s = 0.0
        t0 = time.perf_counter()
        self.forward_s = 0.0
        self._events.clear()
        self.progress.mark(step, "forward")
        self.injector.step = step
        self.injector.begin_step(step, self.model)
        self.spent_s += time.perf_counter() - t0

    def before_collective(self, step: int) -> None:
        """After forward/backward, before the step's next collective (marked as entered after the hang fault)."""
        self.injector.before_collective()
        self.progress.mark(step, "collective")

    def check_numeric(self, step: int, loss: float, grad_norm: float, local_loss: torch.Tensor, recompute: Callable[[], torch.Tensor]) -> bool:
        """NaN/Inf and spike check of the step's global loss and gradient norm, before the optimizer step.

        Args:
            step: the step.
            loss, grad_norm: global values (identical on every rank).
            local_loss: this rank's loss of the step (0-d tensor, before any collective).
            recompute: re-runs the step's forward/backward on the same micro-batch from the same parameters
                (gradients zeroed first) and returns the new local loss.

        Returns:
            ``True`` when the batch is to be skipped (a data anomaly, within the allowed count). A non-finite
            loss or gradient norm is never answered ``False``: it is skipped or ends the run.

        Raises:
            HealthVerdict: ``hardware-suspect`` (a rank's re-execution or known-answer test differs) or
                ``user-error``: ``DataAnomaly`` (a reproducible anomaly with action ``stop``, or too many skipped
                batches) or ``NonFiniteUpdate`` (a non-finite loss or gradient norm right after a skipped batch).
        """
        if not self.enabled:
            return False
        t0 = time.perf_counter()
        try:
            return self._check_numeric(step, loss, grad_norm, local_loss, recompute)
        finally:
            self.spent_s += time.perf_counter() - t0

    def _check_numeric(self, step: int, loss: float, grad_norm: float, local_loss: torch.Tensor, recompute: Callable[[], torch.Tensor]) -> bool:
        self.metrics.checks.labels("numeric").inc()
        z_loss, z_grad = self.loss_spikes.score(loss), self.grad_spikes.score(grad_norm)
        s = self.settings
        if not self.loss_spikes.is_anomaly(loss) and not self.grad_spikes.is_anomaly(grad_norm):
            self.loss_spikes.accept(loss)
            self.grad_spikes.accept(grad_norm)
            return False
        self.metrics.mismatches.labels("numeric").inc()
        self.metrics.reexecutions.inc()
        self.progress.mark(step, "rerun")
        first = _bits(local_loss)
        second = _bits(recompute())
        differs = int(first != second)
        kat_bad = self._known_answer_flag()
        flags = self._gather([differs, kat_bad], torch.int64)
        rerun_bad = [r for r in range(self.world) if flags[r][0]]
        kat_suspects = [r for r in range(self.world) if flags[r][1]]
        what = f"loss={loss:.6g} (z={z_loss:.1f}) grad_norm={grad_norm:.6g} (z={z_grad:.1f})"
        evidence = {"loss": json_number(loss), "grad_norm": json_number(grad_norm), "loss_z": json_number(z_loss), "grad_norm_z": json_number(z_grad)}
        if rerun_bad or kat_suspects:
            suspects = sorted(set(rerun_bad) | set(kat_suspects))
            reason = contract.REASON_RERUN_MISMATCH if rerun_bad else contract.REASON_KNOWN_ANSWER_MISMATCH
            raise self._verdict(
                contract.VERDICT_HARDWARE_SUSPECT, reason, step, suspects,
                f"step {step}: {what}; re-executing the step gave a different result on rank(s) {rerun_bad}, known-answer test differs on {kat_suspects}",
                evidence | {"rerun_differs": rerun_bad, "known_answer_differs": kat_suspects},
            )  # fmt: skip
        finite = math.isfinite(loss) and math.isfinite(grad_norm)
        if self._last_skip == step - 1:
            # two anomalous steps in a row: not one bad batch but the model itself (e.g. diverged parameters)
            if not finite:
                # a non-finite update is never applied (docs/health.md, "Non-finite updates"); a rerun from the
                # newest checkpoint would repeat it, so the run ends here, deterministically
                raise self._verdict(
                    contract.VERDICT_USER_ERROR, contract.REASON_NON_FINITE_UPDATE, step, [],
                    f"step {step}: {what} right after step {step - 1}'s, reproduced by re-execution: the model diverged "
                    "(not one bad batch, not hardware); no update was applied and no checkpoint holds it; "
                    "lower --lr or raise --warmup-steps, then resume from the newest checkpoint",
                    evidence | {"previous_step": step - 1},
                )  # fmt: skip
            # a finite spike: the update is applied (clipping bounds it)
            self.log(f"health: step {step}: {what} again right after a skipped batch: not the data; not skipping")
            return False
        self._last_skip = step
        self.skipped += 1
        self.metrics.skipped_batches.inc()
        if s.anomaly_action == "stop" or self.skipped > s.max_skipped_batches:
            why = "anomaly_action is stop" if s.anomaly_action == "stop" else f"more than {s.max_skipped_batches} batches skipped"
            raise self._verdict(
                contract.VERDICT_USER_ERROR, contract.REASON_DATA_ANOMALY, step, [],
                f"step {step}: {what}, reproduced by re-execution (a data problem, not hardware); stopping: {why}", evidence | {"skipped": self.skipped},
            )  # fmt: skip
        self.log(f"health: step {step}: {what} reproduced by re-execution: data, not hardware; skipping the batch ({self.skipped} of at most {s.max_skipped_batches})")
        return True

    def end_step(self, step: int, step_s: float) -> None:
        """After the optimizer step: timing gather, fingerprints and known-answer test when due.

        Raises:
            HealthVerdict: ``straggler`` (action ``stop``) or ``hardware-suspect``.
        """
        self.step_times.append(step_s)
        self.last_times = []
        if not self.enabled:
            return
        t0 = time.perf_counter()
        try:
            self._end_step(step)
        finally:
            self.spent_s += time.perf_counter() - t0

    def _end_step(self, step: int) -> None:
        s = self.settings
        if self.watchdog is not None:
            self.metrics.heartbeat_age.set(self.watchdog.age_s)
            self.metrics.hang_deadline.set(stats.hang_deadline(list(self.step_times), s.hang_factor, s.hang_floor_s))
        if self._times is not None:
            self.check_timing(step, self._times)
            self._times = None
        if step % s.fingerprint_interval == 0:
            self.check_fingerprints(step)
            self.reload_settings()
        if step % s.kat_interval == 0:
            self.check_known_answer(step)

    # -- detectors --------------------------------------------------------------------------------
    def timing_due(self, step: int) -> bool:
        """Whether this step's compute times are to be gathered (the trainer adds them to its loss all-reduce)."""
        return self.enabled and self.world > 1 and step % self.settings.timing_interval == 0

    def timing_vector(self) -> torch.Tensor:
        """A world-size vector holding this rank's compute seconds at its own index (zeros elsewhere)."""
        t0 = time.perf_counter()
        v = torch.zeros(self.world, dtype=torch.float32)
        v[self.rank] = self.compute_seconds()
        self.spent_s += time.perf_counter() - t0
        return v

    def record_times(self, times: list[float]) -> None:
        """Every rank's compute seconds of this step (the all-reduced :meth:`timing_vector`); judged in :meth:`end_step`."""
        self._times = times

    def check_timing(self, step: int, times: list[float] | None = None) -> None:
        """Update the straggler scores with every rank's compute seconds (gathered here if not given)."""
        self.metrics.checks.labels("timing").inc()
        if times is None:
            times = [row[0] for row in self._gather([self.compute_seconds()], torch.float64)]
        self.last_times = times
        self._timed += 1
        if self._timed <= WARMUP_SAMPLES:
            return  # the first steps time allocator and cache warm-up, not the device
        scores = self.straggler.add(times)
        if len(self._score_gauges) != len(scores):
            self._score_gauges = [self.metrics.straggler_score.labels(str(r)) for r in range(len(scores))]
        for gauge, score in zip(self._score_gauges, scores):
            gauge.set(score)
        flagged = self.straggler.flagged()
        self.metrics.stragglers.set(len(flagged))
        if flagged and flagged != self._flagged:
            self.metrics.mismatches.labels("timing").inc()
            self.log(
                f"health: step {step}: straggler rank(s) {flagged} on node(s) {[self.nodes[r] for r in flagged]} "
                f"score(s) {[round(scores[r], 3) for r in flagged]} (threshold {self.settings.straggler_threshold})"
            )
        self._flagged_for = self._flagged_for + 1 if flagged and flagged == self._flagged else int(bool(flagged))
        self._flagged = flagged
        s = self.settings
        costly = [r for r in flagged if self.straggler.throughput_cost(r) >= s.straggler_stop_share]
        if s.straggler_action == "stop" and costly and self._flagged_for >= STOP_PERSISTENCE:
            raise self._verdict(
                contract.VERDICT_STRAGGLER, contract.REASON_SLOW_RANK, step, costly,
                f"step {step}: rank(s) {costly} computed {[f'{scores[r]:+.0%}' for r in costly]} slower than the others' median over {s.straggler_window} samples",
                {"scores": {str(r): round(scores[r], 4) for r in flagged}, "throughput_cost": {str(r): round(self.straggler.throughput_cost(r), 4) for r in costly}},
            )  # fmt: skip

    def check_fingerprints(self, step: int) -> None:
        """Compare parameter fingerprints within each replica group (no-op without replication), and across the
        replica groups of ``spec.faultTolerance`` when :attr:`across_groups` is set (:meth:`_check_across_groups`).

        A group with a strict majority names the ranks that differ from it. A group without one
        (two replicas) cannot say which copy is wrong, so the step is re-examined on every rank:
        each rank hashes its parameters again (a rank whose second hash differs from its first is
        computing wrong now) and runs the known-answer test (a rank whose answer is wrong is
        consistently wrong). Only a rank those re-runs single out is named; when they single out
        none, the verdict names no rank and no node (docs/health.md, "Two replicas"): the gang
        restarts from its last checkpoint, where the replicas agree again, and no node is
        quarantined on evidence that does not point at it.

        Raises:
            HealthVerdict: ``hardware-suspect``/``ParameterMismatch`` when some group disagrees.
        """
        if self.groups:
            self._check_within_groups(step)
        if self.across_groups is not None:
            self._check_across_groups(step)

    def _check_within_groups(self, step: int) -> None:
        self.metrics.checks.labels("fingerprint").inc()
        first = model_fingerprint(self.model)
        prints = {r: row[0] for r, row in enumerate(self._gather([first], torch.int64))}
        found = stats.compare_fingerprints(self.groups, prints)
        if not found:
            return
        self.metrics.mismatches.labels("fingerprint").inc()
        self.progress.mark(step, "rerun")
        rows = self._gather([int(model_fingerprint(self.model) != first), self._known_answer_flag()], torch.int64)
        rehash = {r for r in range(self.world) if rows[r][0]}
        kat = {r for r in range(self.world) if rows[r][1]}
        suspects, unattributed = stats.attribute_mismatches(found, rehash, kat)
        evidence = {
            "groups": [{"ranks": list(d.group), "fingerprints": {str(r): f"{v:016x}" for r, v in d.values.items()}, "majority": d.decided} for d in found][:8],
            "rehash_differs": sorted(rehash), "known_answer_differs": sorted(kat), "unattributed": unattributed[:16],
        }  # fmt: skip
        if suspects:
            raise self._verdict(
                contract.VERDICT_HARDWARE_SUSPECT, contract.REASON_PARAMETER_MISMATCH, step, suspects,
                f"step {step}: parameter bytes of rank(s) {suspects} differ from their replicas'", evidence,
            )  # fmt: skip
        raise self._verdict(
            contract.VERDICT_HARDWARE_SUSPECT, contract.REASON_PARAMETER_MISMATCH, step, [],
            f"step {step}: parameter bytes of ranks {unattributed} differ, and with no majority among the replicas and no rank whose "
            f"re-hash or known-answer test is wrong, the evidence does not say which copy is wrong: no node named",
            evidence,
        )  # fmt: skip

    def _check_across_groups(self, step: int) -> None:
        """Compare this rank's parameter fingerprint with its counterparts in the other replica groups of the quorum
        (same rank, same layout: the same bytes when healthy), by the rule of :meth:`check_fingerprints` with groups in
        place of ranks: a strict majority of groups names the groups that differ; without one, each group re-hashes
        its bytes and runs the known-answer test, the groups exchange what they found, and only a group those re-runs
        single out is named. Every group reaches the same answer. A named group's ranks raise the verdict (naming
        this rank when its own re-run singled it out or it is its group's only process, else no rank: the
        corruption is shared by the whole group); the others log it and train on (the named group leaves the
        quorum and its replacement heals from a healthy group). When nothing singles a group out, every group raises
        it without a node (the job goes back to its last checkpoint, where the copies agree). A gather that fails (a
        group left mid-way) skips the check until the next interval.

        Raises:
            HealthVerdict: ``hardware-suspect``/``ParameterMismatch`` in a named group, or in every group when unattributed.
        """
        gather = self.across_groups
        assert gather is not None
        first = model_fingerprint(self.model)
        got = gather([first])
        if got is None or len(got) < 2:
            return
        self.metrics.checks.labels("fingerprint").inc()
        prints = {g: row[0] for g, row in got.items()}
        found = stats.compare_fingerprints([sorted(prints)], prints)
        if not found:
            return
        self.metrics.mismatches.labels("fingerprint").inc()
        self.progress.mark(step, "rerun")
        mine = [int(model_fingerprint(self.model) != first), self._known_answer_flag()]
        flags = gather(mine)
        if flags is None:
            return
        rehash = {g for g, row in flags.items() if row[0]}
        kat = {g for g, row in flags.items() if row[1]}
        named, unattributed = stats.attribute_mismatches(found, rehash, kat)
        evidence = {
            "replica_groups": {str(g): f"{v:016x}" for g, v in sorted(prints.items())}, "majority": found[0].decided,
            "rehash_differs": sorted(rehash), "known_answer_differs": sorted(kat), "rank": self.rank,
        }  # fmt: skip
        me = self.replica_group
        if named and me not in named:
            self.log(f"health: step {step}: replica group(s) {named} hold parameter bytes that differ from the other groups' "
                     f"(rank {self.rank}'s copies); they leave the quorum and heal from a healthy group")  # fmt: skip
            return
        if named:
            ranks = [self.rank] if any(mine) or self.world == 1 else []
            raise self._verdict(
                contract.VERDICT_HARDWARE_SUSPECT, contract.REASON_PARAMETER_MISMATCH, step, ranks,
                f"step {step}: replica group {me}'s parameter bytes (rank {self.rank}) differ from the other replica groups'"
                + ("" if ranks else "; every rank of the group holds them, so no one node is named"), evidence,
            )  # fmt: skip
        raise self._verdict(
            contract.VERDICT_HARDWARE_SUSPECT, contract.REASON_PARAMETER_MISMATCH, step, [],
            f"step {step}: the parameter bytes of replica groups {unattributed} differ (rank {self.rank}), and with no majority among "
            f"the groups and no group whose re-hash or known-answer test is wrong, the evidence does not say which copy is wrong: no node named",
            evidence,
        )  # fmt: skip

    def check_known_answer(self, step: int) -> None:
        """Run the known-answer test; the first run fixes the reference (the majority answer)."""
        self.metrics.checks.labels("known_answer").inc()
        self.progress.mark(step, "known-answer")
        flag = self._known_answer_flag()
        rows = self._gather([flag, self._last_kat], torch.int64)
        values = {r: row[1] for r, row in enumerate(rows)}
        if self.reference_kat is None:
            dissent = stats.odd_ones_out(values)
            majority = [v for r, v in values.items() if r not in dissent]
            self.reference_kat = majority[0] if majority else self._last_kat
            suspects = sorted(set(dissent) | {r for r, row in enumerate(rows) if row[0]})
        else:
            suspects = [r for r, row in enumerate(rows) if row[0]]
        if suspects:
            self.metrics.mismatches.labels("known_answer").inc()
            raise self._verdict(
                contract.VERDICT_HARDWARE_SUSPECT, contract.REASON_KNOWN_ANSWER_MISMATCH, step, suspects,
                f"step {step}: the known-answer test gave a wrong answer on rank(s) {suspects}",
                {"answers": {str(r): f"{v:016x}" for r, v in values.items()}, "reference": f"{self.reference_kat:016x}"},
            )  # fmt: skip

    def _known_answer_flag(self) -> int:
        """Run the test twice; 1 if the two runs differ or differ from the reference."""
        a = known_answer(self.device, corrupt=self.injector.corrupt_known_answer)
        b = known_answer(self.device, corrupt=self.injector.corrupt_known_answer)
        self._last_kat = a
        return int(a != b or (self.reference_kat is not None and a != self.reference_kat))

    # -- helpers -------------------------------------------------------------------------------------
    def _gather(self, values: list[float | int], dtype: torch.dtype) -> list[list[Any]]:
        """Every rank's ``values`` (one small all-gather of CPU tensors), indexed by rank."""
        mine = torch.tensor(values, dtype=dtype)
        if not self.distributed:
            return [mine.tolist()]
        out = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(out, mine)
        return [t.tolist() for t in out]

    def _verdict(self, verdict: str, reason: str, step: int, ranks: list[int], message: str, evidence: dict[str, Any]) -> HealthVerdict:
        nodes = sorted({self.nodes[r] for r in ranks if self.nodes[r]})
        named = ", ".join(f"rank {r} on node {self.nodes[r] or '?'}" for r in ranks)
        return HealthVerdict(verdict, reason, f"{message} ({named})" if named else message, nodes, ranks, step, evidence)
