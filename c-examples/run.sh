#!/usr/bin/env bash
# Build and run the c-examples (one small C program per man-page promise).
#
#   c-examples/run.sh [program ...]      (default: every c-examples/*.c)
#
# Every program is built against our headers (include/) and linked with our
# library (LIBDIR, default build/lib), run with LD_LIBRARY_PATH=LIBDIR and,
# if that passed, run once more under valgrind (unless VALGRIND=0 or valgrind
# is missing).
# Programs whose first line is "/* c-example: common" only test behaviour that
# rdma-core's librdmacm has too: they are also built against /usr/include and
# Debian's library and, when both runs finished without skipping, their
# stdout must be identical.  A program exits 0 (all "ok"), 1 (a "FAIL" line)
# or 77 (single "skip: <reason>" line: precondition missing in the library
# under test, e.g. Debian's has no event channel without a device).  Our
# library must never skip.
#
# SOFT=1 runs ours on the soft fabric (build/lib/soft first on the library
# path, one device present): no Debian comparison, and the one program about
# having no device at all (no_device_enodev) is left out.
#
# Environment: CC (default cc), LIBDIR (default build/lib), VALGRIND (0 to
# disable), DEBIAN_LIB (default: the system librdmacm.so.1; DEBIAN_LIB=none
# disables the comparison runs). BUILD_ONLY=1 compiles every program and runs
# none; NO_BUILD=1 runs the binaries already built (the qemu guest, where
# compiling under TCG would cost more than the runs).
set -euo pipefail

# LIBDIR from the environment is relative to the caller's directory; the
# default is the repository's build/lib.
LIBDIR=${LIBDIR:-}
if [ -n "$LIBDIR" ] && [ "${LIBDIR#/}" = "$LIBDIR" ]; then
	LIBDIR=$PWD/$LIBDIR
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CC=${CC:-cc}
LIBDIR=${LIBDIR:-build/lib}
VALGRIND=${VALGRIND:-1}
# The soft-fabric run has its own directory: make check runs it (test-soft)
# beside the no-device run (test-c), and each compares the .out files it wrote.
OUT=build/c-examples
[ "${SOFT:-0}" = 1 ] && OUT=build/c-examples-soft
CFLAGS=(-Wall -Wextra -Werror -O1 -g -pthread)
TIMEOUT=20

multiarch=$("$CC" -print-multiarch 2>/dev/null || true)
DEBIAN_LIB=${DEBIAN_LIB:-/usr/lib/${multiarch:-x86_64-linux-gnu}/librdmacm.so.1}

passed=0
failed=0
skipped=0

pass() { passed=$((passed + 1)); echo "PASS $*"; }
skip() { skipped=$((skipped + 1)); echo "SKIP $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }

# Indented excerpt of a file, for failure reports.
show() {
	[ -s "$1" ] && head -n 40 "$1" | sed 's/^/    | /'
	return 0
}

summary() {
	echo "$passed passed, $failed failed, $skipped skipped"
	[ "$failed" -eq 0 ]
}

mkdir -p "$OUT/ours" "$OUT/debian"

if [ ! -e "$LIBDIR/librdmacm.so.1" ]; then
	fail "setup: $LIBDIR/librdmacm.so.1 not found (run make first)"
	summary || exit 1
fi
abs_libdir=$(cd "$LIBDIR" && pwd)
extra_libpath=""
if [ "${SOFT:-0}" = 1 ]; then
	extra_libpath="$abs_libdir/soft:"
	DEBIAN_LIB=none
	export RDMACM_TEST_DEVICES=1
fi
if [ -e "$abs_libdir/librdmacm.so" ]; then
	ours_link=(-L"$abs_libdir" -lrdmacm)
else
	ours_link=("$abs_libdir/librdmacm.so.1")
fi
ours_link+=(-Wl,-rpath-link,"$abs_libdir")

have_debian=1
debian_why=
if [ "$DEBIAN_LIB" = none ]; then
	have_debian=0
	debian_why="disabled (DEBIAN_LIB=none)"
elif [ ! -e "$DEBIAN_LIB" ]; then
	have_debian=0
	debian_why="$DEBIAN_LIB not installed"
elif [ ! -e /usr/include/rdma/rdma_cma.h ]; then
	have_debian=0
	debian_why="/usr/include/rdma/rdma_cma.h not installed (librdmacm-dev)"
fi

# compile BIN SOURCE ARGS...: the compiler's output in BIN.build
compile() {
	local bin=$1
	shift
	[ "${NO_BUILD:-0}" = 1 ] && [ -x "$bin" ] && return 0
	"$CC" "${CFLAGS[@]}" -o "$bin" "$@" >"$bin.build" 2>&1
}

use_valgrind=0
if [ "$VALGRIND" != 0 ] && command -v valgrind >/dev/null 2>&1; then
	use_valgrind=1
fi

if [ $# -gt 0 ]; then
	progs=("$@")
else
	progs=()
	for src in c-examples/*.c; do
		case "$(basename "$src")" in dev_*) continue;; esac  # device programs: run-device.sh
		[ "${SOFT:-0}" = 1 ] && [ "$(basename "$src")" = no_device_enodev.c ] && continue
		progs+=("$(basename "$src" .c)")
	done
fi

# run <log-prefix> <binary> [env...]: runs the binary, stdout to <prefix>.out,
# stderr to <prefix>.err; sets $rc.
run() {
	local prefix=$1 bin=$2
	shift 2
	rc=0
	env "$@" timeout "$TIMEOUT" "$bin" >"$prefix.out" 2>"$prefix.err" </dev/null || rc=$?
}

for prog in "${progs[@]}"; do
	prog=$(basename "$prog" .c)
	src=c-examples/$prog.c
	if [ ! -f "$src" ]; then
		fail "$prog: no such program $src"
		continue
	fi
	kind=$(sed -n '1s/^\/\* c-example: \([a-z]*\).*/\1/p' "$src")
	if [ "$kind" != common ] && [ "$kind" != ours ]; then
		fail "$prog: first line must be '/* c-example: common' or '/* c-example: ours'"
		continue
	fi

	# --- ours ------------------------------------------------------------
	ours_bin=$OUT/ours/$prog
	ours_ok=0
	if ! compile "$ours_bin" -DRDMACM_RS_1_4 -Iinclude -Ic-examples "$src" "${ours_link[@]}"; then
		fail "$prog (ours): build failed"
		show "$ours_bin.build"
	elif [ "${BUILD_ONLY:-0}" = 1 ]; then
		:
	else
		# Make sure the loader really picks our library.
		deps=$(LD_LIBRARY_PATH=$abs_libdir ldd "$ours_bin" 2>&1 || true)
		if ! grep -qF "librdmacm.so.1 => $abs_libdir/librdmacm.so.1 " <<<"$deps"; then
			fail "$prog (ours): does not load $abs_libdir/librdmacm.so.1"
			sed 's/^/    | /' <<<"$deps"
		else
			run "$ours_bin" "$ours_bin" LD_LIBRARY_PATH="$extra_libpath$abs_libdir"
			case $rc in
			0)
				ours_ok=1
				pass "$prog (ours)"
				;;
			77)
				fail "$prog (ours): skipped, but our library must never skip"
				show "$ours_bin.out"
				;;
			124)
				fail "$prog (ours): timed out after ${TIMEOUT}s"
				show "$ours_bin.out"
				show "$ours_bin.err"
				;;
			*)
				fail "$prog (ours): exit status $rc"
				show "$ours_bin.out"
				show "$ours_bin.err"
				;;
			esac
			if [ "$use_valgrind" = 1 ] && [ "$ours_ok" = 1 ]; then
				rc=0
				LD_LIBRARY_PATH=$extra_libpath$abs_libdir timeout "$TIMEOUT" \
					valgrind --error-exitcode=1 --leak-check=no -q "$ours_bin" \
					>"$ours_bin.vg.out" 2>"$ours_bin.vg.err" </dev/null || rc=$?
				if [ "$rc" -eq 0 ]; then
					pass "$prog (ours, valgrind)"
				else
					fail "$prog (ours, valgrind): exit status $rc"
					show "$ours_bin.vg.out"
					show "$ours_bin.vg.err"
				fi
			fi
		fi
	fi

	# --- Debian's library, common programs only ----------------------------
	[ "$kind" = common ] || continue
	if [ "$have_debian" = 0 ]; then
		skip "$prog (debian): $debian_why"
		continue
	fi
	deb_bin=$OUT/debian/$prog
	if ! compile "$deb_bin" -Ic-examples "$src" "$DEBIAN_LIB"; then
		fail "$prog (debian): build against /usr/include failed"
		show "$deb_bin.build"
		continue
	fi
	[ "${BUILD_ONLY:-0}" = 1 ] && continue
	run "$deb_bin" "$deb_bin" -u LD_LIBRARY_PATH -u LD_PRELOAD
	case $rc in
	0)
		if [ "$ours_ok" = 1 ]; then
			if cmp -s "$ours_bin.out" "$deb_bin.out"; then
				pass "$prog (debian, same stdout as ours)"
			else
				fail "$prog (debian): stdout differs from ours (< ours, > debian)"
				diff "$ours_bin.out" "$deb_bin.out" | head -n 40 | sed 's/^/    | /' || true
			fi
		else
			pass "$prog (debian; not compared, ours failed)"
		fi
		;;
	77)
		skip "$prog (debian): $(head -n 1 "$deb_bin.out")"
		;;
	*)
		fail "$prog (debian): exit status $rc"
		show "$deb_bin.out"
		show "$deb_bin.err"
		;;
	esac
done

# A traced call returns through another branch of the C skin (`entry!`'s
# `finish`) than an untraced one: bad_args (every check a -1 and its errno)
# must print the same under RDMACM_RS_TRACE, and the trace must log errno.
if [ "${BUILD_ONLY:-0}" != 1 ] && [ -x "$OUT/ours/bad_args" ] && [ -s "$OUT/ours/bad_args.out" ]; then
	t=$OUT/ours/bad_args.trace
	rm -f "$t"
	run "$OUT/ours/bad_args.traced" "$OUT/ours/bad_args" LD_LIBRARY_PATH="$extra_libpath$abs_libdir" RDMACM_RS_TRACE="$PWD/$t"
	if [ "$rc" -eq 0 ] && cmp -s "$OUT/ours/bad_args.out" "$OUT/ours/bad_args.traced.out" && grep -q "errno 22 " "$t"; then
		pass "bad_args (ours, RDMACM_RS_TRACE): same results, errno in the trace"
	else
		fail "bad_args (ours, RDMACM_RS_TRACE): exit status $rc"
		diff "$OUT/ours/bad_args.out" "$OUT/ours/bad_args.traced.out" | head -n 20 | sed 's/^/    | /' || true
		show "$t"
	fi
fi

summary
