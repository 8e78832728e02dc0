# Shared by the soft-fabric test scripts.

. "$(dirname "${BASH_SOURCE[0]}")/../vm/lib.sh"   # wait_output, wait_port

# suite NAME COMMAND PACKAGE: the start of a suite that runs Debian's COMMAND (from PACKAGE)
# under rdmacm-soft: $L, an emptied $out (build/soft-tests/NAME), the counters, and
# ok/ko lines prefixed with NAME (ko NAME WHY [FILE...] shows each file's tail). Exits
# failed if COMMAND is missing. suite_end prints the totals and gives the exit status.
suite() {
	SUITE=$1
	L=$PWD/build/bin/rdmacm-soft
	out=build/soft-tests/$1; rm -rf "$out"; mkdir -p "$out"
	pass=0; fail=0
	ok() { echo "PASS $SUITE $1"; pass=$((pass+1)); }
	ko() {
		echo "FAIL $SUITE $1: $2"; fail=$((fail+1)); shift 2
		local f; for f in "$@"; do [ -s "$f" ] && { echo "--- $f"; tail -n 8 "$f"; }; done
	}
	suite_end() { echo "$SUITE: $pass passed, $fail failed"; echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; }
	if ! command -v "$2" > /dev/null; then ko setup "$3 missing (tools/install-deps.sh)"; suite_end; exit 1; fi
}
