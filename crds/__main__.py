"""``python -m railtrain.crds [--check]``: write (or check) crds/trainingjob.yaml, the Helm chart's copy and the chart's record of it.

The chart's ``Chart.yaml`` records the SHA-256 of the CRD it ships (annotation
:data:`CRD_SHA_ANNOTATION`); whenever the generated CRD changes, writing it also
moves the chart's ``version`` (patch + 1) and the record, so a chart that ships
a new schema never keeps an old chart version (tests/helm/test_chart.py holds
the record and the CRD in step).
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

from railtrain.crds.schema import CRD_PATH, HELM_CRD_PATH, render

CHART_PATH = HELM_CRD_PATH.parents[1] / "Chart.yaml"
CRD_SHA_ANNOTATION = "railtrain.dev/crd-sha256"
_SHA_LINE = re.compile(r'^(  railtrain\.dev/crd-sha256: )"?([0-9a-f]*)"?$', re.M)
_VERSION_LINE = re.compile(r"^version: (\d+)\.(\d+)\.(\d+)$", re.M)


def crd_sha256(text: str) -> str:
    """The hex SHA-256 of the CRD's YAML text (UTF-8), as Chart.yaml records it."""
    return hashlib.sha256(text.encode()).hexdigest()


def recorded_sha256(chart: Path) -> str | None:
    """The CRD hash a Chart.yaml records (annotation :data:`CRD_SHA_ANNOTATION`), or None when it records none."""
    found = _SHA_LINE.search(chart.read_text())
    return found.group(2) if found else None


def record_in_chart(chart: Path, text: str) -> bool:
    """Record the CRD ``text`` in ``chart`` (a Chart.yaml), moving the chart's patch version when the recorded hash differs.

    Args:
        chart: the chart's Chart.yaml; it must have a ``version: X.Y.Z`` line
            and the annotation line :data:`CRD_SHA_ANNOTATION` under ``annotations:``.
        text: the CRD as written into the chart.

    Returns:
        True when the chart was changed (new hash, version + 0.0.1), False when it already recorded ``text``.

    Raises:
        ValueError: the Chart.yaml lacks either line.
    """
    source = chart.read_text()
    sha = crd_sha256(text)
    found, version = _SHA_LINE.search(source), _VERSION_LINE.search(source)
    if found is None or version is None:
        raise ValueError(f"{chart} needs a 'version: X.Y.Z' line and an annotation '{CRD_SHA_ANNOTATION}: <sha256>'")
    if found.group(2) == sha:
        return False
    major, minor, patch = (int(v) for v in version.groups())
    source = _VERSION_LINE.sub(f"version: {major}.{minor}.{patch + 1}", source, count=1)
    source = _SHA_LINE.sub(lambda m: f'{m.group(1)}"{sha}"', source, count=1)
    chart.write_text(source)
    return True


def main(argv: list[str] | None = None) -> int:
    """Write the generated CRD (and record it in the chart, :func:`record_in_chart`); with ``--check`` exit 1 when a file is stale instead."""
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    # The chart's copy exists only in a source checkout.
    targets = [CRD_PATH] + ([HELM_CRD_PATH] if HELM_CRD_PATH.parent.is_dir() else [])
    if "--check" in argv:
        stale = [p for p in targets if not p.exists() or p.read_text() != text]
        if CHART_PATH.exists() and recorded_sha256(CHART_PATH) != crd_sha256(text):
            stale.append(CHART_PATH)
        for p in stale:
            print(f"{p} is stale: run `python -m railtrain.crds`", file=sys.stderr)
        return 1 if stale else 0
    for p in targets:
        p.write_text(text)
        print(f"wrote {p}")
    if CHART_PATH.exists() and record_in_chart(CHART_PATH, text):
        print(f"wrote {CHART_PATH}: a new CRD, so a new chart version")
    return 0


if __name__ == "__main__":
    sys.exit(main())
