#!/bin/bash
# Boot Debian's stock kernel in qemu (host root shared read-only over 9p),
# set up soft-RoCE (rdma_rxe) and run a command inside; see README.md.
#
#   run-in-guest.sh [-v] 'shell command'     (exit status = the command's)
#
# Env knobs: QRXE_RDMA="rxe" | "siw" | "rxe siw" | "none"  (default rxe)
#            QRXE_NET=dummy|lo|virtio (default dummy)  QRXE_IP (default 10.10.10.1)
#            QRXE_MTU (default 1500)  QRXE_TIMEOUT seconds (default 600)
#            QRXE_MEM MiB (default 2048)  QRXE_SMP (default nproc, max 4)
#            QRXE_ACCEL=tcg|kvm (default tcg; kvm does not work on PVM hosts)
#            QRXE_KPKG kernel package (default: what linux-image-amd64 depends on)
#            QRXE_WORK cache dir (default /tmp/qemu-rxe)
#            QRXE_ROUTES space-separated prefixes routed onto the RDMA netdev
#              where nothing answers (default 192.0.2.0/24: ADDR_ERROR tests)
#            QRXE_ARP=on|off ARP on the dummy netdev (default on; off = every
#              neighbour resolves, so nothing gives ADDR_ERROR)
#            QRXE_OUTDIR host dir mounted writable at the same path in the guest
#            QRXE_ENV "VAR=value ..." exported to the command (no spaces in values)
# Inside the guest the command sees $QRXE_IP, $QRXE_NETDEV and $QRXE_RDMA; the host
# filesystem is visible (read-only lower layer, writes go to a tmpfs overlay).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
VERBOSE=0
[ "${1:-}" = -v ] && { VERBOSE=1; shift; }
[ $# -ge 1 ] || { sed -n '2,/^set -euo/{/^#/p}' "$0" >&2; exit 2; }
CMD="$*"
WORK=${QRXE_WORK:-/tmp/qemu-rxe}
mkdir -p "$WORK/debs" "$WORK/runs"
say() { [ $VERBOSE = 1 ] && echo "run-in-guest: $*" >&2 || true; }

# 1. host packages (Debian, by name)
if ! "$HERE/install-deps.sh" --check >/dev/null; then
  echo "run-in-guest: $("$HERE/install-deps.sh" --check); installing" >&2
  "$HERE/install-deps.sh" >&2
fi

# 2. Debian kernel package, extracted (never installed) + depmod
KPKG=${QRXE_KPKG:-$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}')}
KDIR=$WORK/k/$KPKG
# siw is not in Debian's kernel: build it out of tree once (build-siw.sh, ~20 s)
if [[ " ${QRXE_RDMA:-rxe} " == *" siw "* ]] && [ ! -e "$KDIR/extra/siw.ko" ]; then
  echo "run-in-guest: building siw.ko" >&2
  QRXE_WORK=$WORK QRXE_KPKG=$KPKG "$HERE/build-siw.sh" >&2
fi
if [ ! -e "$KDIR/.done" ]; then
  echo "run-in-guest: fetching $KPKG" >&2
  (cd "$WORK/debs" && ls "${KPKG}"_*.deb >/dev/null 2>&1 || timeout 600 apt-get download "$KPKG" >&2)
  rm -rf "$KDIR"; mkdir -p "$KDIR"
  dpkg-deb -x "$(ls "$WORK/debs/${KPKG}"_*.deb | head -1)" "$KDIR/root"
  touch "$KDIR/.done"
fi
KVER=$(ls "$KDIR/root/lib/modules" | head -1)
KMODS=$KDIR/root/lib/modules/$KVER
# extra out-of-tree modules (e.g. siw built by build-siw.sh) live in $KDIR/extra
if [ -d "$KDIR/extra" ]; then mkdir -p "$KMODS/updates"; cp -u "$KDIR"/extra/*.ko "$KMODS/updates/"; fi
if [ ! -e "$KMODS/modules.dep" ] || [ -n "$(find "$KMODS/updates" -newer "$KMODS/modules.dep" 2>/dev/null)" ]; then
  depmod -b "$KDIR/root" "$KVER"
fi

# 3. initramfs: busybox + the few modules needed to reach the 9p root
INITRD=$KDIR/initramfs.cpio.gz
if [ ! -e "$INITRD" ] || [ "$HERE/initramfs-init.sh" -nt "$INITRD" ]; then
  T=$(mktemp -d "$WORK/initrd.XXXX")
  mkdir -p "$T/bin" "$T/mods" "$T/proc" "$T/sys" "$T/dev"
  cp /bin/busybox "$T/bin/busybox"
  cp "$HERE/initramfs-init.sh" "$T/init"; chmod 755 "$T/init"
  : >"$T/modules.list"
  for m in virtio_pci 9pnet_virtio 9p overlay; do
    modprobe -d "$KDIR/root" -S "$KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}'
  done | awk '!seen[$0]++' | while read -r f; do
    b=$(basename "$f"); case $b in
      *.xz) xz -dc "$f" >"$T/mods/${b%.xz}"; b=${b%.xz} ;;
      *.zst) zstd -dcq "$f" >"$T/mods/${b%.zst}"; b=${b%.zst} ;;
      *) cp "$f" "$T/mods/$b" ;;
    esac
    echo "$b" >>"$T/modules.list"
  done
  (cd "$T" && find . | cpio -o -H newc --quiet | gzip -1) >"$INITRD.tmp" && mv "$INITRD.tmp" "$INITRD"
  rm -rf "$T"
fi

outshare=()
if [ -n "${QRXE_OUTDIR:-}" ]; then
  mkdir -p "$QRXE_OUTDIR"; QRXE_OUTDIR=$(cd "$QRXE_OUTDIR" && pwd)
  outshare=(-virtfs "local,path=$QRXE_OUTDIR,mount_tag=qrxeout,security_model=none")
fi

# 4. per-run share: stage-2 script, settings, command
RUN=$(mktemp -d "$WORK/runs/run.XXXXXX")
cp "$HERE/guest-init.sh" "$RUN/"
printf '%s\n' "$CMD" >"$RUN/cmd"
{
  printf 'QRXE_KMODS=%q\n' "$KMODS"
  printf 'QRXE_RDMA=%q\n' "${QRXE_RDMA:-rxe}"
  printf 'QRXE_NET=%q\n' "${QRXE_NET:-dummy}"
  printf 'QRXE_IP=%q\n' "${QRXE_IP:-10.10.10.1}"
  printf 'QRXE_MTU=%q\n' "${QRXE_MTU:-1500}"
  printf 'QRXE_ROUTES=%q\n' "${QRXE_ROUTES-192.0.2.0/24}"
  printf 'QRXE_ARP=%q\n' "${QRXE_ARP:-on}"
  printf 'QRXE_OUTDIR=%q\n' "${QRXE_OUTDIR:-}"
  printf 'QRXE_ENV=%q\n' "${QRXE_ENV:-}"
} >"$RUN/env"


ACCEL=${QRXE_ACCEL:-tcg}
SMP=${QRXE_SMP:-$(nproc)}; [ "$SMP" -gt 4 ] && SMP=4
if [ "$ACCEL" = kvm ]; then accel=(-accel kvm -cpu host,-arch-capabilities)
else accel=(-accel tcg,thread=multi -cpu max); fi
net=(-nic none)
[ "${QRXE_NET:-dummy}" = virtio ] && net=(-netdev user,id=n0,restrict=on -device virtio-net-pci,netdev=n0)

t0=$(date +%s.%N)
set +e
timeout "${QRXE_TIMEOUT:-600}" qemu-system-x86_64 "${accel[@]}" -smp "$SMP" -m "${QRXE_MEM:-2048}" \
  -machine pc -display none -no-reboot -nodefaults \
  -kernel "$KDIR/root/boot/vmlinuz-$KVER" -initrd "$INITRD" \
  -append "console=ttyS0 loglevel=4 panic=-1 rdinit=/init mitigations=off tsc=reliable" \
  -serial "file:$RUN/console.log" -chardev stdio,id=out,signal=on -serial chardev:out \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
  -virtfs "local,path=$RUN,mount_tag=qrxe,security_model=none" "${outshare[@]}" \
  "${net[@]}" </dev/null
qrc=$?
set -e
t1=$(date +%s.%N)
if [ -e "$RUN/ready" ]; then
  tr=$(stat -c %.Y "$RUN/ready" 2>/dev/null || stat -c %Y "$RUN/ready")
  say "$(awk -v a="$t0" -v r="$tr" -v b="$t1" -v u="$(cat "$RUN/ready")" -v m="$ACCEL" -v n="$SMP" \
      'BEGIN{printf "guest ready after %.1fs (guest uptime %ss); total %.1fs; accel=%s smp=%s", r-a, u, b-a, m, n}')"
fi
if [ -e "$RUN/rc" ]; then
  rc=$(cat "$RUN/rc")
  [ $VERBOSE = 1 ] && { echo "---- guest console ($RUN/console.log) ----" >&2; cat "$RUN/console.log" >&2; }
  [ "${QRXE_KEEP:-0}" = 1 ] || rm -rf "$RUN"
  exit "$rc"
fi
echo "run-in-guest: guest did not report an exit status (qemu rc=$qrc); console tail:" >&2
tail -n 40 "$RUN/console.log" >&2
exit 125
