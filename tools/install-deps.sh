#!/bin/bash
# Debian 12 packages the build and the tests need (run as root, or with sudo).
# The tests compare against Debian's own librdmacm, headers and consumers.
set -euo pipefail
pkgs=(
  gcc g++ make pkg-config          # C probes, c-examples
  libibverbs-dev librdmacm-dev     # system headers the layout checks compare with
  abigail-tools                    # abidiff against Debian's librdmacm.so.1
  rdmacm-utils perftest qperf      # Debian's consumers (BIND_NOW load checks, demo)
  ibverbs-utils                    # ibv_devinfo / ibv_devices against softverbs
  python3-pyverbs                  # pyverbs.cmid load check
  valgrind                         # c-examples under valgrind
  iproute2                         # network namespaces (soft fabric tests)
  sockperf iperf3                  # make bench: the TCP floor of the same host
  libfabric-bin                    # make check: fi_pingpong over the soft fabric (tests/soft/libfabric.sh)
  ucx-utils                        # make check: UCX over the soft fabric (tests/soft/ucx.sh); make bench: its latency and bandwidth beside ours
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
command -v cargo >/dev/null || { echo "cargo (Rust toolchain) is required: https://rustup.rs" >&2; exit 1; }
# The frame decoder's libFuzzer target (softverbs/fuzz) needs cargo-fuzz on the nightly
# toolchain the machine image ships; without nightly the deterministic fuzz test still runs.
if rustup toolchain list 2>/dev/null | grep -q '^nightly' && ! command -v cargo-fuzz >/dev/null; then
  cargo install --locked cargo-fuzz >/dev/null 2>&1 || echo "note: cargo-fuzz could not be installed; the libFuzzer run will be skipped" >&2
fi
# The qemu/rxe harness (tests/vm) has its own list.
bash "$(dirname "$0")/../tests/vm/install-deps.sh"
