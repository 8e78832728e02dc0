#!/bin/bash
# tools/build-symbols.sh: the release libraries again, with line tables and not
# stripped, in build/symbols/ (librdmacm.so.1) and build/symbols/soft/
# (softverbs' libibverbs.so.1), for profiles that name functions and lines:
#   make profile-vm PROFILE_LIB=build/symbols
#   LD_LIBRARY_PATH=build/symbols/soft:build/symbols valgrind --tool=callgrind ...
# Same code as `make` (LTO, one codegen unit); cargo's own target dir, so
# `make` is not rebuilt by it.
set -euo pipefail
cd "$(dirname "$0")/.."
T=build/symbols/target
export CARGO_PROFILE_RELEASE_DEBUG=line-tables-only
cargo build --release -p rdmacm -p softverbs --target-dir "$T" -q
mkdir -p build/symbols/soft
link() { # OUT STATICLIB MAP SONAME [LIBS]
	local out=$1 a=$2 map=$3 so=$4
	shift 4
	cc -shared -o "$out" -Wl,--whole-archive "$a" -Wl,--no-whole-archive -Wl,--version-script="$map" \
		-Wl,-soname,"$so" -Wl,--gc-sections -Wl,-z,relro,-z,now -Wl,--as-needed "$@" \
		-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
}
link build/symbols/librdmacm.so.1 "$T/release/librdmacm.a" librdmacm.map librdmacm.so.1 -libverbs
link build/symbols/soft/libibverbs.so.1 "$T/release/libsoftverbs.a" softverbs/libibverbs.map libibverbs.so.1
echo "build/symbols/librdmacm.so.1 and build/symbols/soft/libibverbs.so.1 (with symbols)"
