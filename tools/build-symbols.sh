#!/bin/bash
# tools/build-symbols.sh: the release libraries again, with line tables and not
# stripped, in build/symbols/ (librdmacm.so.1) and build/symbols/soft/
# (softverbs' libibverbs.so.1), for profiles that name functions and lines:
#   make profile-vm PROFILE_LIB=build/symbols
#   LD_LIBRARY_PATH=build/symbols/soft:build/symbols valgrind --tool=callgrind ...
# The Makefile's own recipes (same code: LTO, one codegen unit) with their own
# cargo target dir, so build/lib is neither touched nor rebuilt by it.
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO_PROFILE_RELEASE_DEBUG=line-tables-only \
	make -s lib softverbs TARGET_DIR=build/symbols/target LIBDIR_OUT=build/symbols LINK_STRIP=
echo "build/symbols/librdmacm.so.1 and build/symbols/soft/libibverbs.so.1 (with symbols)"
