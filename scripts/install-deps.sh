#!/usr/bin/env bash
# Installs the system packages the tests and benchmarks need, when missing.
# Debian/Ubuntu only (apt-get); elsewhere it prints what to install.
# With arguments (commands from the table below), only those.
set -euo pipefail

# command -> Debian package
declare -A need=(
  [Xvfb]=xvfb
  [xterm]=xterm
  [xdpyinfo]=x11-utils
  [xdotool]=xdotool
  [import]=imagemagick
  [convert]=imagemagick
  [scrot]=scrot
  [openbox]=openbox
  [mmdebstrap]=mmdebstrap
  # The browser tier (daemon/tests/browser.rs): the guest's Firefox ESR.
  [firefox-esr]=firefox-esr
  # The live view's browser tests (python/tests/test_view.py): headless
  # Chromium driven over WebDriver.
  [chromium]=chromium
  [chromedriver]=chromium-driver
  # The VM guest (--backend qemu): QEMU, and what guest-vm/build.sh uses to turn
  # the guest's root filesystem into a disk and an initramfs without root.
  [qemu-system-x86_64]=qemu-system-x86
  [fakeroot]=fakeroot
  [depmod]=kmod
  [cpio]=cpio
  [mke2fs]=e2fsprogs
  # The guest's libfaketime (guest-image/libfaketime/build.sh): compiled
  # on the host from Debian's source, patched; objdump checks its glibc.
  [cc]=gcc
  [make]=make
  [patch]=patch
  [objdump]=binutils
  [curl]=curl
)
missing=()
if [ $# -gt 0 ]; then
  for cmd in "$@"; do
    [ -n "${need[$cmd]:-}" ] || { echo "deps: unknown command $cmd" >&2; exit 2; }
    command -v "$cmd" >/dev/null 2>&1 || missing+=("${need[$cmd]}")
  done
else
  for cmd in "${!need[@]}"; do
    command -v "$cmd" >/dev/null 2>&1 || missing+=("${need[$cmd]}")
  done
  # Fonts for the typing corpus (CJK) in xterm.
  [ -e /usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc ] || missing+=(fonts-noto-cjk)
  [ -e /usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf ] || missing+=(fonts-dejavu-core)
  # A GTK 3 entry for the x11 tier's ordering tests (daemon/tests/fixtures/gtk_entry.py).
  /usr/bin/python3 -c "import gi; gi.require_version('Gtk', '3.0'); from gi.repository import Gtk" \
    >/dev/null 2>&1 || missing+=(python3-gi gir1.2-gtk-3.0)
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all system packages present"
  exit 0
fi
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
echo "deps: installing ${missing[*]}"
if ! command -v apt-get >/dev/null 2>&1; then
  echo "deps: no apt-get here; install these yourself: ${missing[*]}" >&2
  exit 1
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
    echo "deps: not root and no sudo; install these yourself: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q </dev/null
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
