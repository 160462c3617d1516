"""railtrain.crds.process.say: a pod's processes share one pipe, so each line they write must arrive whole.

A CI run (stop 46's) read ``... from attempt 1 on at 127.0.0.1:41769step=29`` from a local gang: the supervisor's
line and a worker's step line written to the same pipe under ``PYTHONUNBUFFERED=1``, where :func:`print` writes the
text and its newline as two calls. The runner took ``41769step=29`` for the moved coordinator's port and the hot spare
it started failed with a ValueError. The fix is at the root: every line a pod-side process writes goes out in one
``write`` (:func:`say`); these tests hold that.
"""

from __future__ import annotations

import ast
import io
from pathlib import Path

from railtrain.crds.process import say

ROOT = Path(__file__).resolve().parents[2]
POD_SIDE = [ROOT / "crds" / "supervisor.py", ROOT / "crds" / "coordinator.py", *sorted((ROOT / "trainer").rglob("*.py"))]
"""Code that runs in a training pod beside other processes on one pipe: the supervisor, its coordinator, the trainer."""


class Recorder(io.RawIOBase):
    """A raw stream that keeps every ``write`` call's bytes apart, as a pipe's reader would see them interleave."""

    def __init__(self) -> None:
        self.calls: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # type: ignore[override]
        self.calls.append(bytes(b))
        return len(b)


def unbuffered() -> tuple[Recorder, io.TextIOWrapper]:
    """A text stream as ``PYTHONUNBUFFERED=1`` makes standard error: every text write goes straight to the raw stream."""
    raw = Recorder()
    return raw, io.TextIOWrapper(raw, encoding="utf-8", write_through=True)  # type: ignore[arg-type]


def test_say_writes_the_line_and_its_newline_in_one_call():
    raw, stream = unbuffered()
    say("railtrain supervisor (rank 1): this supervisor hosts it from attempt 1 on at 127.0.0.1:41769", stream)
    say("step=29", stream)
    assert raw.calls == [b"railtrain supervisor (rank 1): this supervisor hosts it from attempt 1 on at 127.0.0.1:41769\n", b"step=29\n"]


def test_print_on_the_same_stream_splits_the_line_from_its_newline():
    """Why :func:`say` exists: on such a stream :func:`print` makes two calls, and another process may write between them."""
    raw, stream = unbuffered()
    print("step=29", file=stream, flush=True)
    assert raw.calls == [b"step=29", b"\n"]


def test_no_pod_side_module_prints():
    """Every line the supervisor, its coordinator and the trainer write goes through :func:`say` (one write per line);
    on the old code 25 ``print`` calls in these modules wrote lines as two calls."""
    printing = []
    for path in POD_SIDE:
        tree = ast.parse(path.read_text(), filename=str(path))
        printing += [f"{path.relative_to(ROOT)}:{node.lineno}" for node in ast.walk(tree)
                     if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"]  # fmt: skip
    assert printing == [], f"print() in pod-side code (write each line with railtrain.crds.process.say): {printing}"
