#!/usr/bin/env bash
# Build stock Prometheus (github.com/prometheus/prometheus) from the Go module
# proxy into the railtrain cache. Only its scrape loop, TSDB and HTTP query API
# are used (docs/dashboard/render.py); the web UI's assets are not built, so
# the binary serves /api/v1/* but not the browser pages, and it is built with
# the remove_all_sd tag (static_configs only: no cloud service discovery),
# which leaves out most of its dependencies. A warm cache is a no-op.
#
# Usage: bench/install-prometheus.sh      # prints the path of the binary
# Env:   RAILTRAIN_PROMETHEUS_VERSION (default v0.316.0: the module version of
#        Prometheus 3.x that the proxy served when tried), RAILTRAIN_CACHE
#        (default ~/.cache/railtrain)
# Exit:  0 and the binary's path on stdout when built or cached; 3 with a
#        one-line reason on stderr when Go or the module proxy cannot serve it;
#        1 on a build error. Cold: a long build (run it under `nice` on a shared
#        machine).
set -euo pipefail
source "$(dirname "$0")/gomod.sh"

VERSION="${RAILTRAIN_PROMETHEUS_VERSION:-v0.316.0}"
CACHE="${RAILTRAIN_CACHE:-$HOME/.cache/railtrain}"
ROOT="$CACHE/prometheus/prometheus-$VERSION"
BIN="$ROOT/bin/prometheus"
STAMP="$ROOT/.complete"

if [[ -f "$STAMP" && -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi
command -v go >/dev/null || { echo "install-prometheus.sh: Go is not on PATH; cannot build Prometheus $VERSION" >&2; exit 3; }
log() { echo "[prometheus] $*" >&2; }
WORK="$(mktemp -d)"
trap 'chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
# The module ships a go.work for its own sub-modules; build the main module alone.
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOWORK=off

log "downloading github.com/prometheus/prometheus@$VERSION from the module proxy"
writable_module_copy install-prometheus.sh "github.com/prometheus/prometheus" "$VERSION" "$WORK/src"  # bench/gomod.sh
log "building Prometheus $VERSION (cold: many minutes on 2 shared cores)"
mkdir -p "$ROOT/bin"
(cd "$WORK/src" && go build -mod=mod -tags remove_all_sd -trimpath -ldflags "-s -w -X github.com/prometheus/common/version.Version=${VERSION#v} -X github.com/prometheus/common/version.Revision=module-proxy" -o "$BIN" ./cmd/prometheus) >&2
"$BIN" --version >&2
touch "$STAMP"
echo "$BIN"
