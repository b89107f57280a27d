#!/usr/bin/env bash
# Builds the guest's libfaketime (the fake clock a replay shows its
# programs, docs/architecture.md "Replay's time") on the host: Debian's
# faketime 0.9.12 source (the orig tarball of Debian's source package,
# identical to upstream v0.9.12; its sha256 is pinned here), with
# sandtop.patch, compiled with only the wall-clock, file-date and
# condition-variable interceptions. Prints the library's path.
#
# Why not Debian's bookworm package (libfaketime 0.9.10): preloaded into
# Firefox ESR it deadlocks at startup (a failed dlsym() mallocs inside
# Firefox's allocator's initialisation), it does not shift statx() (GLib's
# file dates), and it keeps no memory of a monotonic condition's clock when
# monotonic time is not faked. 0.9.12 fixes the first two (with
# FAKETIME_IGNORE_SYMBOLS and FAKETIME_DISABLE_SHM, set by sandtopd);
# sandtop.patch fixes the third and lets a sandboxed process (Firefox's
# content processes may not open() files) keep reading the shift:
# FAKETIME_MAP_TIMESTAMP_FILE=1 maps the file once at initialisation.
#
# The guest image has no compiler, so this runs on the host; the host
# must be Debian bookworm or have a glibc no newer than the guest's (2.36):
# the library's symbol versions are checked.
#
# Environment (optional):
#   LIBFAKETIME_TARBALL  a local copy of faketime_0.9.12.orig.tar.gz
#   DEBIAN_MIRROR        default http://deb.debian.org/debian
#   OUT                  output folder (default: ${CARGO_TARGET_DIR:-target}/libfaketime)
set -euo pipefail
export LC_ALL=C
umask 022
exec </dev/null

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
OUT="${OUT:-${CARGO_TARGET_DIR:-$ROOT/target}/libfaketime}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
VERSION=0.9.12
TARBALL_NAME="faketime_${VERSION}.orig.tar.gz"
SHA256=4fc32218697c052adcdc5ee395581f2554ca56d086ac817ced2be0d6f1f8a9fa
# The glibc of the guest (bookworm): the library may need no newer symbol.
GUEST_GLIBC=2.36
# Only what a replay needs: the wall clock, file dates, and condition
# variables' deadlines (NSPR computes them from gettimeofday). No sleep,
# timer or internal-call interception: with an offset and no rate they are
# the real ones, and each interception is one more way to hang a program.
CFLAGS_FAKE="-DFAKE_STAT -DFAKE_PTHREAD"

die() {
    printf 'guest-image/libfaketime/build.sh: error: %s\n' "$*" >&2
    exit 1
}

# Reuse the library when its inputs are unchanged.
STAMP="$( {
    printf '%s %s %s\n' "$VERSION" "$SHA256" "$CFLAGS_FAKE"
    sha256sum <"$HERE/sandtop.patch"
    sha256sum <"$HERE/build.sh"
} | sha256sum | cut -c1-64)"
LIB="$OUT/libfaketime.so.1"
if [[ -f "$LIB" && "$(cat "$OUT/stamp" 2>/dev/null)" == "$STAMP" ]]; then
    printf '%s\n' "$LIB"
    exit 0
fi

for tool in cc make patch objdump curl; do
    command -v "$tool" >/dev/null ||
        die "$tool is needed on the host to build the guest's libfaketime (scripts/install-deps.sh installs it)"
done
mkdir -p "$OUT"
TARBALL="$OUT/$TARBALL_NAME"
if [[ -n "${LIBFAKETIME_TARBALL:-}" ]]; then
    cp "$LIBFAKETIME_TARBALL" "$TARBALL.part"
    mv "$TARBALL.part" "$TARBALL"
elif [[ ! -f "$TARBALL" ]]; then
    url="$DEBIAN_MIRROR/pool/main/f/faketime/$TARBALL_NAME"
    curl -fsSL --retry 2 --max-time 120 -o "$TARBALL.part" "$url" ||
        die "could not fetch $url (set LIBFAKETIME_TARBALL to a local copy)"
    mv "$TARBALL.part" "$TARBALL"
fi
got="$(sha256sum <"$TARBALL" | cut -c1-64)"
if [[ "$got" != "$SHA256" ]]; then
    rm -f "$TARBALL"
    die "$TARBALL_NAME has sha256 $got, expected $SHA256"
fi

SRC="$OUT/src"
rm -rf "$SRC"
mkdir -p "$SRC"
tar -xzf "$TARBALL" -C "$SRC" --strip-components=1
patch -s -d "$SRC" -p1 <"$HERE/sandtop.patch"
# Upstream's Makefile enables every interception; keep only ours.
sed -i -e 's/-DFAKE_PTHREAD -DFAKE_STAT -DFAKE_UTIME -DFAKE_SLEEP -DFAKE_TIMERS -DFAKE_INTERNAL_CALLS/'"$CFLAGS_FAKE"'/' \
    "$SRC/src/Makefile"
grep -q -- "$CFLAGS_FAKE -fPIC" "$SRC/src/Makefile" ||
    die "faketime's src/Makefile no longer has the expected CFLAGS line"
make -s -C "$SRC/src" libfaketime.so.1 >"$OUT/build.log" 2>&1 || {
    tail -20 "$OUT/build.log" >&2
    die "compiling libfaketime failed (log: $OUT/build.log)"
}
newest="$(objdump -T "$SRC/src/libfaketime.so.1" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)"
if [[ "$(printf '%s\n%s\n' "$newest" "$GUEST_GLIBC" | sort -V | tail -1)" != "$GUEST_GLIBC" ]]; then
    die "libfaketime needs glibc $newest, the guest has $GUEST_GLIBC: build on Debian bookworm"
fi
install -m 0644 "$SRC/src/libfaketime.so.1" "$LIB"
printf '%s\n' "$STAMP" >"$OUT/stamp"
printf '%s\n' "$LIB"
