#!/usr/bin/env bash
# Build and run the device-level programs c-examples/dev_*.c (they need an
# RDMA device with an IP address: rxe/siw in tests/vm, or the soft fabric).
#
#   c-examples/run-device.sh [--lib DIR | --system] [--launcher CMD]
#                            [--expect SUFFIX | --save SUFFIX] [--build-only | --no-build]
#                            ADDR [program ...]     (ADDR optional with --build-only)
#
#   --lib DIR     build against our include/ and DIR/librdmacm.so*, run with
#                 LD_LIBRARY_PATH=DIR (default: --lib build/lib)
#   --system      build against /usr/include, link the system -lrdmacm, run
#                 without LD_LIBRARY_PATH/LD_PRELOAD (Debian's library)
#   --launcher CMD  prefix for every run (word-split), e.g. "valgrind -q"
#   --expect SUFFIX  stdout must equal c-examples/expected/<prog>.SUFFIX.txt
#                 (SUFFIX,FALLBACK: the first of the two files that exists; the
#                 soft fabric uses soft,rxe: rxe's unless the provider answers differ)
#   --save SUFFIX    write stdout of passing programs to those files
#   --build-only / --no-build   split building (host) from running (guest)
#   ADDR          address of the device's netdev (also $RDMA_TEST_ADDR)
#
# A program exits 0 (every line "ok"), 1 (a "FAIL" line), 77 ("skip: ..."
# when the library under test has no device).  Prints PASS/FAIL/SKIP per
# program and a closing "N passed, M failed" line; exit status 0 iff no
# program failed.  Environment: CC (cc), TIMEOUT per program (90 s),
# OUT (build dir, default build/dev-examples/<ours|system>).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)

mode=lib libdir= launcher= expect= save= build=1 run=1
while [ $# -gt 0 ]; do
	case $1 in
	--lib) mode=lib libdir=$2; shift 2 ;;
	--lib=*) mode=lib libdir=${1#--lib=}; shift ;;
	--system) mode=system; shift ;;
	--launcher) launcher=$2; shift 2 ;;
	--expect) expect=$2; shift 2 ;;
	--save) save=$2; shift 2 ;;
	--build-only) run=0; shift ;;
	--no-build) build=0; shift ;;
	-h|--help) sed -n '2,/^set -uo/{/^#/p}' "$0"; exit 0 ;;
	--) shift; break ;;
	-*) echo "run-device.sh: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
done
addr=${RDMA_TEST_ADDR:-}
case ${1:-} in
dev_*|*/dev_*) ;;              # no ADDR given (fine with --build-only)
'') ;;
*) addr=$1; shift ;;
esac
if [ "$run" = 1 ] && [ -z "$addr" ]; then
	echo "run-device.sh: no ADDR (argument or RDMA_TEST_ADDR)" >&2
	exit 2
fi

CC=${CC:-cc}
TIMEOUT=${TIMEOUT:-90}
CFLAGS=(-Wall -Wextra -Werror -O1 -g -pthread)
if [ "$mode" = lib ]; then
	libdir=${libdir:-$root/build/lib}
	case $libdir in /*) ;; *) libdir=$PWD/$libdir ;; esac
	OUT=${OUT:-$root/build/dev-examples/ours}
	inc=(-I"$root/include" -I"$here")
	link=(-L"$libdir" -lrdmacm -libverbs -Wl,-rpath-link,"$libdir")
	runenv=(env LD_LIBRARY_PATH="$libdir")
	label=ours
else
	OUT=${OUT:-$root/build/dev-examples/system}
	inc=(-I"$here")
	link=(-lrdmacm -libverbs)
	runenv=(env -u LD_LIBRARY_PATH -u LD_PRELOAD)
	label=system
fi
mkdir -p "$OUT" 2>/dev/null

if [ $# -gt 0 ]; then
	progs=("$@")
else
	progs=()
	for src in "$here"/dev_*.c; do progs+=("$(basename "$src" .c)"); done
fi

passed=0 failed=0 skipped=0
show() { [ -s "$1" ] && head -n 60 "$1" | sed 's/^/    | /'; return 0; }

for prog in "${progs[@]}"; do
	prog=$(basename "$prog" .c)
	bin=$OUT/$prog
	if [ "$build" = 1 ]; then
		if ! "$CC" "${CFLAGS[@]}" "${inc[@]}" -o "$bin" "$here/$prog.c" "${link[@]}" \
			>"$bin.build" 2>&1; then
			echo "FAIL $prog ($label): build failed"
			show "$bin.build"
			failed=$((failed + 1))
			continue
		fi
	fi
	[ "$run" = 1 ] || { echo "built $bin"; continue; }
	if [ ! -x "$bin" ]; then
		echo "FAIL $prog ($label): $bin not built"
		failed=$((failed + 1))
		continue
	fi
	if [ "$mode" = lib ]; then
		deps=$(LD_LIBRARY_PATH=$libdir ldd "$bin" 2>&1)
		if ! grep -q "librdmacm.so.1 => $libdir/librdmacm.so.1 " <<<"$deps"; then
			echo "FAIL $prog ($label): does not load $libdir/librdmacm.so.1"
			failed=$((failed + 1))
			continue
		fi
	fi
	rc=0
	# shellcheck disable=SC2086
	"${runenv[@]}" timeout -k 5 "$TIMEOUT" $launcher "$bin" "$addr" \
		>"$bin.out" 2>"$bin.err" </dev/null || rc=$?
	exp= sfx=
	# SUFFIX,FALLBACK: the first suffix with an expected file for this program.
	for sfx in ${expect//,/ }; do
		exp=$here/expected/$prog.$sfx.txt
		[ -f "$exp" ] && break
	done
	case $rc in
	0)
		if [ -n "$exp" ] && [ ! -f "$exp" ]; then
			echo "FAIL $prog ($label): passed, but there is no $exp"
			failed=$((failed + 1))
		elif [ -n "$exp" ] && ! cmp -s "$exp" "$bin.out"; then
			echo "FAIL $prog ($label): passed, but stdout differs from expected/$prog.$sfx.txt (< expected, > got)"
			diff "$exp" "$bin.out" | head -n 40 | sed 's/^/    | /'
			failed=$((failed + 1))
		else
			echo "PASS $prog ($label)${exp:+, same output as expected/$prog.$sfx.txt}"
			passed=$((passed + 1))
			if [ -n "$save" ]; then
				mkdir -p "$here/expected"
				cp "$bin.out" "$here/expected/$prog.$save.txt"
			fi
		fi
		;;
	77)
		echo "SKIP $prog ($label): $(grep -m1 '^skip:' "$bin.out" || head -n 1 "$bin.out")"
		skipped=$((skipped + 1))
		;;
	124|137)
		echo "FAIL $prog ($label): timed out after ${TIMEOUT}s"
		show "$bin.out"; show "$bin.err"
		failed=$((failed + 1))
		;;
	*)
		echo "FAIL $prog ($label): exit status $rc"
		show "$bin.out"; show "$bin.err"
		failed=$((failed + 1))
		;;
	esac
done

[ "$skipped" -gt 0 ] && echo "($skipped skipped)"
if [ "$run" = 0 ]; then
	# Nothing ran: say so, without a closing line a CI reader would take for "no test".
	[ "$failed" -eq 0 ] && echo "build only: every program built" || echo "build only: $failed failed to build"
	[ "$failed" -eq 0 ]; exit
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
