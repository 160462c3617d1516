"""Polling with a deadline, shared by the control-plane tests (tests/) and the end-to-end suite (e2e/)."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float = 60.0, what: str = "condition", interval: float = 0.25) -> T:
    """Poll ``check()`` every ``interval`` seconds until it returns a truthy value or ``timeout`` seconds pass.

    Unlike :func:`railtrain.cli.controlplane.wait_until`, an exception raised by
    ``check`` propagates at once: in a test, an API error is a failure, not "not yet".

    Returns:
        The first truthy value ``check()`` returned.

    Raises:
        AssertionError: the deadline passed; the message names ``what`` and the last value seen.
    """
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last value: {last!r}")
