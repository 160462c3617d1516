#!/usr/bin/env bash
# Assemble railtrain's Docker images offline from what install.sh and
# install-kind.sh cached; every image is skipped when it exists already.
#
#   kind-images.sh node            the kind node image; prints its name
#   kind-images.sh app REPO        ghcr.io/railtrain/operator:<version> and
#                                  ghcr.io/railtrain/trainer:<version>-cpu built
#                                  from REPO's operator/Dockerfile and
#                                  trainer/Dockerfile (TORCH_CUDA_LIBS=drop) on
#                                  the Debian bookworm python base (the
#                                  trainer's dependencies as a cached image of
#                                  their own, railtrain's wheel on top); prints both
#                                  names, then the cache folder holding the
#                                  CUDA libraries (nvidia/) the trainer image
#                                  leaves out
#
# The node image: the "node" rootfs + kind's base-image files (from the kind
# module: entrypoint, systemd units, containerd config) + kubelet, kubeadm,
# kubectl + the CNI plugins + railtrain's CNI manifest (kube-router), with
# every image kubeadm asks for (`kubeadm config images list`) and kube-router
# imported into the node's containerd and pinned, so kind pulls nothing.
# Env: RAILTRAIN_CACHE, RAILTRAIN_K8S_VERSION (as install-kind.sh).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
K8S_VERSION="${RAILTRAIN_K8S_VERSION:-v1.34.4}"
KIND_VERSION="${RAILTRAIN_KIND_VERSION:-v0.33.0}"
COREDNS_VERSION="${RAILTRAIN_COREDNS_VERSION:-v1.12.1}"
CNI_PLUGINS_VERSION="${RAILTRAIN_CNI_PLUGINS_VERSION:-v1.10.0}"
KUBE_ROUTER_VERSION="${RAILTRAIN_KUBE_ROUTER_VERSION:-v2.1.0}"
export RAILTRAIN_K8S_VERSION="$K8S_VERSION"
log() { echo "[kind-images] $*" >&2; }
have_image() { docker image inspect "$1" >/dev/null 2>&1; }
dbuild() { # docker build -q ARGS...; its output only when it fails
  docker build -q --force-rm "$@" >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log" >&2; return 1; }
}
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

KIND_CACHE="${RAILTRAIN_CACHE:-$HOME/.cache/railtrain}/kind"
ensure_bits() { # all | rootfs: run install-kind.sh (a no-op when warm), then locate the rootfs tars
  bash "$HERE/install-kind.sh" "$1" >/dev/null
  ROOTFS="$(ls -d "$KIND_CACHE"/rootfs-bookworm-r* | sort -V | tail -1)"
  ROOTFS_TAG="bookworm-$(basename "$ROOTFS" | sed 's/.*-//')"
}

import_rootfs() { # name -> image railtrain.dev/debian-<name>:<tag>
  local img="railtrain.dev/debian-$1:$ROOTFS_TAG"
  if ! have_image "$img"; then
    log "importing the $1 rootfs as $img"
    docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' "$ROOTFS/$1.tar" "$img" >/dev/null
  fi
  echo "$img"
}

scratch_image() { # image-name binary path-in-image [entrypoint-json]
  local img="$1" bin="$2" path="$3" entry="${4:-}" dir="$WORK/scratch-$RANDOM"
  have_image "$img" && return 0
  mkdir -p "$dir/$(dirname "$path")" "$dir/tmp" && chmod 1777 "$dir/tmp"
  cp "$bin" "$dir/$path"
  local changes=(--change 'ENV PATH=/usr/local/bin:/usr/bin:/bin')
  [[ -n "$entry" ]] && changes+=(--change "ENTRYPOINT $entry")
  tar -C "$dir" --numeric-owner --owner=0 --group=0 -c . | docker import "${changes[@]}" - "$img" >/dev/null
}

on_image() { # image-name base binary [entrypoint-json]
  local img="$1" base="$2" bin="$3" entry="${4:-}" dir="$WORK/on-$RANDOM"
  have_image "$img" && return 0
  mkdir -p "$dir" && cp "$bin" "$dir/"
  { echo "FROM $base"; echo "COPY $(basename "$bin") /usr/local/bin/"; [[ -n "$entry" ]] && echo "ENTRYPOINT $entry"; } > "$dir/Dockerfile"
  dbuild -t "$img" "$dir"
}

node_image() {
  local cp_bin node_bin kind_mod name hash pause
  # The name is a hash of everything the image is made from (this script's
  # node functions and versions, not its app-image half, and the files it
  # copies), so a warm start checks only that the image exists.
  hash="$( { declare -f node_image import_rootfs scratch_image on_image ensure_bits dbuild
             echo "$KIND_VERSION $COREDNS_VERSION $CNI_PLUGINS_VERSION $KUBE_ROUTER_VERSION"
             cat "$HERE/install-kind.sh" "$HERE/kind-cni.yaml" "$HERE/kind-node-entrypoint.sh"; } | sha256sum | cut -c1-10)"
  name="railtrain.dev/kind-node:$K8S_VERSION-$hash"
  if have_image "$name"; then echo "$name"; return 0; fi
  log "assembling $name"
  ensure_bits all
  cp_bin="$(bash "$HERE/install.sh")"
  node_bin="$KIND_CACHE/k8s-$K8S_VERSION/bin"
  kind_mod="$(cd "$WORK" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -d "$kind_mod/images/base/files" ]] || { echo "kind-images.sh: kind $KIND_VERSION module not found" >&2; exit 1; }

  # Component images, named as kubeadm asks for them.
  local net
  net="$(import_rootfs net)"
  mapfile -t wanted < <("$node_bin/kubeadm" config images list --kubernetes-version "$K8S_VERSION" 2>/dev/null)
  local images=() img
  for img in "${wanted[@]}"; do
    case "$img" in
      */kube-apiserver:*|*/kube-controller-manager:*|*/kube-scheduler:*)
        local b="${img##*/}"; b="${b%%:*}"
        scratch_image "$img" "$cp_bin/$b" "usr/local/bin/$b" ;;
      */etcd:*) scratch_image "$img" "$cp_bin/etcd" usr/local/bin/etcd ;;
      */kube-proxy:*) on_image "$img" "$net" "$node_bin/kube-proxy" ;;
      */coredns:*) scratch_image "$img" "$KIND_CACHE/coredns-$COREDNS_VERSION/bin/coredns" coredns '["/coredns"]' ;;
      */pause:*) pause="$img"; scratch_image "$img" "$node_bin/pause" pause '["/pause"]' ;;
      *) echo "kind-images.sh: kubeadm asks for $img, which this script cannot build" >&2; exit 1 ;;
    esac
    images+=("$img")
  done
  local router="railtrain.dev/kube-router:$KUBE_ROUTER_VERSION"
  on_image "$router" "$net" "$KIND_CACHE/kube-router-$KUBE_ROUTER_VERSION/bin/kube-router"
  images+=("$router")
  mkdir -p "$WORK/preload"
  docker save -o "$WORK/preload/images.tar" "${images[@]}"

  # The node's files: kind's base-image files, binaries, CNI, manifests.
  local ctx="$WORK/node" base
  mkdir -p "$ctx/files/usr/bin" "$ctx/files/opt/cni/bin" "$ctx/files/kind/manifests" "$ctx/files/usr/local/bin"
  cp -r "$kind_mod/images/base/files/." "$ctx/files/"
  chmod -R u+w "$ctx/files"
  cp "$node_bin/kubelet" "$node_bin/kubeadm" "$cp_bin/kubectl" "$ctx/files/usr/bin/"
  cp "$KIND_CACHE/cni-plugins-$CNI_PLUGINS_VERSION/bin/"* "$ctx/files/opt/cni/bin/"
  cp "$HERE/kind-node-entrypoint.sh" "$ctx/files/usr/local/bin/railtrain-node-entrypoint"
  printf '%s' "$K8S_VERSION" > "$ctx/files/kind/version"
  sed "s/KUBE_ROUTER_VERSION/$KUBE_ROUTER_VERSION/g" "$HERE/kind-cni.yaml" > "$ctx/files/kind/manifests/default-cni.yaml"
  cat > "$ctx/files/kind/manifests/default-storage.yaml" <<'YAML'
# No dynamic provisioner in railtrain's offline node image: a default class
# for statically created local PersistentVolumes.
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
YAML
  base="$(import_rootfs node)"
  cat > "$ctx/Dockerfile" <<DOCKERFILE
FROM $base
COPY files/ /
# The RUN steps of kind's base image (images/base/Dockerfile), on Debian's
# containerd and runc.
RUN chmod 755 /kind /kind/bin /kind/bin/* /usr/local/bin/* /usr/bin/kubelet /usr/bin/kubeadm /usr/bin/kubectl /opt/cni/bin/* \\
 && find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete \\
 && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \\
      /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \\
      /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \\
 && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \\
 && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \\
 && systemctl mask systemd-binfmt.service \\
 && mkdir -p /etc/kubernetes/manifests \\
 && ln -sf /usr/bin/containerd /usr/local/bin/containerd \\
 && ctr oci spec | jq '.hooks.createContainer[.hooks.createContainer|length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \\
      | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json \\
 && sed -i 's#sandbox_image = .*#sandbox_image = "$pause"#' /etc/containerd/config.toml
ENV container=docker
STOPSIGNAL SIGRTMIN+3
DOCKERFILE
  dbuild -t "$name-unloaded" "$ctx"

  # Import the component images into the node's containerd (what kind's own
  # node-image build does), in a throwaway container of the new image.
  local cid
  cid="$(docker run -d -v "$WORK/preload:/preload:ro" --entrypoint sleep "$name-unloaded" infinity)"
  docker exec "$cid" bash -c '
    set -e
    containerd >/tmp/containerd.log 2>&1 &
    for _ in $(seq 100); do ctr version >/dev/null 2>&1 && break; sleep 0.1; done
    ctr -n k8s.io images import --all-platforms --no-unpack --digests /preload/images.tar >/dev/null
    for ref in $(ctr -n k8s.io images ls -q); do ctr -n k8s.io images label "$ref" io.cri-containerd.pinned=pinned >/dev/null; done
    kill %1; wait || true
    rm -rf /tmp/containerd.log /run/containerd' >&2
  docker commit --change 'ENTRYPOINT ["/usr/local/bin/railtrain-node-entrypoint", "/sbin/init"]' --change 'CMD []' "$cid" "$name" >/dev/null
  docker rm -f "$cid" >/dev/null
  docker rmi "$name-unloaded" >/dev/null
  # Older node images (other inputs) are 1.3 GB each: keep only this one.
  docker images railtrain.dev/kind-node --format '{{.Repository}}:{{.Tag}}' | grep -vxF "$name" | xargs -r docker rmi >/dev/null 2>&1 || true
  echo "$name"
}

# A wheelhouse of `railtrain[EXTRA]` for the python base's CPython 3.11, in
# DEST: the railtrain wheel built from REPO plus every dependency pip resolves,
# less the names matching DROP (a regex); the image installs it with
# --no-deps. The resolved dependency wheels are kept in the cache, keyed by
# what pyproject.toml asks for railtrain[EXTRA] (its base dependencies and the
# extra's requirements, extras it names included; another extra, e.g. test,
# changing does not invalidate it) and DROP, and hard-linked into DEST.
dependency_spec() { # python repo extra: the requirements of railtrain[EXTRA] in pyproject.toml, one line
  "$1" - "$2/pyproject.toml" "$3" <<'PY'
import re, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
extras, wanted, seen, todo = project.get("optional-dependencies", {}), set(), set(), [sys.argv[2]]
while todo:
    extra = todo.pop()
    seen.add(extra)
    for req in extras.get(extra, []):
        named = re.fullmatch(r"railtrain\[(.*)\]", req.replace(" ", ""))
        if named:
            todo += [e for e in named.group(1).split(",") if e not in seen]
        else:
            wanted.add(req)
print(project.get("dependencies"), sorted(wanted))
PY
}

wheelhouse() { # repo extra drop-regex dest
  local repo="$1" extra="$2" drop="$3" dest="$4" py="$1/.venv/bin/python" deps
  [[ -x "$py" ]] || py=python3
  mkdir -p "$dest"
  # A fixed timestamp makes the wheel (and so the image layer) the same for the
  # same code. Built once per run (10-20 s): both images install the same wheel.
  if ! compgen -G "$WORK/railtrain-wheel/railtrain-*.whl" >/dev/null; then
    SOURCE_DATE_EPOCH=315532800 "$py" -m pip wheel -q --no-deps -w "$WORK/railtrain-wheel" "$repo" >&2
  fi
  cp "$WORK/railtrain-wheel"/railtrain-*.whl "$dest/"
  deps="$KIND_CACHE/wheels/$extra-$( { dependency_spec "$py" "$repo" "$extra"; echo "$drop"; } | sha256sum | cut -c1-12)"
  if [[ ! -f "$deps/.complete" ]]; then
    log "resolving and downloading the dependencies of railtrain[$extra]"
    mkdir -p "$deps"
    "$py" -m pip install -q --dry-run --ignore-installed --report "$deps/report.json" "$repo[$extra]" >&2
    "$py" - "$deps/report.json" "$drop" > "$deps/requirements.txt" <<'PY'
import json, re, sys
report, drop = json.load(open(sys.argv[1])), re.compile(sys.argv[2]) if sys.argv[2] else None
for item in report["install"]:
    meta = item["metadata"]
    if meta["name"] == "railtrain" or (drop and drop.match(meta["name"].lower())):
        continue
    print(f'{meta["name"]}=={meta["version"]}')
PY
    "$py" -m pip download -q --no-deps --only-binary=:all: -d "$deps" -r "$deps/requirements.txt" >&2
    touch "$deps/.complete"
  fi
  cp -l "$deps"/*.whl "$dest/" 2>/dev/null || cp "$deps"/*.whl "$dest/"
  WHEELHOUSE_DEPS="$deps"
}

# The CUDA user-space libraries that the CPU trainer image leaves out (the
# nvidia-* wheels of the same resolution), installed once into a folder of the
# cache that kind nodes mount read-only and bind into containers at the venv's
# site-packages/nvidia (kind.py), the way the NVIDIA container toolkit injects
# driver libraries on GPU nodes. torch 2.15 loads them at import even on CPU.
cuda_libs() { # repo deps-folder -> prints the folder holding nvidia/
  local repo="$1" deps="$2" py="$1/.venv/bin/python" out
  [[ -x "$py" ]] || py=python3
  "$py" - "$deps/report.json" > "$WORK/cuda-reqs.txt" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
for item in sorted(report["install"], key=lambda i: i["metadata"]["name"].lower()):
    meta = item["metadata"]
    if meta["name"].lower().startswith("nvidia-"):
        print(f'{meta["name"]}=={meta["version"]}')
PY
  out="$KIND_CACHE/cuda-libs-$(sha256sum < "$WORK/cuda-reqs.txt" | cut -c1-12)"
  if [[ ! -f "$out/.complete" ]]; then
    log "installing the CUDA libraries for kind nodes into $out"
    rm -rf "$out" && mkdir -p "$out"
    "$py" -m pip install -q --no-deps --only-binary=:all: --target "$out" -r "$WORK/cuda-reqs.txt" >&2
    rm -rf "$out"/*.dist-info "$out/bin"
    touch "$out/.complete"
  fi
  echo "$out"
}

app_images() { # repo
  local repo="$1" version base op tr libs
  ensure_bits rootfs
  version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/pyproject.toml" | head -1)"
  base="$(import_rootfs python)"
  op="ghcr.io/railtrain/operator:$version"
  tr="ghcr.io/railtrain/trainer:$version-cpu"
  log "building $op"
  wheelhouse "$repo" operator "" "$WORK/op/wheels"
  # The build stage is tagged too, so the next build finds it as its cache
  # while the prune below removes only superseded stages.
  dbuild -f "$repo/operator/Dockerfile" --build-arg "BASE_IMAGE=$base" --target build -t railtrain.dev/operator-build "$WORK/op"
  dbuild -f "$repo/operator/Dockerfile" --build-arg "BASE_IMAGE=$base" -t "$op" "$WORK/op"
  log "building $tr (torch without its CUDA libraries: nvidia-*, triton)"
  wheelhouse "$repo" trainer-image '^(nvidia-|triton$)' "$WORK/tr/wheels"
  libs="$(cuda_libs "$repo" "$WHEELHOUSE_DEPS")"
  # The dependencies (torch: 1.3 GB installed, 4-6 minutes to install and
  # commit on a loaded 2-core machine) change far less often than railtrain:
  # trainer/Dockerfile builds them alone, from the same wheelhouse less
  # railtrain's wheel, into an image named by a hash of that wheelhouse, the
  # base and the Dockerfile; railtrain's wheel goes on top as one small layer
  # by the same `pip install --no-index --no-deps` the Dockerfile runs.
  mkdir -p "$WORK/tr-app" && mv "$WORK/tr/wheels"/railtrain-*.whl "$WORK/tr-app/"
  local deps_image
  deps_image="railtrain.dev/trainer-deps:$( { basename "$WHEELHOUSE_DEPS"; echo "$base"; cat "$repo/trainer/Dockerfile"; } | sha256sum | cut -c1-12)"
  if ! have_image "$deps_image"; then
    log "building $deps_image (trainer/Dockerfile on the dependencies alone)"
    dbuild -f "$repo/trainer/Dockerfile" --build-arg "BASE_IMAGE=$base" --build-arg TORCH_CUDA_LIBS=drop -t "$deps_image" "$WORK/tr"
    # Keep only this one (1.4 GB each), and drop the build-stage tag of the
    # earlier one-step build (2 GB).
    docker images railtrain.dev/trainer-deps --format '{{.Repository}}:{{.Tag}}' | grep -vxF "$deps_image" | xargs -r docker rmi >/dev/null 2>&1 || true
    docker rmi railtrain.dev/trainer-build >/dev/null 2>&1 || true
  fi
  cat > "$WORK/tr-app/Dockerfile" <<DOCKERFILE
FROM $deps_image
COPY railtrain-*.whl /tmp/wheels/
RUN /opt/railtrain/bin/pip install --no-cache-dir --no-index --no-deps --no-compile /tmp/wheels/*.whl && rm -rf /tmp/wheels
DOCKERFILE
  dbuild -t "$tr" "$WORK/tr-app"
  # Rebuilt images leave their predecessors and build stages untagged (1.4 GB
  # for the trainer); remove the dangling ones these Dockerfiles made.
  docker image prune -f --filter label=dev.railtrain.dockerfile >/dev/null
  echo "$op"
  echo "$tr"
  echo "$libs"
}

case "${1:-}" in
  node) node_image ;;
  app) app_images "$(cd "${2:?usage: kind-images.sh app REPO}" && pwd)" ;;
  *) echo "usage: kind-images.sh node | app REPO" >&2; exit 2 ;;
esac
