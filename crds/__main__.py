"""``python -m railtrain.crds [--check]``: write (or check) crds/trainingjob.yaml and the Helm chart's copy."""

from __future__ import annotations

import sys

from railtrain.crds.schema import CRD_PATH, HELM_CRD_PATH, render


def main(argv: list[str] | None = None) -> int:
    """Write the generated CRD; with ``--check`` exit 1 when the file is stale instead."""
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    # The chart's copy exists only in a source checkout.
    targets = [CRD_PATH] + ([HELM_CRD_PATH] if HELM_CRD_PATH.parent.is_dir() else [])
    if "--check" in argv:
        stale = [p for p in targets if not p.exists() or p.read_text() != text]
        for p in stale:
            print(f"{p} is stale: run `python -m railtrain.crds`", file=sys.stderr)
        return 1 if stale else 0
    for p in targets:
        p.write_text(text)
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
