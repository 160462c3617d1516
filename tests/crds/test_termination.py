"""The termination message: the trainer's verdict, written by the pod and read back by the operator."""

import json

import pytest

from railtrain.crds import contract


@pytest.mark.parametrize("verdict", contract.VERDICTS)
def test_round_trip(verdict):
    text = contract.format_termination_message(verdict, "InvalidConfiguration", "--steps must be >= 1, got 0")
    assert contract.parse_termination_message(text) == {
        "verdict": verdict, "reason": "InvalidConfiguration", "message": "--steps must be >= 1, got 0",
        "nodes": [], "ranks": [], "step": None, "evidence": {},
    }  # fmt: skip
    assert contract.parse_termination_message(text + "\n") is not None  # kubelet may keep a trailing newline


def test_long_messages_fit_the_kubelet_limit():
    text = contract.format_termination_message(contract.VERDICT_RETRYABLE, "Crash", "é" * 10_000)
    assert len(text.encode()) <= contract.TERMINATION_MESSAGE_MAX_BYTES
    parsed = contract.parse_termination_message(text)
    assert parsed is not None and parsed["message"].endswith("...")


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "Traceback (most recent call last):\n  File ...",  # FallbackToLogsOnError: the log tail
        json.dumps({"verdict": "maybe", "reason": "X", "message": ""}),
        json.dumps({"verdict": "retryable", "reason": "not camel", "message": ""}),
        json.dumps({"verdict": "retryable", "reason": "Crash", "message": 3}),
        json.dumps(["retryable"]),
    ],
)
def test_anything_else_is_no_verdict(text):
    assert contract.parse_termination_message(text) is None


def test_bad_verdicts_are_refused_at_the_source():
    with pytest.raises(ValueError, match="verdict must be one of"):
        contract.format_termination_message("fatal", "Crash", "")
    with pytest.raises(ValueError, match="CamelCase"):
        contract.format_termination_message("retryable", "crash_loop", "")


def test_written_only_where_the_kubelet_collects_it(tmp_path):
    path = tmp_path / "termination-log"
    environ = {contract.ENV_TERMINATION_MESSAGE_PATH: str(path)}
    assert contract.write_termination_message("user-error", "InvalidConfiguration", "bad", environ) is False
    assert not path.exists()
    path.write_text("")  # what the kubelet does before the container starts
    assert contract.write_termination_message("user-error", "InvalidConfiguration", "bad", environ) is True
    assert contract.parse_termination_message(path.read_text())["verdict"] == "user-error"
