"""Locate (and, when the cache is cold, build) the control-plane binaries.

``install.sh`` next to this module builds etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, kubectl, kwok and kwokctl from the Go
module proxy into a cache folder keyed by their versions, and copies kwok's
default Stages out of the kwok module. A warm cache makes it a no-op.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

INSTALL_SCRIPT = Path(__file__).with_name("install.sh")
BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
    "kwokctl",
)
"""Executables ``ensure_binaries()`` guarantees in the directory it returns."""


class BinariesError(RuntimeError):
    """The control-plane binaries could not be built or are incomplete."""


def cache_root() -> Path:
    """The railtrain cache folder: ``$RAILTRAIN_CACHE`` or ``~/.cache/railtrain``."""
    return Path(os.environ.get("RAILTRAIN_CACHE", Path.home() / ".cache" / "railtrain"))


def ensure_binaries(quiet: bool = False) -> Path:
    """Build the control-plane binaries once and return their ``bin`` folder.

    Runs ``install.sh`` (a no-op when the versioned cache is complete) under an
    exclusive file lock, so concurrent test sessions never build twice at once.
    A cold build needs Go on ``PATH`` and takes several minutes (about 7 on 2
    cores); its progress goes to this process's stderr unless ``quiet``.

    Returns:
        The ``bin`` folder holding every name in :data:`BINARIES`; kwok's
        default Stage files lie in ``<bin>/../kwok-stages``.

    Raises:
        BinariesError: the script failed (for example Go is missing) or a
            binary is absent afterwards.
    """
    root = cache_root()
    (root / "controlplane").mkdir(parents=True, exist_ok=True)
    with open(root / "controlplane" / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = subprocess.run(
            ["bash", str(INSTALL_SCRIPT)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if quiet else None,
            text=True,
            env={**os.environ, "RAILTRAIN_CACHE": str(root)},
        )
    if proc.returncode != 0:
        detail = "\n".join((proc.stderr or "").splitlines()[-20:]) if quiet else "see its stderr above"
        raise BinariesError(f"{INSTALL_SCRIPT} exited with {proc.returncode}: {detail}")
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise BinariesError(f"{INSTALL_SCRIPT} printed no bin directory")
    bin_dir = Path(lines[-1])
    missing = [name for name in BINARIES if not os.access(bin_dir / name, os.X_OK)]
    if missing:
        raise BinariesError(f"{bin_dir} lacks {', '.join(missing)}; delete its .complete stamp and rerun")
    return bin_dir


def kwok_stages_dir(bin_dir: Path) -> Path:
    """The folder of kwok's default Stage YAML files that ``install.sh`` copied."""
    return bin_dir.parent / "kwok-stages"
