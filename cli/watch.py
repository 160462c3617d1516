"""``railtrain submit --wait``: follow a job until it ends, live on a terminal, as lines elsewhere.

:func:`follow_job` reads the job through a watch
(:func:`railtrain.cli.k8s_jobs.watch_job`), so a phase that lasts less than a
second is still seen. Every condition that changes is printed as one line with the time;
on a terminal a live area under those lines shows the phase, age, restarts and
the progress bar of ``status.progress`` (:func:`railtrain.cli.describe.live_view`).
It returns the exit status: 0 when the job Succeeded, 1 when it Failed (the last
line names the cause: :func:`railtrain.cli.describe.failure_sentence`) or was
deleted, 1 as soon as the operator says the job can never fit the cluster's nodes as they are (it stays
Pending), 130 after Ctrl-C, which leaves the job as it is and says its phase.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

from rich.console import Console
from rich.live import Live
from rich.text import Text

from railtrain.cli.describe import condition_changes, duration, failure_sentence, live_view
from railtrain.cli.errors import CliError
from railtrain.crds import contract

RETRY_S = 2.0
"""Seconds between attempts to watch the job again after an error."""
ERROR_PATIENCE_S = 60.0
"""How long the API server may fail to answer before ``--wait`` gives up (the job itself is untouched)."""


def follow_job(
    open_stream: Callable[[], Iterator[dict[str, Any] | None]], console: Console, name: str, clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
) -> int:
    """Follow one job until it is Succeeded or Failed.

    Args:
        open_stream: starts a stream of the job: the object as it is, then after every change, and ``None`` as a
            clock tick (:func:`railtrain.cli.k8s_jobs.watch_job`); raises :class:`CliError`. Opened again after an error.
        console: where the lines and the live area go (live only when it is a terminal).
        name: the job's name, for the sentences.
        clock: the current time (UTC), for ages and ETAs.

    Returns:
        0 (Succeeded), 1 (Failed, deleted, or can never fit: :func:`never_fits`), 130 (Ctrl-C: the job keeps
        its phase, which the last line says).

    Raises:
        CliError: the API server did not answer for :data:`ERROR_PATIENCE_S`.
    """
    live = Live(console=console, auto_refresh=False, transient=True) if console.is_terminal else None
    previous: dict[str, Any] | None = None
    failing_since: float | None = None
    started = time.monotonic()
    try:
        if live is not None:
            live.start()
        while True:
            try:
                for job in open_stream():
                    failing_since = None
                    now = clock()
                    if job is None:  # a tick: the ages and the ETA move on
                        if live is not None and previous is not None:
                            live.update(live_view(previous, now), refresh=True)
                        continue
                    for change in condition_changes(previous, job):
                        _say(console, live, Text(f"{now:%H:%M:%S} {change}", style="bold" if change.startswith("phase") else "dim"))
                    previous = job
                    if (end := _ending(job, name, time.monotonic() - started)) is not None:
                        _stop(live)
                        console.print(end[1], soft_wrap=True)
                        return end[0]
                    if live is not None:
                        live.update(live_view(job, now), refresh=True)
            except CliError as err:
                if any("not found" in m for m in err.messages):
                    _stop(live)
                    console.print(Text(f"trainingjob {name} was deleted while it was followed", style="red"), soft_wrap=True)
                    return 1
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > ERROR_PATIENCE_S:
                    raise
                time.sleep(RETRY_S)
    except KeyboardInterrupt:
        _stop(live)
        console.print(_interrupted(previous, name), soft_wrap=True)
        return 130
    finally:
        _stop(live)


def _ending(job: dict[str, Any], name: str, followed_s: float) -> tuple[int, Text] | None:
    """How following ends on this sight of ``job``: ``(exit status, last line)``, or None while it goes on.

    0 with how long it was followed (``followed_s``, seconds) when it Succeeded; 1 with the cause
    (:func:`railtrain.cli.describe.failure_sentence`) when it Failed; 1 when the operator says it can never fit
    (:func:`never_fits`), the job staying as it is.
    """
    phase = (job.get("status") or {}).get("phase")
    if phase == "Succeeded":
        return 0, Text(f"trainingjob {name} succeeded (followed for {duration(followed_s)})", style="green")
    if phase == "Failed":
        return 1, Text(failure_sentence(job) or f"trainingjob {name} failed", style="red")
    if (why := never_fits(job)) is not None:
        return 1, Text(f"stopped following; trainingjob {name} stays {phase or 'Pending'}: {why} ('railtrain delete {name}' removes it)", style="red")
    return None


def _interrupted(job: dict[str, Any] | None, name: str) -> Text:
    """The last line after Ctrl-C: following stopped, and the phase the job (as last seen, or None) keeps."""
    phase = ((job or {}).get("status") or {}).get("phase")
    state = {None: "keeps running", "Running": "keeps running", "Pending": "keeps waiting (Pending)"}.get(phase, f"keeps its phase ({phase})")
    return Text(f"stopped following; trainingjob {name} {state} ('railtrain delete {name}' stops it)", style="yellow")


def never_fits(job: dict[str, Any]) -> str | None:
    """The operator's sentence that ``job`` can never fit the cluster's nodes as they are, or None.

    Args:
        job: the TrainingJob as the server returns it.

    Returns:
        The message of its Scheduled=False condition when that message says it is permanent
        (:data:`~railtrain.crds.contract.PERMANENT_MARKERS`: operator/scheduling/placement.py writes ``NEVER_FITS`` when too few
        nodes, or no required domain, are big enough even when empty, or a topology level or NVLink domain the
        operator does not know is asked for; operator/job/phases/gang_timeout.py writes ``NEVER_STARTS`` when the pods'
        image reference cannot start anywhere);
        None while it waits for capacity, or once it is scheduled.
    """
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Scheduled" and c.get("status") == "False" and any(m in (c.get("message") or "") for m in contract.PERMANENT_MARKERS):
            return str(c["message"])
    return None


def _say(console: Console, live: Live | None, line: Text) -> None:
    """Print a line above the live area (or as plain output without one)."""
    (live.console if live is not None else console).print(line, soft_wrap=True)  # one line each, for logs and pipelines


def _stop(live: Live | None) -> None:
    if live is not None and live.is_started:
        live.stop()
