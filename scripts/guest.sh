#!/usr/bin/env bash
# `make guest`: the guest image and the two programs a user runs, from one
# release build.
#
#   1. one `cargo build --release` of every binary the guest and the host
#      need (sandtopd, sandtop-demo, sandtop-probe, host-cli): the shared
#      dependency tree is compiled once, not once per `cargo install`;
#   2. guest-image/build.sh (offline, skipped when its inputs are
#      unchanged); its base image (mmdebstrap from Debian's mirrors: mostly
#      downloads, ~75-120 s from nothing) and Dockerfile.guest's `system`
#      stage on it (~25 s) are made while cargo compiles, with BASE_ONLY=1,
#      their lines prefixed `base:`; after cargo only the layer with our
#      files is left (~10 s);
#   3. host-cli and sandtopd copied into $BINDIR (default ~/.cargo/bin),
#      only when they differ from what is there.
#
# Each phase prints one line with the time since the start; cargo shows its
# own progress in between. Environment: BINDIR, CARGO, and what
# guest-image/build.sh reads (FORCE=1, VERBOSE=1, ...).
set -euo pipefail
exec </dev/null

START_US=${EPOCHREALTIME/./}
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CARGO="${CARGO:-cargo}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
BINDIR="${BINDIR:-${CARGO_HOME:-$HOME/.cargo}/bin}"

phase() {
    local us=$((${EPOCHREALTIME/./} - START_US))
    printf '==> [%4d.%01ds] %s\n' $((us / 1000000)) $((us / 100000 % 10)) "$*"
}

cd "$ROOT"
# The base image and the system stage need no binary: made meanwhile (a
# cache hit when they exist). Their lines are prefixed so that the two
# streams stay readable.
phase "making sure the guest's base image and system stage exist (in the background)"
# Its own process group (setsid execs it in place), so that a failed
# build or Ctrl-C stops mmdebstrap too, not only the script. Niced: the
# compiler is the longer path and gets the cores first; dpkg's unpacking
# still finishes long before cargo does (docker import and the system
# stage run in dockerd, not niced).
BASE_ONLY=1 setsid nice -n 10 ./guest-image/build.sh > >(sed -u 's/^/    base: /') 2>&1 &
BASE_PID=$!
trap 'kill -- -"$BASE_PID" 2>/dev/null || :' EXIT

phase "building sandtopd, sandtop-demo, sandtop-probe and host-cli (one release build)"
"$CARGO" build --release --locked -p sandtopd -p sandtop-demo -p sandtop-probe -p host-cli

phase "waiting for the base image"
BASE_STATUS=0
wait "$BASE_PID" || BASE_STATUS=$?
trap - EXIT
if ((BASE_STATUS != 0)); then
    echo "make guest: the base image could not be made (its lines, prefixed base:, say why)" >&2
    exit 1
fi
phase "building the guest image (guest-image/build.sh)"
./guest-image/build.sh

mkdir -p "$BINDIR"
for bin in host-cli sandtopd; do
    src="$TARGET_DIR/release/$bin"
    dst="$BINDIR/$bin"
    if [[ -f "$dst" ]] && cmp -s "$src" "$dst"; then
        phase "$dst is up to date"
        continue
    fi
    # Copy next to it, then rename: a running host-cli keeps its old file.
    install -m 0755 "$src" "$dst.new"
    mv -f "$dst.new" "$dst"
    phase "installed $dst"
done
case ":$PATH:" in
    *":$BINDIR:"*) ;;
    *) phase "note: $BINDIR is not on PATH; add it, or run $BINDIR/host-cli" ;;
esac
phase "done: try \`host-cli run\` (no OPENAI_API_KEY: the offline exercise)"
