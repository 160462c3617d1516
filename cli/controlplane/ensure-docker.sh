#!/usr/bin/env bash
# Make a Docker engine available for the kind tests: install Debian's docker.io
# (and debootstrap, which builds the offline node image's root filesystems)
# when absent, and start dockerd in the background when it is not running.
# Prints one sentence and exits non-zero when that is impossible here.
set -uo pipefail
say() { echo "ensure-docker: $*" >&2; }
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if (( ${#missing[@]} )); then
  if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    say "cannot install ${missing[*]}: needs root and apt-get"; exit 1
  fi
  say "installing ${missing[*]}"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } >/tmp/railtrain-apt.log 2>&1 \
    || { say "apt-get install ${missing[*]} failed: $(tail -1 /tmp/railtrain-apt.log)"; exit 1; }
fi
if docker info >/dev/null 2>&1; then exit 0; fi
if [[ $(id -u) -ne 0 ]]; then say "dockerd is not running and only root can start it"; exit 1; fi
say "starting dockerd (log: /tmp/railtrain-dockerd.log)"
nohup dockerd >/tmp/railtrain-dockerd.log 2>&1 &
for _ in $(seq 60); do
  docker info >/dev/null 2>&1 && exit 0
  sleep 1
done
say "dockerd did not answer within 60 s: $(tail -1 /tmp/railtrain-dockerd.log)"
exit 1
