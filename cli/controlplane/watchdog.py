"""Stop a local cluster once the process that owns it is gone.

``LocalCluster.start(owner_pid=...)`` runs this detached, in its own session::

    python -P -m railtrain.cli.controlplane.watchdog OWNER_PID STATE_DIR

It polls once a second; when ``OWNER_PID`` has exited (even by SIGKILL, which
runs no cleanup) it stops the cluster whose state folder is ``STATE_DIR``.
It exits on its own when the state folder disappears (a normal ``stop()``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from .cluster import LocalCluster, pid_alive


def main(argv: list[str]) -> int:
    """Watch ``argv[0]`` (a pid) and stop the cluster in ``argv[1]`` when it dies; returns 0."""
    owner, state_dir = int(argv[0]), Path(argv[1])
    while pid_alive(owner) and state_dir.exists():
        time.sleep(1.0)
    if state_dir.exists():
        LocalCluster(state_dir.name, state_root=state_dir.parent.parent).stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
