"""``railtrain submit --wait``: follow a job until it ends, live on a terminal, as lines elsewhere.

:func:`follow_job` polls the job once per ``interval`` (a ``get``, cheap for the
API server; a watch would need re-listing on every expiry for the same
result). Every condition that changes is printed as one line with the time;
on a terminal a live area under those lines shows the phase, age, restarts and
the progress bar of ``status.progress`` (:func:`railtrain.cli.describe.live_view`).
It returns the exit status: 0 when the job Succeeded, 1 when it Failed (the last
line names the cause: :func:`railtrain.cli.describe.failure_sentence`) or was
deleted, 130 after Ctrl-C, which leaves the job running and says so.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Callable

from rich.console import Console
from rich.live import Live
from rich.text import Text

from railtrain.cli.describe import condition_changes, duration, failure_sentence, live_view
from railtrain.cli.errors import CliError

ERROR_PATIENCE_S = 60.0
"""How long the API server may fail to answer before ``--wait`` gives up (the job itself is untouched)."""


def follow_job(
    read: Callable[[], dict[str, Any]],
    console: Console,
    name: str,
    interval: float = 1.0,
    clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
) -> int:
    """Follow one job until it is Succeeded or Failed.

    Args:
        read: returns the job as the API server has it now (raises :class:`CliError`).
        console: where the lines and the live area go (live only when it is a terminal).
        name: the job's name, for the sentences.
        interval: seconds between reads.
        clock: the current time (UTC), for ages and ETAs.

    Returns:
        0 (Succeeded), 1 (Failed, or deleted), 130 (Ctrl-C: the job keeps running).

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
                job = read()
                failing_since = None
            except CliError as err:
                if any("not found" in m for m in err.messages):
                    _say(console, live, Text(f"trainingjob {name} was deleted while it was followed", style="red"))
                    return 1
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > ERROR_PATIENCE_S:
                    raise
                time.sleep(interval)
                continue
            now = clock()
            for change in condition_changes(previous, job):
                _say(console, live, Text(f"{now:%H:%M:%S} {change}", style="dim" if not change.startswith("phase") else "bold"))
            previous = job
            phase = (job.get("status") or {}).get("phase")
            if phase == "Succeeded":
                _stop(live)
                console.print(Text(f"trainingjob {name} succeeded (followed for {duration(time.monotonic() - started)})", style="green"), soft_wrap=True)
                return 0
            if phase == "Failed":
                _stop(live)
                console.print(Text(failure_sentence(job) or f"trainingjob {name} failed", style="red"), soft_wrap=True)
                return 1
            if live is not None:
                live.update(live_view(job, now), refresh=True)
            time.sleep(interval)
    except KeyboardInterrupt:
        _stop(live)
        console.print(Text(f"stopped following; trainingjob {name} keeps running ('railtrain delete {name}' stops it)", style="yellow"), soft_wrap=True)
        return 130
    finally:
        _stop(live)


def _say(console: Console, live: Live | None, line: Text) -> None:
    """Print a line above the live area (or as plain output without one)."""
    (live.console if live is not None else console).print(line, soft_wrap=True)  # one line each, for logs and pipelines


def _stop(live: Live | None) -> None:
    if live is not None and live.is_started:
        live.stop()
