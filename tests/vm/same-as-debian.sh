#!/bin/bash
# Runs rdmacm-utils pairs (rdmacm-utils-tests.sh names) with Debian's library
# on both sides, then with ours, and compares what they printed: for pairs
# that fail on this device with Debian's library too (udaddy and mckey on siw,
# which has no UD QPs), ours must fail exactly the same way. Runs inside the
# guest. Prints one PASS/FAIL line per pair; exit status = failures.
#   tests/vm/same-as-debian.sh NAME...      (OURS_LIB: default build/lib)
set -uo pipefail
cd "$(dirname "$0")/../.."
ours=${OURS_LIB:-$PWD/build/lib}
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fails=0
for name in "$@"; do
	for lib in debian ours; do
		l=; [ $lib = ours ] && l=$ours
		# T: a server that waits for a client that never comes is stopped by its timeout
		# (rc 124 with either library); SRV_DELAY: the client starts after a fixed wait
		# (a failing mckey never says it joined); TAILN: every line of both sides.
		TESTS=$name T=${T:-5} SRV_DELAY=1 TAILN=100 SRV_LIB=$l CLI_LIB=$l \
			bash tests/vm/rdmacm-utils-tests.sh >"$out/$lib" 2>&1
		# the client's wall time is the only thing allowed to differ
		sed -i -E 's/(client output \(rc=[0-9]+), [0-9.]+s\)/\1)/' "$out/$lib"
	done
	if ! grep -q "^--- client output" "$out/debian"; then
		echo "FAIL $name (ours): the pair did not run"; sed 's/^/    | /' "$out/debian"; fails=$((fails + 1))
	elif diff -q "$out/debian" "$out/ours" >/dev/null; then
		what=$(grep -m1 -E "unable|error|fail" "$out/debian" || echo "same output")
		echo "PASS $name (ours): ends as with Debian's library, both sides' output and status equal ($what)"
	else
		echo "FAIL $name (ours): differs from Debian's library (< Debian's, > ours)"
		diff "$out/debian" "$out/ours" | sed 's/^/    | /'; fails=$((fails + 1))
	fi
done
exit $fails
