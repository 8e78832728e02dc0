#!/bin/bash
# Builds the rsocket C checks and the plain sockets programs of c-examples/rsocket
# into build/rsocket/ (the host builds them for the VM too: compiling under TCG
# is slow). Prints "FAIL build NAME" with the compiler's errors for each that
# does not build; exit status 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build/rsocket
CC=${CC:-cc}
rc=0
for src in c-examples/rsocket/*.c; do
	n=$(basename "$src" .c)
	# echo and preload_calls are plain sockets programs: no librdmacm
	case $n in echo|preload_calls) libs=() ;; *) libs=(-Lbuild/lib -lrdmacm) ;; esac
	# Written beside and renamed: make check's other lane may be running this program.
	if $CC -Wall -Wextra -Werror -O1 -g -pthread -Iinclude -Ic-examples -Ic-examples/rsocket -o "build/rsocket/$n.$$" "$src" \
		"${libs[@]}" 2> "build/rsocket/$n.build.log.$$"; then
		mv -f "build/rsocket/$n.$$" "build/rsocket/$n"
	else
		echo "FAIL build $n"; tail -8 "build/rsocket/$n.build.log.$$"; rc=1
	fi
	mv -f "build/rsocket/$n.build.log.$$" "build/rsocket/$n.build.log"
done
exit $rc
