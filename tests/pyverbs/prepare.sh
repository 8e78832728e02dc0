#!/bin/bash
# Copies rdma-core's pyverbs tests (Debian's python3-pyverbs ships them,
# partly gzipped, in /usr/share/doc/rdma-core/tests) to build/pyverbs-tests
# with our runner (run_cm.py), on the host: the qemu guest has no network and
# a read-only view of the checkout. Without the shipped copy (a dpkg
# configuration that drops /usr/share/doc), the files come from the package
# itself (apt-get download).
set -euo pipefail
cd "$(dirname "$0")/../.."
src=/usr/share/doc/rdma-core/tests
out=build/pyverbs-tests
rm -rf "$out"; mkdir -p build
if [ ! -e "$src/run_tests.py" ]; then
	tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
	(cd "$tmp" && apt-get download -q python3-pyverbs >/dev/null && dpkg-deb -x python3-pyverbs_*.deb x)
	src=$tmp/x/usr/share/doc/rdma-core/tests
	[ -e "$src/run_tests.py" ] || { echo "prepare.sh: no pyverbs tests in python3-pyverbs" >&2; exit 1; }
fi
cp -r "$src" "$out"
find "$out" -name '*.gz' -exec gunzip -f {} +
cp tests/pyverbs/run_cm.py "$out/"
