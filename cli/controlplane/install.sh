#!/usr/bin/env bash
# Build the real Kubernetes control-plane binaries (etcd, kube-apiserver,
# kube-scheduler, kube-controller-manager, kubectl) and kwok/kwokctl from the
# Go module proxy into a versioned cache directory, and copy kwok's default
# Stages out of the kwok module next to them. A warm cache is a no-op.
#
# Usage: cli/controlplane/install.sh            # prints the bin directory
# Env:   RAILTRAIN_CACHE (default ~/.cache/railtrain)
# Python callers use railtrain.cli.controlplane.binaries.ensure_binaries().
set -euo pipefail

K8S_VERSION="${RAILTRAIN_K8S_VERSION:-v1.34.4}"
ETCD_VERSION="${RAILTRAIN_ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${RAILTRAIN_KWOK_VERSION:-v0.8.0}"
CACHE="${RAILTRAIN_CACHE:-$HOME/.cache/railtrain}"
ROOT="$CACHE/controlplane/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}-kwok-${KWOK_VERSION}"
BIN="$ROOT/bin"
STAGES="$ROOT/kwok-stages"
STAMP="$BIN/.complete"

if [[ -f "$STAMP" && -f "$STAGES/.complete" ]]; then
  echo "$BIN"
  exit 0
fi

command -v go >/dev/null || { echo "install.sh: Go is required to build the control plane (go not on PATH)" >&2; exit 1; }
mkdir -p "$BIN"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

log() { echo "[controlplane] $*" >&2; }
source "$(dirname "${BASH_SOURCE[0]}")/k8smod.sh"

# --- kube-apiserver, kube-scheduler, kube-controller-manager, kubectl ---------
# k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them
# with local paths, so `go install` refuses it. A wrapper module pins each
# staging module to the matching published v0.X.Y release instead.
if [[ ! -x "$BIN/kube-apiserver" || ! -x "$BIN/kube-scheduler" || ! -x "$BIN/kube-controller-manager" || ! -x "$BIN/kubectl" ]]; then
  log "building Kubernetes $K8S_VERSION (cold: 10-25 min on 2 cores)"
  build_kubernetes_commands "$K8S_VERSION" railtrain.dev/controlplane "$WORK/k8s" "$BIN" kube-apiserver kube-controller-manager kube-scheduler kubectl
fi

# --- etcd -------------------------------------------------------------------
if [[ ! -x "$BIN/etcd" ]]; then
  log "building etcd $ETCD_VERSION"
  mkdir -p "$WORK/etcd" && cd "$WORK/etcd"
  go mod init railtrain.dev/etcd >/dev/null 2>&1
  go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
  # etcd's main package lives in the module root of go.etcd.io/etcd/v3; the
  # server module exposes the same entry point as etcdmain.
  cat > main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  go mod tidy >&2
  go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" . >&2
fi

# --- kwok, kwokctl ------------------------------------------------------------
if [[ ! -x "$BIN/kwok" || ! -x "$BIN/kwokctl" ]]; then
  log "installing kwok $KWOK_VERSION"
  GOBIN="$BIN" go install -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION" >&2
fi

# --- kwok's default Stages ----------------------------------------------------
# kwokctl loads these itself only when it is given no Stage at all; railtrain
# adds its own, so it passes these files explicitly (same set as kwokctl's
# defaults for a binary cluster: node init, heartbeat with lease, pod fast).
if [[ ! -f "$STAGES/.complete" ]]; then
  kwok_dir="$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -d "$kwok_dir" ]] || { echo "install.sh: kwok module $KWOK_VERSION not found in the module cache" >&2; exit 1; }
  mkdir -p "$STAGES"
  cp "$kwok_dir/kustomize/stage/node/fast/node-initialize.yaml" \
     "$kwok_dir/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
     "$kwok_dir/kustomize/stage/pod/fast/pod-ready.yaml" \
     "$kwok_dir/kustomize/stage/pod/fast/pod-complete.yaml" \
     "$kwok_dir/kustomize/stage/pod/fast/pod-delete.yaml" "$STAGES/"
  chmod u+w "$STAGES"/*.yaml
  touch "$STAGES/.complete"
fi

touch "$STAMP"
echo "$BIN"
