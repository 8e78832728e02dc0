#!/usr/bin/env bash
# Load-time ABI check of our librdmacm.so.1 against Debian's consumers.
#
#   abi-tests/consumers.sh [LIBDIR]          (default LIBDIR: build/lib)
#
# Each consumer (the 13 rdmacm-utils programs, perftest's ib_send_lat /
# ib_write_bw / ib_read_lat, qperf, and pyverbs via /usr/bin/python3) is run
# with LD_LIBRARY_PATH=LIBDIR and LD_BIND_NOW=1 and a harmless argument that
# only prints usage (no server is ever started; every run is under
# `timeout 10`).  A consumer FAILs when
#   * stderr shows a loader error (symbol lookup error, undefined symbol,
#     version ... not found, no version information, error while loading),
#   * LD_DEBUG=bindings shows an rdma_*/r* socket symbol, or anything from a
#     librdmacm file, bound somewhere other than LIBDIR/librdmacm.so.1, an
#     unversioned binding to ours, or no binding to ours at all,
#   * its exit status or stdout differs from a run with the system library.
# Missing consumer packages are reported as SKIP (install: rdmacm-utils
# perftest qperf python3-pyverbs).
set -euo pipefail

# A LIBDIR given on the command line is relative to the caller's directory;
# the default is the repository's build/lib.
LIBDIR=${1:-}
if [ -n "$LIBDIR" ] && [ "${LIBDIR#/}" = "$LIBDIR" ]; then
	LIBDIR=$PWD/$LIBDIR
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LIBDIR=${LIBDIR:-build/lib}
TIMEOUT=10

passed=0
failed=0
skipped=0

summary() {
	echo "$passed passed, $failed failed, $skipped skipped"
	[ "$failed" -eq 0 ]
}

if [ ! -e "$LIBDIR/librdmacm.so.1" ]; then
	echo "FAIL setup: $LIBDIR/librdmacm.so.1 not found (run make first)"
	failed=1
	summary || exit 1
fi
abs_libdir=$(cd "$LIBDIR" && pwd)
ours=$abs_libdir/librdmacm.so.1

work=$(mktemp -d "${TMPDIR:-/tmp}/rdmacm-consumers.XXXXXX")
trap 'rm -rf "$work"' EXIT

# name | package | command line (word-split; first word is the program)
consumers=(
	"rping|rdmacm-utils|/usr/bin/rping -h"
	"udaddy|rdmacm-utils|/usr/bin/udaddy -h"
	"mckey|rdmacm-utils|/usr/bin/mckey -h"
	"ucmatose|rdmacm-utils|/usr/bin/ucmatose -h"
	"cmtime|rdmacm-utils|/usr/bin/cmtime -h"
	"rdma_client|rdmacm-utils|/usr/bin/rdma_client -h"
	"rdma_server|rdmacm-utils|/usr/bin/rdma_server -h"
	"rdma_xclient|rdmacm-utils|/usr/bin/rdma_xclient -h"
	"rdma_xserver|rdmacm-utils|/usr/bin/rdma_xserver -h"
	"rstream|rdmacm-utils|/usr/bin/rstream -h"
	"riostream|rdmacm-utils|/usr/bin/riostream -h"
	"udpong|rdmacm-utils|/usr/bin/udpong -h"
	"rcopy|rdmacm-utils|/usr/bin/rcopy -h"
	"ib_send_lat|perftest|/usr/bin/ib_send_lat --help"
	"ib_write_bw|perftest|/usr/bin/ib_write_bw --help"
	"ib_read_lat|perftest|/usr/bin/ib_read_lat --help"
	"qperf|qperf|/usr/bin/qperf --help"
	"pyverbs.cmid|python3-pyverbs|/usr/bin/python3 -c import\ pyverbs.cmid,\ pyverbs.device"
)

# Symbols that librdmacm provides (rsocket API); rdma_* is matched by prefix.
rsocket_syms=" rsocket rbind rlisten raccept rconnect rshutdown rclose rrecv rrecvfrom rrecvmsg rsend rsendto rsendmsg rread rreadv rwrite rwritev rpoll rselect rgetpeername rgetsockname rsetsockopt rgetsockopt rfcntl riomap riounmap riowrite repoll_create repoll_ctl repoll_wait "

loader_errors='symbol lookup error|undefined symbol|version .*not found|no version information available|error while loading shared libraries'

# check_bindings <ld-debug-file>: prints problems, one per line, then
# "bound N" (number of consumer bindings to our library).
check_bindings() {
	awk -v ours="$ours" -v rs="$rsocket_syms" '
	/binding file / && / normal symbol `/ {
		line = $0
		sub(/^.*binding file /, "", line)
		# line: SRC [n] to DST [n]: normal symbol `SYM'"'"' [VER]
		src = line; sub(/ \[[0-9]+\] to .*$/, "", src)
		dst = line; sub(/^.* \[[0-9]+\] to /, "", dst); sub(/ \[[0-9]+\]: normal symbol .*$/, "", dst)
		sym = line; sub(/^.*normal symbol `/, "", sym)
		ver = sym
		sub(/'"'"'.*$/, "", sym)
		if (ver ~ /'"'"' \[/) { sub(/^.*'"'"' \[/, "", ver); sub(/\].*$/, "", ver) } else ver = ""
		n = split(dst, parts, "/"); base = parts[n]
		mine = (sym ~ /^rdma_/) || index(rs, " " sym " ") > 0 || base ~ /^librdmacm\.so/
		if (!mine) next
		if (src == ours) next          # our library binding to itself
		if (dst != ours) {
			key = sym " -> " dst
			if (!(key in seen)) { seen[key] = 1; print "bound elsewhere: " src ": " key }
			next
		}
		bound++
		if (ver !~ /^RDMACM_1\.[0-9]+$/ && !((sym " unversioned") in seen)) {
			seen[sym " unversioned"] = 1
			print "unversioned binding: " src ": " sym " [" ver "]"
		}
	}
	END {
		if (bound == 0) print "no symbol bound to " ours
		print "bound " bound + 0
	}
	' "$1"
}

for entry in "${consumers[@]}"; do
	IFS='|' read -r name pkg cmdline <<<"$entry"
	# shellcheck disable=SC2206 # intentional word splitting (backslash-escaped spaces kept)
	eval "cmd=($cmdline)"
	if [ ! -x "${cmd[0]}" ]; then
		skipped=$((skipped + 1))
		echo "SKIP $name: ${cmd[0]} not installed (apt-get install $pkg)"
		continue
	fi
	dir=$work/$name
	mkdir -p "$dir/ld"

	rc=0
	timeout "$TIMEOUT" env LD_LIBRARY_PATH="$abs_libdir" LD_BIND_NOW=1 \
		LD_DEBUG=bindings LD_DEBUG_OUTPUT="$dir/ld/out" \
		"${cmd[@]}" >"$dir/stdout" 2>"$dir/stderr" </dev/null || rc=$?

	ref_rc=0
	timeout "$TIMEOUT" env -u LD_LIBRARY_PATH -u LD_PRELOAD LD_BIND_NOW=1 \
		"${cmd[@]}" >"$dir/ref.stdout" 2>"$dir/ref.stderr" </dev/null || ref_rc=$?

	problems=()
	if grep -Eq "$loader_errors" "$dir/stderr"; then
		while IFS= read -r l; do problems+=("stderr: $l"); done \
			< <(grep -E "$loader_errors" "$dir/stderr" | head -n 10)
	fi
	if [ "$rc" -eq 124 ]; then
		problems+=("timed out after ${TIMEOUT}s")
	fi
	if [ "$rc" -ne "$ref_rc" ]; then
		problems+=("exit status $rc, with the system library $ref_rc")
	fi
	if ! cmp -s "$dir/stdout" "$dir/ref.stdout"; then
		problems+=("stdout differs from the run with the system library")
	fi
	cat "$dir"/ld/out.* >"$dir/bindings" 2>/dev/null || true
	nb=0
	while IFS= read -r l; do
		case $l in
		"bound "*) nb=${l#bound } ;;
		*) problems+=("$l") ;;
		esac
	done < <(check_bindings "$dir/bindings")
	if [ ${#problems[@]} -gt 20 ]; then
		problems=("${problems[@]:0:20}" "...")
	fi

	if [ ${#problems[@]} -eq 0 ]; then
		passed=$((passed + 1))
		echo "PASS $name (exit $rc, $nb bindings to ours)"
	else
		failed=$((failed + 1))
		echo "FAIL $name: ${cmd[*]}"
		for p in "${problems[@]}"; do
			echo "    | $p"
		done
		if ! grep -Eq "$loader_errors" "$dir/stderr"; then
			head -n 5 "$dir/stderr" | sed 's/^/    | stderr: /'
		fi
	fi
done

summary
