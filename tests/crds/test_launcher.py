"""Issue 26 item 5 (validation half): torchrun's own restart flag in a railtrain job is refused with the reason.

Input: ``spec.command: [torchrun, --max-restarts=2, ...]``: torchrun's agents restart their node's workers on their
own and the gang hangs. ``railtrain validate`` and the operator (the same models: a job created with kubectl is Failed
with InvalidSpec, tests/crds/test_launcher_cluster.py) refuse every spelling torchrun accepts, with one sentence saying
that restarts are the operator's (spec.runPolicy.backoffLimit); ``PET_MAX_RESTARTS`` is refused by CEL too.
"""

from __future__ import annotations

import re

import pytest

from railtrain.crds import launcher, schema
from railtrain.crds.validation import ManifestError, parse_manifest

REASON = "restarts are the operator's"
TRAINER = ["-m", "railtrain.trainer", "--steps", "5"]


def manifest(**spec):
    return {"apiVersion": "railtrain.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "llm"},
            "spec": {"image": "img:1", "nodes": 2, "procsPerNode": 1} | spec}  # fmt: skip


REFUSED = [
    ({"command": ["torchrun", "--max-restarts=2", *TRAINER]}, "--max-restarts=2"),  # the input
    ({"command": ["torchrun", "--max_restarts=3", *TRAINER]}, "--max_restarts=3"),
    ({"command": ["torchrun", "--max-restarts", "2", *TRAINER]}, "--max-restarts 2"),
    ({"command": ["torchrun", "--max_restarts", "10", *TRAINER]}, "--max_restarts 10"),
    ({"command": ["torchrun"], "args": ["--nnodes=2", "--max-restarts=1", *TRAINER]}, "--max-restarts=1"),  # in spec.args
    ({"command": ["/usr/local/bin/torchrun", "--max-res=1", *TRAINER]}, "--max-res=1"),  # a path; a prefix argparse accepts
    ({"command": ["python", "-m", "torch.distributed.run", "--max-restarts=2", *TRAINER]}, "--max-restarts=2"),
    ({"command": ["python3", "-m", "torch.distributed.launch"], "args": ["--max_restarts", "4", *TRAINER]}, "--max_restarts 4"),
    ({"command": ["bash", "-c", "cd /w && exec torchrun --nnodes=2 \\\n  --max-restarts=$RESTARTS -m railtrain.trainer"]}, "--max-restarts=$RESTARTS"),
    ({"command": ["torchrun", "--max-restarts", "'2'", *TRAINER]}, "--max-restarts 2"),
]
ALLOWED = [
    {"command": ["torchrun", *TRAINER]},
    {"command": ["torchrun", "--max-restarts=0", *TRAINER]},
    {"command": ["torchrun", "--max_restarts", "00", *TRAINER]},
    {"command": ["python", "train.py", "--max-restarts=2"]},  # not torchrun: the script's own option
    {"command": ["mytorchrun", "--max-restarts=2"]},
    {"command": ["torchrun", "--maxi=2", *TRAINER]},  # not a prefix of the restart flag
    {"command": ["torchrun", "-m", "train", "--max-steps", "100", "--max_seq_len=4096"]},  # the script's other --max options
    {"args": ["--max-restarts=2"]},  # the image's ENTRYPOINT is not known here
    {"env": [{"name": "PET_MAX_RESTARTS", "value": "0"}]},
    {"env": [{"name": "PET_MAX_RESTARTS", "value": ""}]},
    {"env": [{"name": "PET_MAX_RESTARTS_X", "value": "4"}]},
]


@pytest.mark.parametrize("spec, flag", REFUSED)
def test_validate_refuses_torchruns_restart_flag_naming_it_and_the_reason(spec, flag):
    with pytest.raises(ManifestError) as err:
        parse_manifest(manifest(**spec))
    text = str(err.value)
    assert launcher.FLAG_MESSAGE in text and REASON in text and "spec.runPolicy.backoffLimit" in text, text
    assert f"found {flag!r}" in text, text


@pytest.mark.parametrize("spec", ALLOWED)
def test_validate_accepts_what_is_not_a_torchrun_restart(spec):
    parse_manifest(manifest(**spec))


def test_validate_refuses_the_restart_count_by_torchruns_environment_variable():
    with pytest.raises(ManifestError) as err:
        parse_manifest(manifest(command=["torchrun", *TRAINER], env=[{"name": "PET_MAX_RESTARTS", "value": "2"}]))
    assert launcher.ENV_MESSAGE in str(err.value) and "PET_MAX_RESTARTS='2'" in str(err.value)


def test_python_and_re2_read_the_one_expression_alike():
    """The rule's expression stays in the syntax both engines share: no look-around, no back-references, no possessive quantifiers."""
    for construct in ("(?=", "(?!", "(?<=", "(?<!", "\\1", "*+", "++"):
        assert construct not in launcher.RESTART_FLAG, construct
    re.compile(launcher.RESTART_FLAG)


def test_the_crd_refuses_the_environment_variable_and_leaves_the_flag_to_the_models():
    rules = schema.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"]
    by_message = {r["message"]: r for r in rules}
    assert by_message[launcher.ENV_MESSAGE]["rule"] == launcher.ENV_CEL and by_message[launcher.ENV_MESSAGE]["fieldPath"] == ".env"
    assert launcher.FLAG_MESSAGE not in by_message  # over the CRD's CEL cost budget: validate and the operator refuse it
