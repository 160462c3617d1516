#!/bin/bash
# Entrypoint of railtrain's kind node image, in front of kind's own
# (/usr/local/bin/entrypoint, unchanged). A node started with --privileged
# passes straight through. A node started without it (on a host whose
# capability bounding set lacks CAP_SYS_RESOURCE, kind-docker.sh swaps
# --privileged for explicit capabilities) gets its cgroup mounts read-only
# from docker; they are remounted read-write here, before kind's entrypoint
# does its cgroup fix-ups and systemd starts.
set -euo pipefail
awk '$2 ~ "^/sys/fs/cgroup" && $4 ~ /(^|,)ro(,|$)/ {print $2}' /proc/self/mounts | while read -r mnt; do
  mount -o remount,bind,rw "$mnt"
done
exec /usr/local/bin/entrypoint "$@"
