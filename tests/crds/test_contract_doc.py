"""docs/contract.md lists every name of the pod contract: a variable, label, annotation, exit code, verdict or
reason the code gains without a line in the document fails here, and so does a ``RAILTRAIN_*`` variable the
document names that the code no longer has."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from railtrain.crds import contract, fabric, supervisor, threads

DOC = (Path(__file__).resolve().parents[2] / "docs" / "contract.md").read_text()
PREFIXES = ("ENV_", "LABEL_", "ANNOTATION_", "REASON_", "VERDICT_")


def contract_names() -> dict[str, str]:
    """Every pod-facing name the contract module defines (``{python name: value}``), health variables included."""
    names = {n: getattr(contract, n) for n in dir(contract) if n.startswith(PREFIXES) and isinstance(getattr(contract, n), str)}
    names |= {"SCHEDULING_GATE": contract.SCHEDULING_GATE, "MANAGED_BY": contract.MANAGED_BY}
    names |= {f"health:{f.name}": contract.health_variable(f.name) for f in fields(contract.HealthSettings)}
    names |= {"fabric.ANNOTATION_PROFILE": fabric.ANNOTATION_PROFILE, "fabric.NODE_HCAS": fabric.NODE_HCAS, "threads.ENV_OMP_WAIT_POLICY": threads.ENV_OMP_WAIT_POLICY}
    names |= {f"supervisor.{n}": getattr(supervisor, n) for n in dir(supervisor) if n.startswith("ENV_") and getattr(supervisor, n).startswith("RAILTRAIN_")}
    return names


def test_every_contract_name_is_in_the_document():
    missing = {n: v for n, v in contract_names().items() if f"`{v}`" not in DOC}
    assert missing == {}, f"docs/contract.md does not list: {missing}"


def test_every_exit_code_is_in_the_document():
    codes = {n: getattr(contract, n) for n in dir(contract) if n.startswith("EXIT_")}
    assert codes, "the contract defines exit codes"
    for name, code in codes.items():
        assert re.search(rf"^\| {code} \| `{name}` \|", DOC, re.MULTILINE), f"docs/contract.md's exit-code table lacks {code} {name}"


def test_every_variable_the_document_names_exists():
    known = set(contract_names().values()) | {fabric.ENV_PROFILE}
    named = set(re.findall(r"\bRAILTRAIN_[A-Z0-9_]*[A-Z0-9]\b", DOC))
    assert named - known == set()


def test_the_termination_message_keys_are_the_verdict_keys():
    keys = set(re.findall(r"^\| `([a-z]+)` \| ", DOC.split("## The termination message", 1)[1].split("Verdicts (", 1)[0], re.MULTILINE))
    assert keys == set(contract.Verdict.__annotations__)
