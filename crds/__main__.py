"""``python -m railtrain.crds [--check]``: write (or check) crds/trainingjob.yaml."""

from __future__ import annotations

import sys

from railtrain.crds.schema import CRD_PATH, render


def main(argv: list[str] | None = None) -> int:
    """Write the generated CRD; with ``--check`` exit 1 when the file is stale instead."""
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    if "--check" in argv:
        if not CRD_PATH.exists() or CRD_PATH.read_text() != text:
            print(f"{CRD_PATH} is stale: run `python -m railtrain.crds`", file=sys.stderr)
            return 1
        return 0
    CRD_PATH.write_text(text)
    print(f"wrote {CRD_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
