#!/usr/bin/env bash
# `make guest-vm`: the VM guest (--backend qemu) from the same root filesystem as
# the container guest. Needs the image (make guest-image) and apt access to
# Debian's packages (for the kernel and busybox); no root, no loop device.
#
# Output, in $SANDTOP_VM_DIR (default ${XDG_DATA_HOME:-~/.local/share}/sandtop/vm-<arch>),
# which `host-cli --backend qemu` reads:
#   rootfs.ext4  the image's root filesystem (`docker export`), plus the
#                VM's PID 1 (guest-vm/sandtop-vm-init) and /etc/hosts; an
#                ext4 image written by `mke2fs -d` under fakeroot (owners
#                and modes kept), attached read-only
#   vmlinuz      Debian's kernel (linux-image-<arch>)
#   initrd.img   busybox-static, the kernel modules for virtio and ext4,
#                and guest-vm/init
#   input-hash   skipped when the image's own input hash, the kernel
#                package version and guest-vm/ are unchanged (FORCE=1)
#
# Environment: IMAGE (default sandtop-guest:latest), SANDTOP_VM_DIR, FORCE=1,
# ARCH (default: this machine's; arm64 is untested, see README).
set -euo pipefail
export LC_ALL=C
umask 022
exec </dev/null
START=$SECONDS
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE="${IMAGE:-sandtop-guest:latest}"
case "${ARCH:-$(uname -m)}" in
    x86_64 | amd64) DEB_ARCH=amd64 QEMU_ARCH=x86_64 ;;
    aarch64 | arm64) DEB_ARCH=arm64 QEMU_ARCH=aarch64 ;;
    *) echo "guest-vm/build.sh: unsupported ARCH ${ARCH:-$(uname -m)}" >&2; exit 2 ;;
esac
OUT="${SANDTOP_VM_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/sandtop/vm-$QEMU_ARCH}"
log() { printf '[%4ds] %s\n' $((SECONDS - START)) "$*"; }
die() { printf 'guest-vm/build.sh: error: %s\n' "$*" >&2; exit 1; }

# What Debian packages provide is installed when missing, as
# guest-image/build.sh installs mmdebstrap.
missing=()
for c in fakeroot mke2fs cpio depmod; do
    command -v "$c" >/dev/null || missing+=("$c")
done
if ((${#missing[@]})); then
    log "${missing[*]} missing; installing (scripts/install-deps.sh ${missing[*]})"
    "$ROOT/scripts/install-deps.sh" "${missing[@]}" ||
        die "${missing[*]} could not be installed (scripts/install-deps.sh's error above)"
fi
for c in docker fakeroot mke2fs cpio gzip apt-get dpkg-deb depmod; do
    command -v "$c" >/dev/null || die "$c is missing"
done
docker image inspect "$IMAGE" >/dev/null 2>&1 || die "no image $IMAGE (make guest-image)"
image_hash="$(docker image inspect -f '{{ index .Config.Labels "sandtop.input-hash" }}' "$IMAGE")"
[[ -n "$image_hash" ]] || die "$IMAGE has no sandtop.input-hash label"
arch_suffix=""
[[ "$DEB_ARCH" != "$(dpkg --print-architecture)" ]] && arch_suffix=":$DEB_ARCH"
kernel_pkg="$(apt-cache depends "linux-image-$DEB_ARCH$arch_suffix" 2>/dev/null |
    sed -n 's/^ *Depends: \(linux-image-[^ ]*\).*/\1/p' | head -1)"
[[ -n "$kernel_pkg" ]] || die "apt knows no linux-image-$DEB_ARCH (apt-get update; for a foreign ARCH: dpkg --add-architecture $DEB_ARCH)"
kernel_pkg="${kernel_pkg%:*}"
kernel_ver="$(apt-cache policy "$kernel_pkg$arch_suffix" | sed -n 's/^ *Candidate: //p')"
hash="$({
    printf 'sandtop-vm v1 %s %s %s %s\n' "$QEMU_ARCH" "$image_hash" "$kernel_pkg" "$kernel_ver"
    sha256sum "$ROOT"/guest-vm/* | cut -c1-64
} | sha256sum | cut -c1-64)"
if [[ "${FORCE:-0}" != 1 && -f "$OUT/input-hash" && "$(cat "$OUT/input-hash")" == "$hash" ]]; then
    log "VM guest up to date in $OUT (input hash ${hash:0:12}); FORCE=1 rebuilds"
    exit 0
fi
log "building the VM guest in $OUT: $IMAGE (${image_hash:0:12}), $kernel_pkg $kernel_ver"

# The work folder sits beside the output, so one filesystem holds both and
# the result is moved into place, not copied. At its peak the build holds
# the image's files once as a folder and once as the ext4 image (sparse),
# never as a tarball too: check for that room first, and drop a stale
# rootfs.ext4 (the hash above differs) so that it does not count twice.
mkdir -p "$OUT"
rm -f "$OUT/rootfs.ext4" "$OUT/input-hash"
image_mib=$(($(docker image inspect -f '{{ .Size }}' "$IMAGE") / 1048576))
need_mib=$((image_mib * 23 / 10 + 128))
free_mib=$(($(df -P -k "$OUT" | awk 'NR == 2 { print $4 }') / 1024))
((free_mib >= need_mib)) ||
    die "$OUT has $free_mib MiB free; building the VM guest from the $image_mib MiB image needs about $need_mib MiB (the files, then the ext4 image; about $((image_mib * 12 / 10)) MiB stay). Free some space or set SANDTOP_VM_DIR"
log "disk: $free_mib MiB free in $OUT, about $need_mib MiB needed at the peak"
WORK="$(mktemp -d "$OUT/.build.XXXXXX")"
cid=""
cleanup() {
    [[ -n "$cid" ]] && docker rm -f "$cid" >/dev/null 2>&1
    # Files extracted under fakeroot may be read-only directories.
    chmod -R u+rwX "$WORK" 2>/dev/null || :
    rm -rf "$WORK"
}
trap cleanup EXIT
cd "$WORK"

# --- packages: the kernel and busybox, downloaded, not installed -----------
log "downloading $kernel_pkg and busybox-static"
mkdir debs
(cd debs && apt-get download -q "$kernel_pkg$arch_suffix" "busybox-static$arch_suffix" >/dev/null 2>&1) ||
    die "apt-get download $kernel_pkg busybox-static failed"
dpkg-deb -x debs/linux-image-*.deb kernel
dpkg-deb -x debs/busybox-static_*.deb busybox
kver="$(ls kernel/lib/modules)"
depmod -b kernel "$kver"

# --- initramfs: busybox, modules in dependency order, /init ---------------
log "initramfs"
mkdir -p initramfs/bin initramfs/modules
cp busybox/bin/busybox initramfs/bin/busybox
install -m 0755 "$ROOT/guest-vm/init" initramfs/init
# Each wanted module after the modules it needs (modules.dep lists a
# module's dependencies; load them first, each once).
declare -A loaded=()
order=()
add_module() {
    local m=$1 deps d
    [[ -n "${loaded[$m]:-}" ]] && return
    loaded[$m]=1
    deps="$(grep -E "^$m:" "kernel/lib/modules/$kver/modules.dep" | cut -d: -f2)"
    for d in $deps; do add_module "$d"; done
    order+=("$m")
}
for m in drivers/virtio/virtio_pci drivers/block/virtio_blk drivers/char/virtio_console \
    drivers/char/hw_random/virtio-rng \
    crypto/crc32c_generic fs/ext4/ext4; do
    path="$(grep -oE "^kernel/$m\.ko[^:]*" "kernel/lib/modules/$kver/modules.dep")" ||
        die "module $m not in $kernel_pkg"
    add_module "$path"
done
for m in "${order[@]}"; do
    cp "kernel/lib/modules/$kver/$m" initramfs/modules/
    basename "$m" >>initramfs/modules.order
done
(cd initramfs && find . | sort | cpio -o -H newc -R 0:0 --quiet) | gzip -6 >initrd.img

# --- root filesystem: the image's, exported, plus the VM's PID 1 -----------
log "exporting $IMAGE"
cid="$(docker create "$IMAGE")"
mkdir rootfs
# Streamed straight into the folder: no tarball on disk.
docker export "$cid" | fakeroot -s fakeroot.state -- tar -xpf - -C rootfs --numeric-owner
docker rm -f "$cid" >/dev/null
cid=""
fakeroot -i fakeroot.state -s fakeroot.state -- sh -eu -c '
    rm -f rootfs/.dockerenv
    install -m 0755 -o 0 -g 0 "$1/guest-vm/sandtop-vm-init" rootfs/usr/local/sbin/sandtop-vm-init
    printf "127.0.0.1\tlocalhost sandtop\n::1\tlocalhost ip6-localhost ip6-loopback\n" >rootfs/etc/hosts
    printf "sandtop\n" >rootfs/etc/hostname
    : >rootfs/etc/resolv.conf
    chown 0:0 rootfs/etc/hosts rootfs/etc/hostname rootfs/etc/resolv.conf
' sh "$ROOT"
bytes="$(du -sb rootfs | cut -f1)"
mib=$((bytes * 115 / 100 / 1048576 + 64))
log "ext4 image: $((bytes / 1048576)) MiB of files in a $mib MiB disk"
fakeroot -i fakeroot.state -- mke2fs -q -t ext4 -O ^has_journal -L sandtop-root \
    -E root_owner=0:0 -d rootfs rootfs.ext4 "${mib}M"

chmod -R u+rwX rootfs && rm -rf rootfs
cp "kernel/boot/vmlinuz-$kver" "$OUT/vmlinuz.new"
mv initrd.img "$OUT/initrd.img.new"
mv rootfs.ext4 "$OUT/rootfs.ext4.new"
for f in vmlinuz initrd.img rootfs.ext4; do mv -f "$OUT/$f.new" "$OUT/$f"; done
chmod 0444 "$OUT/rootfs.ext4"
printf '%s\n' "$hash" >"$OUT/input-hash"
log "VM guest ready in $OUT: $(du -ch "$OUT"/vmlinuz "$OUT"/initrd.img "$OUT"/rootfs.ext4 | tail -1 | cut -f1) (kernel $kver, initramfs $(du -h "$OUT/initrd.img" | cut -f1))"
