"""``--help`` of every command: ``-h`` works too, and value placeholders read like a command line's (finding 8 of the new-user trial)."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from railtrain.cli.main import app

runner = CliRunner()
COMMANDS = [[], ["validate"], ["run"], ["submit"], ["get"], ["describe"], ["logs"], ["delete"], ["suspend"], ["resume"], ["plan"], ["snapshot"],
            ["operator"], ["dev", "up"], ["dev", "down"], ["node", "list"], ["node", "clear"], ["data", "tokenize"]]
INTERNAL = re.compile(r"<(bool|str|int|float|path|list\[[a-z]+\])[^>]*>|\{[a-z]+\}|\{FILE\}|range>")


@pytest.mark.parametrize("words", COMMANDS, ids=lambda w: " ".join(w) or "railtrain")
def test_dash_h_is_help_and_shows_no_python_types(words):
    long = runner.invoke(app, [*words, "--help"], env={"COLUMNS": "200"})
    short = runner.invoke(app, [*words, "-h"], env={"COLUMNS": "200"})
    assert long.exit_code == 0 and short.exit_code == 0, short.output
    assert short.stdout == long.stdout
    assert "Usage: railtrain" in long.stdout
    assert not INTERNAL.search(long.stdout), INTERNAL.search(long.stdout).group(0)


def test_placeholders_name_what_to_give():
    run = runner.invoke(app, ["run", "-h"], env={"COLUMNS": "200"}).stdout
    assert "Usage: railtrain run [OPTIONS] FILE" in run
    assert re.search(r"--local\s+Run the gang", run)  # a flag takes no value
    assert re.search(r"--grace\s+NUMBER \[x>=0\]", run)
    get = runner.invoke(app, ["get", "-h"], env={"COLUMNS": "200"}).stdout
    assert "Usage: railtrain get [OPTIONS] [NAME]" in get
    assert re.search(r"--kubeconfig\s+FILE", get) and re.search(r"--output\s+-o\s+table\|json\|yaml", get)
    up = runner.invoke(app, ["dev", "up", "-h"], env={"COLUMNS": "200"}).stdout
    assert re.search(r"--nodes\s+COUNT \[x>=1\]", up) and re.search(r"--load\s+IMAGE", up)


@pytest.mark.parametrize("words", [w for w in COMMANDS if w], ids=" ".join)
def test_every_command_shows_an_example_uncut_at_80_columns(words):
    """Each command's help has an 'Example: railtrain ...' line, and nothing in it is cut with an ellipsis at 80 columns."""
    text = runner.invoke(app, [*words, "--help"], env={"COLUMNS": "80"}).stdout
    assert re.search(r"Example: (eval \"\$\()?railtrain " + " ".join(words), text), text
    assert "…" not in text, [line for line in text.splitlines() if "…" in line]
    assert max(len(line) for line in text.splitlines()) <= 80


def test_install_completion_writes_the_bash_script(tmp_path):
    """`railtrain --install-completion` typed at a bash prompt installs completion (a script sourced from ~/.bashrc) and
    command names complete. Typer finds the shell among the command's parent processes (shellingham), not from an
    argument: run from a process with no bash above it (a CI run whose shell had exited) it answers "Shell None is not
    supported", so the command runs under a bash of its own here (a second command, `exit $?`, keeps bash from exec-ing it)."""
    import os
    import subprocess
    import sys

    from pathlib import Path

    railtrain = str(Path(sys.executable).parent / "railtrain")  # the installed script: completion is keyed by the program's name
    env = {**os.environ, "HOME": str(tmp_path)}
    done = subprocess.run(["bash", "-c", f"'{railtrain}' --install-completion; exit $?"], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and "bash completion installed" in done.stdout, done.stdout + done.stderr
    script = tmp_path / ".bash_completions" / "railtrain.sh"
    assert "_RAILTRAIN_COMPLETE" in script.read_text() and str(script) in (tmp_path / ".bashrc").read_text()
    words = subprocess.run([railtrain], capture_output=True, text=True,
                           env={**env, "_RAILTRAIN_COMPLETE": "complete_bash", "COMP_WORDS": "railtrain desc", "COMP_CWORD": "1"})
    assert words.stdout.split() == ["describe"]


def test_job_name_completion_is_quiet_without_a_cluster(tmp_path):
    import os
    import subprocess
    import sys

    from pathlib import Path

    env = {**os.environ, "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "none"), "_RAILTRAIN_COMPLETE": "complete_bash",
           "COMP_WORDS": "railtrain describe ", "COMP_CWORD": "2"}
    done = subprocess.run([str(Path(sys.executable).parent / "railtrain")], capture_output=True, text=True, env=env)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "", "")
