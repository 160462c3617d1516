"""Live health settings: re-read :data:`railtrain.crds.contract.ENV_HEALTH_FILE` while the job runs.

:class:`SettingsReload` is a part of :class:`~railtrain.trainer.health.monitor.HealthMonitor`
(a mixin over its state: ``settings``, ``settings_file``, ``_settings_mtime``, ``rank``,
``distributed``, ``world``, ``straggler``, ``loss_spikes``, ``grad_spikes``, ``log``).
"""

from __future__ import annotations

import json
import os
from typing import Any

import torch.distributed as dist

from railtrain.crds import contract
from railtrain.crds.process import say
from railtrain.trainer.health import stats


class SettingsReload:
    """Applies a changed settings file to the monitor's detectors, identically on every rank."""

    def reload_settings(self) -> None:
        """Re-read the settings file (rank 0 reads, every rank gets the same via a broadcast)."""
        if not self.settings_file:
            return
        payload: list[Any] = [None]
        if self.rank == 0:
            try:
                mtime = os.stat(self.settings_file).st_mtime
                if mtime != self._settings_mtime:
                    with open(self.settings_file) as fh:
                        payload[0] = contract.health_from_mapping(json.load(fh), self.settings, where=self.settings_file)
                    self._settings_mtime = mtime
            except (OSError, ValueError) as err:  # a bad file keeps the current settings
                say(f"health: warning: {self.settings_file}: {err}; settings unchanged")
        if self.distributed:
            dist.broadcast_object_list(payload, src=0)
        if payload[0] is not None and payload[0] != self.settings:
            self.settings = new = payload[0]
            self.straggler.threshold = new.straggler_threshold
            for detector in (self.loss_spikes, self.grad_spikes):
                detector.threshold, detector.ratio = new.spike_threshold, new.spike_ratio
            if new.straggler_window != self.straggler.window:
                self.straggler = stats.StragglerDetector(self.world, new.straggler_threshold, new.straggler_window)
            self.log(f"health: settings changed from {self.settings_file}: {new}")
