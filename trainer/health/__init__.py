"""The trainer's health checks: silent data corruption, stragglers and hangs (docs/health.md).

- :mod:`.stats`: pure statistics (fingerprint majority, straggler score, spike detector, hang deadline).
- :mod:`.fingerprint`: bitwise parameter fingerprints and the known-answer test (torch, no collectives).
- :mod:`.faults`: fault injection from the pod contract's ``RAILTRAIN_FAULT_*`` variables.
- :mod:`.watchdog`: heartbeats through the rendezvous store and the hang watchdog thread.
- :mod:`.monitor`: the per-step wiring the trainer calls (gathers, re-execution, verdicts).
- :mod:`.timing`, :mod:`.reload`, :mod:`.verdict`: parts of the monitor (compute-timing hooks, live
  settings file, :class:`~.verdict.HealthVerdict` and the collective timeout).

Findings leave the pod as termination-message verdicts (:mod:`railtrain.crds.contract`).
"""
