#!/bin/bash
# `make install` / `make uninstall`: a C program builds with
# `cc prog.c $(pkg-config --cflags --libs librdmacm)` against an installed copy
# and runs against it; DESTDIR staging works; uninstall removes what install put.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(realpath -m build/abi-tests/install); rm -rf "$tmp"; mkdir -p "$tmp"
pass=0; fail=0
ok()  { echo "PASS $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1"; fail=$((fail+1)); }

prefix=$tmp/prefix
make -s install PREFIX="$prefix" >/dev/null
for f in lib/librdmacm.so.1.5.0 lib/librdmacm.so.1 lib/librdmacm.so include/rdma/rdma_cma.h \
         include/rdma/rdma_verbs.h include/rdma/rsocket.h lib/pkgconfig/librdmacm.pc; do
  [ -e "$prefix/$f" ] || bad "installed $f missing"
done
[ "$(readlink "$prefix/lib/librdmacm.so.1")" = librdmacm.so.1.5.0 ] && ok "soname link installed" || bad "soname link"

cat > "$tmp/prog.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>
int main(void)
{
	struct rdma_addrinfo hints, *res;
	memset(&hints, 0, sizeof hints);
	hints.ai_flags = RAI_PASSIVE | RAI_NUMERICHOST;
	if (rdma_getaddrinfo("127.0.0.1", "7471", &hints, &res))
		return 1;
	printf("%s %d\n", rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), res->ai_port_space);
	rdma_freeaddrinfo(res);
	return 0;
}
C
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
if ${CC:-cc} -Wall -Werror -o "$tmp/prog" "$tmp/prog.c" $(pkg-config --cflags --libs librdmacm); then
  ok "pkg-config build against the installed copy"
  out=$(LD_LIBRARY_PATH=$prefix/lib "$tmp/prog")
  [ "$out" = "RDMA_CM_EVENT_ESTABLISHED 262" ] && ok "program runs: $out" || bad "program output '$out'"
  # Whole output first: under pipefail, grep -q leaving early can SIGPIPE ldd (a
  # script writing line by line) and fail the pipeline after a match.
  libs=$(LD_LIBRARY_PATH=$prefix/lib ldd "$tmp/prog")
  grep -q "librdmacm.so.1 => $prefix/lib/librdmacm.so.1" <<< "$libs" \
    && ok "program loads the installed librdmacm" || bad "program did not load the installed library"
else bad "pkg-config build"; fi
grep -q -- "-I$prefix/include" <<< "$(pkg-config --cflags librdmacm)" && ok "pkg-config --cflags points at the installed headers" || bad "pkg-config --cflags"

make -s uninstall PREFIX="$prefix" >/dev/null
left=$(find "$prefix" -type f -o -type l | wc -l)
[ "$left" -eq 0 ] && ok "uninstall removes every installed file" || { bad "uninstall left:"; find "$prefix" -type f -o -type l; }

make -s install PREFIX=/usr DESTDIR="$tmp/stage" >/dev/null
[ -e "$tmp/stage/usr/lib/librdmacm.so.1" ] && grep -q '^libdir=/usr/lib$' "$tmp/stage/usr/lib/pkgconfig/librdmacm.pc" \
  && ok "DESTDIR staging keeps the final paths in librdmacm.pc" || bad "DESTDIR staging"
make -s uninstall PREFIX=/usr DESTDIR="$tmp/stage" >/dev/null
[ "$(find "$tmp/stage" -type f -o -type l | wc -l)" -eq 0 ] && ok "DESTDIR uninstall" || bad "DESTDIR uninstall"
make -s lib >/dev/null   # restore build/lib/librdmacm.pc for the default prefix

echo "install: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
