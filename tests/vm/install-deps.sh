#!/bin/bash
# Host packages the VM harness (tests/vm) needs, all from Debian by name.
#   tests/vm/install-deps.sh          install what is missing (root; runs apt-get update once if needed)
#   tests/vm/install-deps.sh --check  list what is missing, exit 1 if anything is
# qemu-system-x86 + busybox-static + kmod/cpio/xz/zstd: boot the stock kernel with a tiny initramfs;
# rdma-core/rdmacm-utils/ibverbs-*: the guest userland (the guest runs the host's files over 9p);
# librdmacm-dev/libibverbs-dev/gcc: build c-examples/dev_*.c; gcc-12/make/libelf1: build siw.ko;
# tcpdump: the RoCEv2 suite's capture; python3: the roce-probe peer.
set -euo pipefail
PKGS=(qemu-system-x86 busybox-static kmod iproute2 cpio xz-utils zstd
      rdma-core rdmacm-utils ibverbs-utils ibverbs-providers librdmacm-dev libibverbs-dev
      gcc gcc-12 make libelf1 coreutils tcpdump python3)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ "${1:-}" = --check ]; then
  [ ${#missing[@]} -eq 0 ] && { echo "all present"; exit 0; }
  echo "missing: ${missing[*]}"; exit 1
fi
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO timeout 900 apt-get install -y --no-install-recommends "${missing[@]}"; then
  $SUDO timeout 600 apt-get update
  $SUDO timeout 900 apt-get install -y --no-install-recommends "${missing[@]}"
fi
