"""Where a command's manifest comes from: '-' is standard input, and unreadable inputs are one sentence each.

`submit -` against the real control plane is in test_cluster.py.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml
from typer.testing import CliRunner

from railtrain.cli import manifest
from railtrain.cli.main import app
from railtrain.crds import contract
from railtrain.crds.validation import ManifestError
from tests.cli import manifests

runner = CliRunner()
CLI = [sys.executable, "-m", "railtrain.cli.main"]
JOB = yaml.safe_dump(manifests.job(), sort_keys=False)


def _one_error(result) -> str:
    """The single error line of a failed command; asserts there is exactly one and no traceback."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    return lines[0]


# -- '-' reads standard input -------------------------------------------------

def test_validate_reads_stdin():
    result = runner.invoke(app, ["validate", "-"], input=JOB)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "<stdin>: valid TrainingJob tiny (2 nodes × 1 process, world size 2)"


def test_a_wrong_manifest_on_stdin_names_the_field():
    result = runner.invoke(app, ["validate", "-"], input=yaml.safe_dump(manifests.job(nodes="two")))
    assert result.exit_code == 1
    assert _one_error(result) == 'error: <stdin>: spec.nodes: must be an integer, not the string "two"'
    assert result.stdout == ""


STDIN_PROBLEMS = [
    # (case, bytes on stdin, the one error line)
    ("empty", b"", "error: <stdin>: empty input; pipe one TrainingJob manifest in (e.g. 'cat job.yaml | railtrain validate -'), or give a file instead of '-'"),
    ("only whitespace", b" \n\t\n", "error: <stdin>: empty input; pipe one TrainingJob manifest in (e.g. 'cat job.yaml | railtrain validate -'), or give a file instead of '-'"),
    ("only comments", b"# nothing here\n---\n", "error: <stdin>: holds no YAML document (it is empty or only comments); expected exactly one TrainingJob"),
    ("not YAML", b"apiVersion: railtrain.dev/v1alpha1\nspec: [unclosed\n", "error: <stdin>: not valid YAML at line 3, column 1: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence started at line 2, column 7)"),
    ("not UTF-8", b"kind: \xff\xfe\n", "error: <stdin>: not UTF-8 text (byte 0xff at offset 6); a manifest is YAML text"),
    ("not a mapping", b"- a\n- b\n", "error: <stdin>: (root): a TrainingJob manifest must be a YAML mapping with apiVersion, kind, metadata and spec"),
    (
        "two documents",
        (JOB + "---\n" + JOB).encode(),
        "error: <stdin>: holds 2 YAML documents; railtrain reads exactly one TrainingJob per manifest "
        "(run one command per document, or 'kubectl apply -f' for several objects)",
    ),
]


@pytest.mark.parametrize("case, data, expected", STDIN_PROBLEMS, ids=[c[0] for c in STDIN_PROBLEMS])
@pytest.mark.parametrize("command", [["validate", "-"], ["submit", "-"], ["run", "-", "--local"]], ids=["validate", "submit", "run"])
def test_bad_stdin_is_one_sentence_before_anything_else(case, data, expected, command, tmp_path):
    # submit gets a kubeconfig that does not exist: the manifest is refused before any connection is tried
    result = runner.invoke(app, [*command, *(["--kubeconfig", str(tmp_path / "none")] if command[0] == "submit" else [])], input=data)
    assert result.exit_code == 1, result.output
    assert _one_error(result) == expected


def test_a_leading_byte_order_mark_is_allowed():
    result = runner.invoke(app, ["validate", "-"], input=b"\xef\xbb\xbf" + JOB.encode())
    assert result.exit_code == 0, result.output


def test_update_check_with_the_stored_object_on_stdin(tmp_path):
    """`kubectl get tj tiny -o yaml | railtrain validate new.yaml --old -`: the gang shape cannot change unsuspended."""
    new = manifests.write(tmp_path / "new.yaml", manifests.job(nodes=4))
    result = runner.invoke(app, ["validate", str(new), "--old", "-"], input=JOB)
    assert result.exit_code == 1
    line = _one_error(result)
    assert line.startswith(f"error: {new}: spec.nodes") and "suspend" in line
    same = runner.invoke(app, ["validate", "-", "--old", str(manifests.write(tmp_path / "old.yaml", manifests.job()))], input=JOB)
    assert same.exit_code == 0, same.output


def test_file_and_old_cannot_both_be_stdin():
    result = runner.invoke(app, ["validate", "-", "--old", "-"], input=JOB)
    assert result.exit_code == 2
    assert _one_error(result) == "error: FILE and --old cannot both be '-': standard input holds one manifest; give one of them as a file"


def test_dot_slash_dash_is_a_file(tmp_path):
    (tmp_path / "-").write_text(yaml.safe_dump(manifests.job(name="dash")))
    proc = subprocess.run([*CLI, "validate", "./-"], cwd=tmp_path, input="", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "./-: valid TrainingJob dash (2 nodes × 1 process, world size 2)"


def test_a_real_pipe_and_a_closed_stdin():
    """The installed entry point with the operating system's stdin, not the test runner's stand-in."""
    piped = subprocess.run([*CLI, "validate", "-"], input=JOB, capture_output=True, text=True, timeout=60)
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.startswith("<stdin>: valid TrainingJob tiny")
    empty = subprocess.run([*CLI, "validate", "-"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert empty.returncode == 1
    assert empty.stderr.strip().startswith("error: <stdin>: empty input;") and "Traceback" not in empty.stderr


def test_the_loader_reads_a_text_stream_without_a_buffer():
    import io

    assert manifest.read("-", stdin=io.StringIO(JOB)).job().metadata.name == "tiny"
    with pytest.raises(ManifestError, match="empty input"):
        manifest.read("-", stdin=io.StringIO(""))


def test_run_local_from_stdin_resolves_relative_paths_against_the_current_directory(tmp_path):
    """A few real training steps with the manifest piped in from another folder: the relative checkpoint
    location lands under the directory railtrain ran in, as it does for a manifest file."""
    work = tmp_path / "work"
    work.mkdir()
    doc = manifests.job(
        name="stdin-run",
        command=["torchrun", "-m", "railtrain.trainer"],
        args=["--preset", "tiny", "--data", "pkg://email/*.py", "--steps", "4", "--seq-len", "32", "--log-every", "1", "--threads", "1"],
        checkpoint={"location": "runs/ckpt", "interval": 2},
    )
    proc = subprocess.run([*CLI, "run", "-", "--local"], cwd=work, input=yaml.safe_dump(doc), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"^\[rank 0\] step=4 ", proc.stdout, re.MULTILINE), proc.stdout
    assert "stdin-run: all 2 nodes succeeded" in " ".join(proc.stderr.split())
    ckpt = work / "runs" / "ckpt"
    assert ckpt.is_dir() and any(ckpt.iterdir())


def test_run_local_from_stdin_gives_the_process_the_absolute_checkpoint_dir(tmp_path):
    script = f"import os; print('DIR=' + os.environ[{contract.ENV_CHECKPOINT_DIR!r}])"
    doc = manifests.job(nodes=1, command=["python", "-c", script], checkpoint={"location": "rel/dir"})
    proc = subprocess.run([*CLI, "run", "-", "--local"], cwd=tmp_path, input=yaml.safe_dump(doc), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"[rank 0] DIR={tmp_path / 'rel' / 'dir'}" in proc.stdout


# -- files that cannot be read ------------------------------------------------

@pytest.mark.parametrize("command", [["validate"], ["submit"], ["run", "--local"], ["validate", "ok.yaml", "--old"]], ids=["validate", "submit", "run", "--old"])
def test_unreadable_manifest_paths_are_one_sentence(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)  # relative paths in the messages, as a person types them
    manifests.write(tmp_path / "ok.yaml", manifests.job())
    (tmp_path / "folder").mkdir()
    (tmp_path / "plain").write_text("x")
    (tmp_path / "binary.yaml").write_bytes(b"\x00\xff\xfe")
    cases = {
        "folder": "error: folder: is a directory; give the path of one manifest file",
        "plain/job.yaml": "error: plain/job.yaml: no such file (a part of the path before its name is a file, not a directory)",
        "nope.yaml": "error: nope.yaml: no such file",
        "binary.yaml": "error: binary.yaml: not UTF-8 text (byte 0xff at offset 1); a manifest is YAML text",
    }
    for path, expected in cases.items():
        args = [*command, path] if command[0] != "run" else ["run", path, "--local"]
        result = runner.invoke(app, [*args, *(["--kubeconfig", "none"] if command[0] == "submit" else [])])
        assert result.exit_code == 1, (path, result.output)
        assert _one_error(result) == expected
