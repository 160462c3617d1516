# Sourced by bench/install-kueue.sh and bench/install-prometheus.sh: fetch a Go module's
# source from the module proxy into a writable folder (the module cache is read-only).
#
# writable_module_copy TOOL MODULE VERSION DEST
#   TOOL names the calling script in error lines; DEST must not exist yet.
#   Returns 0 with the source in DEST; exits 3 with one line on stderr when the
#   proxy does not serve MODULE@VERSION (the scripts' "cannot be built here" code).
writable_module_copy() {
  local tool="$1" module="$2" version="$3" dest="$4" info dir
  if ! info="$(cd "$(dirname "$dest")" && go mod download -json "$module@$version" 2>&1)"; then
    echo "$tool: the Go module proxy did not serve $module@$version: $(echo "$info" | tr '\n' ' ' | cut -c1-300)" >&2
    exit 3
  fi
  dir="$(echo "$info" | sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p')"
  [[ -d "$dir" ]] || { echo "$tool: go mod download gave no module folder for $version" >&2; exit 3; }
  cp -r "$dir" "$dest" && chmod -R u+w "$dest"
}
