#!/bin/bash
# rdma-core's pyverbs RDMA-CM tests (tests.test_rdmacm: sync and async
# connections, RDMA read/write, UD, multicast join and leave, reject, an
# external QP) against one librdmacm. Run tests/pyverbs/prepare.sh first.
#
#   tests/pyverbs/run.sh [--lib DIR | --system] [--launcher CMD] [--label TEXT] NETDEV
#
# NETDEV: the network device whose address the tests use (lo on the soft
# fabric, the guest's netdev in tests/vm). Prints one PASS/FAIL/SKIP line per
# test; a skip is allowed only for the mlx5-only tests, and a run that ran
# no test fails. Exit status 0 iff nothing failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
lib=build/lib launcher= label=" (ours)"
while [ $# -gt 0 ]; do
	case $1 in
	--lib) lib=$2; shift 2 ;;
	--system) lib=; label=" (debian)"; shift ;;
	--launcher) launcher=$2; shift 2 ;;
	--label) label=$2; shift 2 ;;
	*) break ;;
	esac
done
netdev=${1:?usage: run.sh [--lib DIR | --system] [--launcher CMD] NETDEV}
# The tests run in their own directory: a launcher given by a relative path is made absolute.
read -ra lw <<<"$launcher"
[ ${#lw[@]} -gt 0 ] && [ -e "${lw[0]}" ] && lw[0]=$(cd "$(dirname "${lw[0]}")" && pwd)/$(basename "${lw[0]}")
dir=build/pyverbs-tests
[ -e "$dir/run_cm.py" ] || { echo "FAIL pyverbs$label: $dir missing (tests/pyverbs/prepare.sh)"; exit 1; }
# (env's options before its assignments)
if [ -n "$lib" ]; then env=(LD_LIBRARY_PATH="$(cd "$lib" && pwd)"); else env=(-u LD_LIBRARY_PATH); fi
env+=(PYVERBS_NETDEV="$netdev" PYTHONDONTWRITEBYTECODE=1)
log=$(mktemp); trap 'rm -f "$log"' EXIT
# The system interpreter: pyverbs is built for it.
(cd "$dir" && env "${env[@]}" timeout 600 "${lw[@]}" /usr/bin/python3 run_cm.py -v -k test_rdmacm) >"$log" 2>&1
rc=$?
fails=0 ran=0
while read -r _ outcome id why; do
	name=${id##*.}
	case $outcome in
	ok) ran=$((ran + 1)); echo "PASS pyverbs $name$label" ;;
	skipped)
		if [[ $id == *mlx5* ]]; then echo "SKIP pyverbs $name$label: $why"
		else fails=$((fails + 1)); echo "FAIL pyverbs $name$label: skipped: $why"; fi ;;
	*) ran=$((ran + 1)); fails=$((fails + 1)); echo "FAIL pyverbs $name$label: $outcome $why" ;;
	esac
done < <(grep '^RESULT ' "$log")
if [ "$ran" = 0 ] || { [ "$rc" != 0 ] && [ "$fails" = 0 ]; }; then
	fails=$((fails + 1)); echo "FAIL pyverbs$label: unittest exited $rc after $ran tests"
fi
if [ "$fails" != 0 ]; then sed 's/^/    | /' "$log" | tail -n 60; fi
echo "pyverbs$label: $ran ran, $fails failed"
[ "$fails" = 0 ]
