# Sourced by install.sh and install-kind.sh: build commands of k8s.io/kubernetes at one release from the Go
# module proxy.
#
# k8s.io/kubernetes requires its staging modules (k8s.io/api, k8s.io/client-go, ...) at v0.0.0 with replaces
# to local paths, so `go install k8s.io/kubernetes/cmd/...@v1.X.Y` refuses it. A wrapper module pins each
# staging module to the matching published v0.X.Y release instead and builds the commands from there.
#
# build_kubernetes_commands VERSION WRAPPER WORKDIR OUTDIR CMD...
#   VERSION  the Kubernetes release (v1.X.Y); WRAPPER the wrapper module's own path (any name);
#   WORKDIR  an empty folder for the wrapper module; OUTDIR where the binaries go;
#   CMD      command folders under k8s.io/kubernetes/cmd (kube-apiserver, kubelet, ...).
#   Exits non-zero (set -e) when the proxy or the build fails; Go's output goes to stderr.
build_kubernetes_commands() {
  local version="$1" wrapper="$2" work="$3" out="$4"
  shift 4
  mkdir -p "$work" "$out"
  (
    cd "$work"
    staging_ver="v0.${version#v1.}"
    go mod init "$wrapper" >/dev/null 2>&1
    go mod download -json "k8s.io/kubernetes@$version" >/dev/null
    modfile="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$version.mod"
    {
      echo "require k8s.io/kubernetes $version"
      grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$modfile" | awk -v v="$staging_ver" '{print "replace " $1 " => " $1 " " v}'
    } >> go.mod
    pkgs=()
    for cmd in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$cmd"); done
    {
      printf '//go:build tools\n\npackage tools\n\nimport (\n'
      for pkg in "${pkgs[@]}"; do printf '\t_ "%s"\n' "$pkg"; done
      printf ')\n'
    } > tools.go
    go mod tidy -e >&2 || true
    go get "k8s.io/kubernetes@$version" >&2
    ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/client-go/pkg/version.gitVersion=$version"
    go build -trimpath -ldflags "$ldflags" -o "$out/" "${pkgs[@]}" >&2
  )
}
