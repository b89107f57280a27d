#!/usr/bin/env bash
# Builds the Sandtop guest image (sandtop-guest:latest) from Dockerfile.guest,
# guest-image/ and three prebuilt binaries. It does not run cargo: build the
# binaries first (`make guest-image` does), e.g.
#
#   cargo build --release --locked -p sandtopd -p sandtop-demo -p sandtop-probe
#   guest-image/build.sh
#
# Environment (all optional):
#   SANDTOPD_BIN   sandtopd binary    (default: ${CARGO_TARGET_DIR:-target}/release/sandtopd)
#   DEMO_BIN       sandtop-demo binary (default: ${CARGO_TARGET_DIR:-target}/release/sandtop-demo)
#   LIBFAKETIME    the guest's libfaketime (default: built by guest-image/libfaketime/build.sh
#                  into ${CARGO_TARGET_DIR:-target}/libfaketime: Debian's faketime 0.9.12
#                  source, patched, compiled with the host's cc; the replay's fake clock)
#   PROBE_BIN      sandtop-probe binary (default: ${CARGO_TARGET_DIR:-target}/release/sandtop-probe;
#                  the read-only fact finder the E tier tests and `host-cli doctor` run inside)
#   BASE           base image to build FROM (skips the base selection below)
#   FORCE=1        rebuild even when the image's sandtop.input-hash label matches
#   IMAGE          tag to build (default: sandtop-guest:latest)
#   DEBIAN_MIRROR           offline base mirror (default: http://deb.debian.org/debian)
#   DEBIAN_SECURITY_MIRROR  security mirror (default: http://deb.debian.org/debian-security;
#                           empty: no security suite). Skipped when unreachable.
#   PULL_TIMEOUT   seconds allowed for `docker pull debian:bookworm-slim` (default: 20)
#   VERBOSE=1      stream mmdebstrap and docker build output (default: shown on failure)
#   BASE_ONLY=1    only make sure the base image exists (step c) and build
#                  Dockerfile.guest's `system` stage on it (tagged
#                  $IMAGE-system), without the binaries: `make guest` does
#                  this while cargo compiles, the full build reuses its layers
#
# Steps: (a) check the inputs; (b) hash them (sha256 over Dockerfile.guest,
# every file under guest-image/ including packages.txt, the three binaries) and stop
# if $IMAGE already carries that hash in its label sandtop.input-hash; (c) pick
# the base: $BASE, else debian:bookworm-slim when present or pullable, else an
# offline base built with mmdebstrap from Debian's mirrors and `docker import`ed
# as sandtop-base:bookworm-<12 hex of sha256(packages.txt)> (reused when that
# tag exists); (d) `docker build` from a small temporary context (layout in
# Dockerfile.guest's header); (e) print the image size and the total time.
#
# arm64 (see guest-image/README.md): cross-compile the binaries for
# aarch64-unknown-linux-gnu, then either
#   - on a host with qemu-user-static + binfmt_misc registered, build the
#     offline base with `mmdebstrap --arch=arm64 ...` (this script: add
#     --arch=arm64 to the mmdebstrap call and `--platform linux/arm64` to
#     docker import/build), or
#   - on a host with registry access and buildx, let the base be
#     debian:bookworm-slim and run
#     `docker buildx build --platform linux/arm64 -f Dockerfile.guest <context>`.
set -euo pipefail
export LC_ALL=C
umask 022
exec </dev/null

START_US=${EPOCHREALTIME/./}
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
SANDTOPD_BIN="${SANDTOPD_BIN:-$TARGET_DIR/release/sandtopd}"
DEMO_BIN="${DEMO_BIN:-$TARGET_DIR/release/sandtop-demo}"
PROBE_BIN="${PROBE_BIN:-$TARGET_DIR/release/sandtop-probe}"
IMAGE="${IMAGE:-sandtop-guest:latest}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
DEBIAN_SECURITY_MIRROR="${DEBIAN_SECURITY_MIRROR-http://deb.debian.org/debian-security}"
PULL_TIMEOUT="${PULL_TIMEOUT:-20}"
SLIM=debian:bookworm-slim
PACKAGES_FILE="$ROOT/guest-image/packages.txt"
DOCKERFILE="$ROOT/Dockerfile.guest"

# One progress line: "[  12.3s] message".
log() {
    local us=$((${EPOCHREALTIME/./} - START_US))
    printf '[%4d.%01ds] %s\n' $((us / 1000000)) $((us / 100000 % 10)) "$*"
}

die() {
    printf 'guest-image/build.sh: error: %s\n' "$*" >&2
    exit 1
}

# Runs a long command; its output goes to a log file that is shown (tail)
# only when it fails, unless VERBOSE=1.
run_logged() {
    local logfile=$1
    shift
    if [[ "${VERBOSE:-0}" == 1 ]]; then
        "$@" 2>&1 | tee "$logfile"
        return "${PIPESTATUS[0]}"
    fi
    if ! "$@" >"$logfile" 2>&1; then
        printf -- '--- last 40 lines of %s ---\n' "$*" >&2
        tail -n 40 "$logfile" >&2
        printf -- '---\n' >&2
        return 1
    fi
}

# The package names of packages.txt (comments and blank lines dropped).
read_packages() {
    sed -e 's/#.*//' "$PACKAGES_FILE" | tr -s ' \t' '\n' | sed -e '/^$/d'
}

image_exists() {
    docker image inspect "$1" >/dev/null 2>&1
}

# --- (a) inputs -------------------------------------------------------------
log "checking inputs"
command -v docker >/dev/null || die "docker is not installed"
docker version --format '{{.Server.Version}}' >/dev/null 2>&1 ||
    die "cannot talk to the Docker engine (is it running, may this user use it?)"
[[ -f "$PACKAGES_FILE" ]] || die "missing $PACKAGES_FILE"
[[ -f "$DOCKERFILE" ]] || die "missing $DOCKERFILE"
if [[ "${BASE_ONLY:-0}" != 1 ]]; then
    [[ -f "$SANDTOPD_BIN" ]] ||
        die "sandtopd binary not found at $SANDTOPD_BIN (build it: cargo build --release --locked -p sandtopd, or set SANDTOPD_BIN)"
    [[ -f "$DEMO_BIN" ]] ||
        die "sandtop-demo binary not found at $DEMO_BIN (build it: cargo build --release --locked -p sandtop-demo, or set DEMO_BIN)"
    [[ -f "$PROBE_BIN" ]] ||
        die "sandtop-probe binary not found at $PROBE_BIN (build it: cargo build --release --locked -p sandtop-probe, or set PROBE_BIN)"
    if [[ -z "${LIBFAKETIME:-}" ]]; then
        log "building libfaketime (guest-image/libfaketime/build.sh)"
        LIBFAKETIME="$(OUT="$TARGET_DIR/libfaketime" "$ROOT/guest-image/libfaketime/build.sh")" ||
            die "building the guest's libfaketime failed"
    fi
    [[ -f "$LIBFAKETIME" ]] || die "libfaketime not found at $LIBFAKETIME"
fi
mapfile -t PACKAGES < <(read_packages)
((${#PACKAGES[@]} > 0)) || die "$PACKAGES_FILE lists no package"

# --- (b) content hash -------------------------------------------------------
input_hash() {
    {
        printf 'sandtop-guest inputs v1\nbase-override %s\n' "${BASE:-auto}"
        (
            cd "$ROOT"
            find guest-image -type f -print0 | sort -z |
                while IFS= read -r -d '' file; do
                    printf '%s %s %s\n' "$(stat -c %a "$file")" "$(sha256sum <"$file" | cut -c1-64)" "$file"
                done
            printf 'dockerfile %s\n' "$(sha256sum <Dockerfile.guest | cut -c1-64)"
        )
        printf 'sandtopd %s\n' "$(sha256sum <"$SANDTOPD_BIN" | cut -c1-64)"
        printf 'sandtop-demo %s\n' "$(sha256sum <"$DEMO_BIN" | cut -c1-64)"
        printf 'sandtop-probe %s\n' "$(sha256sum <"$PROBE_BIN" | cut -c1-64)"
        printf 'libfaketime %s\n' "$(sha256sum <"$LIBFAKETIME" | cut -c1-64)"
    } | sha256sum | cut -c1-64
}
if [[ "${BASE_ONLY:-0}" != 1 ]]; then
    HASH="$(input_hash)"
    log "input hash ${HASH:0:12}"
fi
if [[ "${BASE_ONLY:-0}" != 1 && "${FORCE:-0}" != 1 ]] && image_exists "$IMAGE"; then
    current="$(docker image inspect -f '{{ index .Config.Labels "sandtop.input-hash" }}' "$IMAGE" 2>/dev/null || true)"
    if [[ "$current" == "$HASH" ]]; then
        log "guest image up to date ($IMAGE, input hash ${HASH:0:12}); FORCE=1 rebuilds"
        exit 0
    fi
fi

WORK="$(mktemp -d "${TMPDIR:-/var/tmp}/sandtop-guest-build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# --- (c) base image ---------------------------------------------------------
build_offline_base() {
    local tag=$1 tarball="$WORK/base.tar" include mirrors
    if ! command -v mmdebstrap >/dev/null; then
        log "mmdebstrap is missing; installing it (scripts/install-deps.sh mmdebstrap)"
        "$ROOT/scripts/install-deps.sh" mmdebstrap ||
            die "no base image: $SLIM cannot be pulled and mmdebstrap could not be installed (apt-get install mmdebstrap, or set BASE)"
    fi
    include="$(
        IFS=,
        printf '%s' "${PACKAGES[*]}"
    )"
    mirrors=("deb $DEBIAN_MIRROR bookworm main" "deb $DEBIAN_MIRROR bookworm-updates main")
    if [[ -n "$DEBIAN_SECURITY_MIRROR" ]]; then
        if ! command -v curl >/dev/null ||
            curl -fsSI --max-time 10 "$DEBIAN_SECURITY_MIRROR/dists/bookworm-security/InRelease" >/dev/null 2>&1; then
            mirrors+=("deb $DEBIAN_SECURITY_MIRROR bookworm-security main")
        else
            log "warning: $DEBIAN_SECURITY_MIRROR unreachable; building without security updates"
        fi
    fi
    log "building offline base $tag with mmdebstrap (${#PACKAGES[@]} packages, suites: ${#mirrors[@]})"
    # force-unsafe-io: no fsync per unpacked file (a throwaway root; the
    # tarball is what counts), dropped again from the image's dpkg config.
    # The hooks run on the host with $1 = the new root filesystem.
    # shellcheck disable=SC2016
    run_logged "$WORK/mmdebstrap.log" mmdebstrap \
        --variant=minbase \
        --include="$include" \
        --dpkgopt='force-unsafe-io' \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-include=/usr/share/locale/locale.alias' \
        --customize-hook='sed -i "/^force-unsafe-io\$/d" "$1"/etc/dpkg/dpkg.cfg.d/99mmdebstrap' \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/apt/* "$1"/var/log/dpkg.log "$1"/var/log/alternatives.log' \
        bookworm "$tarball" "${mirrors[@]}" ||
        die "mmdebstrap failed (full log above; mirror: $DEBIAN_MIRROR)"
    log "importing the base ($(($(stat -c %s "$tarball") / 1000000)) MB tarball)"
    run_logged "$WORK/import.log" docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' \
        --change "LABEL sandtop.packages-hash=$PACKAGES_HASH" \
        --message "sandtop offline base: mmdebstrap minbase bookworm + guest-image/packages.txt" \
        "$tarball" "$tag" || die "docker import failed"
    rm -f "$tarball"
}

OFFLINE_BASE="sandtop-base:bookworm-$(sha256sum <"$PACKAGES_FILE" | cut -c1-12)"
if [[ "${BASE_ONLY:-0}" == 1 && -z "${BASE:-}" ]] && ! image_exists "$SLIM" && image_exists "$OFFLINE_BASE"; then
    # No pull attempt (up to PULL_TIMEOUT without a registry).
    BASE=$OFFLINE_BASE
    log "base: $BASE (offline base already present)"
elif [[ -n "${BASE:-}" ]]; then
    log "base: $BASE (from BASE)"
elif image_exists "$SLIM"; then
    BASE=$SLIM
    log "base: $SLIM (present locally)"
else
    log "trying docker pull $SLIM (timeout ${PULL_TIMEOUT}s)"
    if timeout "$PULL_TIMEOUT" docker pull -q "$SLIM" >"$WORK/pull.log" 2>&1; then
        BASE=$SLIM
        log "base: $SLIM (pulled)"
    else
        log "cannot pull $SLIM ($(tail -n 1 "$WORK/pull.log" | cut -c1-120)); using an offline base"
        PACKAGES_HASH="$(sha256sum <"$PACKAGES_FILE" | cut -c1-64)"
        BASE="sandtop-base:bookworm-${PACKAGES_HASH:0:12}"
        if image_exists "$BASE"; then
            log "base: $BASE (offline base already present)"
        else
            build_offline_base "$BASE"
            log "base: $BASE (offline base built)"
        fi
    fi
fi

# BuildKit needs the buildx plugin with recent clients; without it use the
# classic builder (which prints a deprecation notice). Both keep the
# layers of the `system` stage in their cache for the next build.
if docker buildx version >/dev/null 2>&1; then
    export DOCKER_BUILDKIT=1
else
    export DOCKER_BUILDKIT=0
fi

if [[ "${BASE_ONLY:-0}" == 1 ]]; then
    # The Dockerfile's `system` stage needs only packages.txt: built now
    # (a cache hit when done before), the full build reuses its layers.
    SYSCTX="$WORK/system-context"
    mkdir -p "$SYSCTX"
    cp "$DOCKERFILE" "$SYSCTX/Dockerfile"
    install -m 0644 "$PACKAGES_FILE" "$SYSCTX/packages.txt"
    log "docker build --target system FROM $BASE (DOCKER_BUILDKIT=$DOCKER_BUILDKIT)"
    run_logged "$WORK/system.log" docker build \
        --build-arg "BASE=$BASE" \
        --target system \
        --tag "$IMAGE-system" \
        --file "$SYSCTX/Dockerfile" \
        "$SYSCTX" || die "docker build --target system failed"
    log "base ready: $BASE, system stage built ($IMAGE-system)"
    exit 0
fi

# --- (d) docker build ---------------------------------------------------------
log "assembling the build context"
# Layout expected by Dockerfile.guest (see its header): packages.txt and a
# rootfs/ tree copied onto / in one layer.
CONTEXT="$WORK/context"
ROOTFS="$CONTEXT/rootfs"
# Debian's /usr/lib/firefox-esr/distribution is a symlink to
# /usr/share/firefox-esr/distribution: put policies.json at the target, or
# COPY would replace the symlink with a directory.
mkdir -p "$ROOTFS/etc/xdg/openbox" "$ROOTFS/etc/xdg/tint2" "$ROOTFS/usr/share/sandtop/applications" \
    "$ROOTFS/usr/share/firefox-esr/distribution" "$ROOTFS/etc/firefox-esr" "$ROOTFS/usr/local/bin" \
    "$ROOTFS/usr/lib/sandtop" "$ROOTFS/etc/gtk-3.0"
chmod -R 0755 "$CONTEXT"
cp "$DOCKERFILE" "$CONTEXT/Dockerfile"
install -m 0644 "$PACKAGES_FILE" "$CONTEXT/packages.txt"
install -m 0644 "$ROOT"/guest-image/openbox/* "$ROOTFS/etc/xdg/openbox/"
install -m 0644 "$ROOT/guest-image/firefox/policies.json" "$ROOTFS/usr/share/firefox-esr/distribution/"
# What a policy may not set, as locked default preferences: Debian's Firefox
# reads every file of /etc/firefox-esr (browser/defaults/syspref links there).
install -m 0644 "$ROOT/guest-image/firefox/sandtop-prefs.js" "$ROOTFS/etc/firefox-esr/sandtop.js"
install -m 0644 "$ROOT/guest-image/gtk/settings.ini" "$ROOTFS/etc/gtk-3.0/settings.ini"
install -m 0644 "$ROOT/guest-image/tint2/sandtop.tint2rc" "$ROOTFS/etc/xdg/tint2/"
install -m 0644 "$ROOT"/guest-image/tint2/applications/*.desktop "$ROOTFS/usr/share/sandtop/applications/"
install -m 0755 "$ROOT/guest-image/sandtop-entry" "$ROOTFS/usr/local/bin/sandtop-entry"
install -m 0755 "$ROOT/guest-image/sandtop-panel" "$ROOTFS/usr/local/bin/sandtop-panel"
install -m 0755 "$SANDTOPD_BIN" "$ROOTFS/usr/local/bin/sandtopd"
install -m 0755 "$DEMO_BIN" "$ROOTFS/usr/local/bin/sandtop-demo"
install -m 0755 "$PROBE_BIN" "$ROOTFS/usr/local/bin/sandtop-probe"
# The fake clock sandtopd preloads into the programs it starts (--fake-clock).
install -m 0644 "$LIBFAKETIME" "$ROOTFS/usr/lib/sandtop/libfaketime.so.1"

OLD_ID="$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
log "docker build $IMAGE FROM $BASE (DOCKER_BUILDKIT=$DOCKER_BUILDKIT)"
run_logged "$WORK/build.log" docker build \
    --build-arg "BASE=$BASE" \
    --label "sandtop.input-hash=$HASH" \
    --tag "$IMAGE" \
    --file "$CONTEXT/Dockerfile" \
    "$CONTEXT" || die "docker build failed"
NEW_ID="$(docker image inspect -f '{{.Id}}' "$IMAGE")"
if [[ -n "$OLD_ID" && "$OLD_ID" != "$NEW_ID" ]]; then
    # The previous build is now untagged; drop it unless a container uses it.
    docker image rm "$OLD_ID" >/dev/null 2>&1 || true
fi

# --- (e) summary --------------------------------------------------------------
SIZE="$(docker image inspect -f '{{.Size}}' "$IMAGE")"
log "built $IMAGE (${NEW_ID:7:12}): $((SIZE / 1000000)) MB, base $BASE"
log "done"
