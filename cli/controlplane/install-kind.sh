#!/usr/bin/env bash
# Build, offline and once, everything a kind cluster of railtrain needs, into
# versioned folders of the railtrain cache (a warm cache is a no-op):
#
#   kind            sigs.k8s.io/kind (go install; kind itself is not modified)
#   node binaries   kubelet, kubeadm, kube-proxy (k8s.io/kubernetes, the same
#                   wrapper module as install.sh)
#   coredns         github.com/coredns/coredns
#   CNI             kube-router (github.com/cloudnativelabs/kube-router/v2, a
#                   maintained CNI that fills each node's podCIDR into the
#                   bridge config itself) and the containernetworking plugins
#                   bridge, host-local, loopback, portmap
#   pause           kubernetes' own build/pause/linux/pause.c, static
#   rootfs tars     Debian bookworm from debootstrap (the mirror named in
#                   /etc/apt/sources.list): "node" (systemd, containerd, runc,
#                   iptables ...), "net" (iptables, ipset, conntrack for
#                   kube-proxy and kube-router), "python" (python3.11 + venv,
#                   the base of the operator and trainer images)
#
# Usage: cli/controlplane/install-kind.sh     # prints the cache folder
# Env:   RAILTRAIN_CACHE (default ~/.cache/railtrain), RAILTRAIN_K8S_VERSION,
#        RAILTRAIN_KIND_VERSION, RAILTRAIN_COREDNS_VERSION, ...
# Needs: go, debootstrap, gcc (static libc); the control-plane binaries of
# install.sh (kube-apiserver, kube-controller-manager, kube-scheduler, etcd,
# kubectl) are reused from its cache. Python callers use
# railtrain.cli.controlplane.kind.ensure_kind_bits(); the node image itself is
# assembled from these by kind_image.sh.
set -euo pipefail

K8S_VERSION="${RAILTRAIN_K8S_VERSION:-v1.34.4}"
KIND_VERSION="${RAILTRAIN_KIND_VERSION:-v0.33.0}"
COREDNS_VERSION="${RAILTRAIN_COREDNS_VERSION:-v1.12.1}"
CNI_PLUGINS_VERSION="${RAILTRAIN_CNI_PLUGINS_VERSION:-v1.10.0}"
KUBE_ROUTER_VERSION="${RAILTRAIN_KUBE_ROUTER_VERSION:-v2.1.0}"
SUITE=bookworm
ROOTFS_REV=1   # bump when a package list below changes
CACHE="${RAILTRAIN_CACHE:-$HOME/.cache/railtrain}"
KIND_CACHE="$CACHE/kind"
mkdir -p "$KIND_CACHE"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
log() { echo "[kind-bits] $*" >&2; }
source "$(dirname "${BASH_SOURCE[0]}")/k8smod.sh"
need() { command -v "$1" >/dev/null || { echo "install-kind.sh: $1 is required ($2)" >&2; exit 1; }; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

ONLY="${1:-all}"   # "rootfs" or "go": build only that half (both run concurrently in CI)
if [[ "$ONLY" != rootfs ]]; then
# --- kind ---------------------------------------------------------------------
KIND_BIN="$KIND_CACHE/kind-$KIND_VERSION/bin"
if [[ ! -x "$KIND_BIN/kind" ]]; then
  need go "to build kind"
  log "installing kind $KIND_VERSION"
  mkdir -p "$KIND_BIN"
  GOBIN="$KIND_BIN" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kind@$KIND_VERSION" >&2
fi

# --- kubelet, kubeadm, kube-proxy -----------------------------------------------
NODE_BIN="$KIND_CACHE/k8s-$K8S_VERSION/bin"
if [[ ! -x "$NODE_BIN/kubelet" || ! -x "$NODE_BIN/kubeadm" || ! -x "$NODE_BIN/kube-proxy" ]]; then
  need go "to build kubelet, kubeadm and kube-proxy"
  log "building kubelet, kubeadm, kube-proxy $K8S_VERSION (cold: about 4-8 min on 2 cores)"
  build_kubernetes_commands "$K8S_VERSION" railtrain.dev/kindnode "$WORK/k8s" "$NODE_BIN" kubelet kubeadm kube-proxy  # k8smod.sh
  # pause: the sandbox container, kubernetes' own C program, linked statically.
  need gcc "to build the pause container"
  pause_c="$(go env GOMODCACHE)/k8s.io/kubernetes@$K8S_VERSION/build/pause/linux/pause.c"
  gcc -Os -static -Wall -DVERSION="$K8S_VERSION" -o "$NODE_BIN/pause" "$pause_c"
  strip "$NODE_BIN/pause"
  cd "$KIND_CACHE"
fi

# --- coredns ------------------------------------------------------------------
DNS_BIN="$KIND_CACHE/coredns-$COREDNS_VERSION/bin"
if [[ ! -x "$DNS_BIN/coredns" ]]; then
  need go "to build coredns"
  log "building coredns $COREDNS_VERSION (cold: about 4 min on 2 cores)"
  mkdir -p "$DNS_BIN"
  GOBIN="$DNS_BIN" go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION" >&2
fi

# --- CNI: kube-router + containernetworking plugins ----------------------------
CNI_BIN="$KIND_CACHE/cni-plugins-$CNI_PLUGINS_VERSION/bin"
if [[ ! -x "$CNI_BIN/bridge" || ! -x "$CNI_BIN/portmap" ]]; then
  need go "to build the CNI plugins"
  log "building CNI plugins $CNI_PLUGINS_VERSION"
  mkdir -p "$CNI_BIN"
  m=github.com/containernetworking/plugins/plugins
  GOBIN="$CNI_BIN" go install -trimpath -ldflags "-s -w" \
    "$m/main/bridge@$CNI_PLUGINS_VERSION" "$m/ipam/host-local@$CNI_PLUGINS_VERSION" \
    "$m/main/loopback@$CNI_PLUGINS_VERSION" "$m/meta/portmap@$CNI_PLUGINS_VERSION" >&2
fi
ROUTER_BIN="$KIND_CACHE/kube-router-$KUBE_ROUTER_VERSION/bin"
if [[ ! -x "$ROUTER_BIN/kube-router" ]]; then
  need go "to build kube-router"
  log "building kube-router $KUBE_ROUTER_VERSION"
  mkdir -p "$ROUTER_BIN"
  GOBIN="$ROUTER_BIN" go install -trimpath -ldflags "-s -w" \
    "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION" >&2
fi

fi

# --- Debian rootfs tars -------------------------------------------------------
ROOTFS="$KIND_CACHE/rootfs-$SUITE-r$ROOTFS_REV"
mkdir -p "$ROOTFS"
if [[ "$ONLY" != go ]]; then
mirror="$(sed -n 's/^URIs: *\(http[^ ]*debian\)\/*$/\1/p' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | head -1 || true)"
[[ -n "$mirror" ]] || mirror="$(awk '$1=="deb" && $3=="'"$SUITE"'" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)"
mirror="${RAILTRAIN_DEBIAN_MIRROR:-${mirror:-http://deb.debian.org/debian}}"
rootfs() { # name, comma-separated packages
  local name="$1" pkgs="$2" dir="$WORK/rootfs-$1"
  [[ -f "$ROOTFS/$name.tar" ]] && return 0
  need debootstrap "to build the $name rootfs (apt-get install debootstrap)"
  log "debootstrap $SUITE $name from $mirror"
  debootstrap --variant=minbase --include="$pkgs" "$SUITE" "$dir" "$mirror" >"$WORK/debootstrap-$name.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap-$name.log" >&2; exit 1; }
  chroot "$dir" apt-get clean
  rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/locale/*
  tar -C "$dir" --numeric-owner -cf "$ROOTFS/$name.tar.tmp" .
  mv "$ROOTFS/$name.tar.tmp" "$ROOTFS/$name.tar"
  rm -rf "$dir"
}
rootfs node systemd,systemd-sysv,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,curl,jq,procps,containerd,runc,e2fsprogs
rootfs net iptables,ipset,conntrack,iproute2,kmod,ca-certificates
rootfs python python3,python3-venv,ca-certificates
fi

echo "$KIND_CACHE"
