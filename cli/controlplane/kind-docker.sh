#!/bin/bash
# `docker` for kind on hosts whose capability bounding set lacks
# CAP_SYS_RESOURCE (bit 24 of CapBnd in /proc/self/status), where docker
# 20.10's --privileged fails with "unable to apply caps". railtrain puts this
# file first on kind's PATH, as `docker`, only on such hosts; kind itself is
# unmodified. It rewrites one flag and passes everything else through:
#   docker run ... --privileged ...   -> every capability but SYS_RESOURCE, all
#                                        devices allowed, /dev/kmsg, unmasked
#                                        /proc and /sys paths
#   docker exec ... --privileged ...  -> the flag dropped
# The real docker is $RAILTRAIN_REAL_DOCKER.
set -euo pipefail
real="${RAILTRAIN_REAL_DOCKER:?RAILTRAIN_REAL_DOCKER must name the real docker}"
args=("$@")
sub=""
for a in "${args[@]}"; do
  case "$a" in -*) ;; *) sub="$a"; break ;; esac
done
out=()
done_once=""
for a in "${args[@]}"; do
  # Only the first --privileged: kind passes it once, among docker's own flags;
  # a later one belongs to the command run in the container.
  if [[ -z "$done_once" && "$a" == "--privileged" && ( "$sub" == run || "$sub" == create || "$sub" == exec ) ]]; then
    done_once=1
    if [[ "$sub" != exec ]]; then
      out+=(--cap-add ALL --cap-drop SYS_RESOURCE --security-opt systempaths=unconfined
            --device-cgroup-rule "a *:* rwm" --device /dev/kmsg)
    fi
    continue
  fi
  out+=("$a")
done
exec "$real" "${out[@]}"
