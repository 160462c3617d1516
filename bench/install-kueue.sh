#!/usr/bin/env bash
# Build stock Kueue (sigs.k8s.io/kueue) from the Go module proxy into the
# railtrain cache, beside the control-plane binaries, and copy its CRDs and
# webhook manifests next to the binary. A warm cache is a no-op.
#
# Usage: bench/install-kueue.sh        # prints the Kueue cache folder
# Env:   RAILTRAIN_KUEUE_VERSION (default v0.17.0, the newest the proxy served
#        when tried), RAILTRAIN_CACHE (default ~/.cache/railtrain)
# Exit:  0 and the folder on stdout when built or cached; 3 with a one-line
#        reason on stderr when Go or the module proxy cannot serve it (callers
#        then skip the Kueue half and print that reason); 1 on a build error.
set -euo pipefail
source "$(dirname "$0")/gomod.sh"

VERSION="${RAILTRAIN_KUEUE_VERSION:-v0.17.0}"
CACHE="${RAILTRAIN_CACHE:-$HOME/.cache/railtrain}"
ROOT="$CACHE/kueue/kueue-$VERSION"
STAMP="$ROOT/.complete"

if [[ -f "$STAMP" ]]; then
  echo "$ROOT"
  exit 0
fi
command -v go >/dev/null || { echo "install-kueue.sh: Go is not on PATH; cannot build Kueue $VERSION" >&2; exit 3; }
log() { echo "[kueue] $*" >&2; }
WORK="$(mktemp -d)"
trap 'chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

log "downloading sigs.k8s.io/kueue@$VERSION from the module proxy"
writable_module_copy install-kueue.sh "sigs.k8s.io/kueue" "$VERSION" "$WORK/src"  # bench/gomod.sh
log "building Kueue $VERSION (cold: about 4 min and 2 GB on 2 idle cores)"
mkdir -p "$ROOT/bin"
(cd "$WORK/src" && go build -trimpath -ldflags "-s -w" -o "$ROOT/bin/kueue" ./cmd/kueue) >&2
rm -rf "$ROOT/crd" "$ROOT/webhook"
mkdir -p "$ROOT/crd" "$ROOT/webhook"
cp "$WORK/src"/config/components/crd/bases/*.yaml "$ROOT/crd/"
cp "$WORK/src/config/components/webhook/manifests.yaml" "$ROOT/webhook/"
touch "$STAMP"
echo "$ROOT"
