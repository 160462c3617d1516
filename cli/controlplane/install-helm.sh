#!/usr/bin/env bash
# Build helm from the Go module proxy into a versioned cache directory (a warm
# cache is a no-op) and print the path of the binary. Used by the chart tests.
# Env: RAILTRAIN_CACHE (default ~/.cache/railtrain), RAILTRAIN_HELM_VERSION.
set -euo pipefail
HELM_VERSION="${RAILTRAIN_HELM_VERSION:-v3.19.0}"
BIN="${RAILTRAIN_CACHE:-$HOME/.cache/railtrain}/helm-${HELM_VERSION}/bin"
if [[ ! -x "$BIN/helm" ]]; then
  command -v go >/dev/null || { echo "install-helm.sh: Go is required to build helm (go not on PATH)" >&2; exit 1; }
  mkdir -p "$BIN"
  echo "[helm] building helm $HELM_VERSION" >&2
  CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOBIN="$BIN" go install -trimpath -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
fi
echo "$BIN/helm"
