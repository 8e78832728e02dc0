#!/bin/bash
# Proves the export table of build/lib/soft/libibverbs.so.1 by reading it back with
# objdump/readelf: exactly softverbs/expected-symbols.txt (node + name, one default @@
# version each), nothing else defined, node chain like upstream's (1.0 <- 1.1 <- 1.5 <- ...
# <- 1.14; PRIVATE_34 and SOFTVERBS_1.0 alone), SONAME, NEEDED (no libnl), map fresh.
set -euo pipefail
cd "$(dirname "$0")/../.."
lib=${1:-build/lib/soft/libibverbs.so.1}
tmp=build/softverbs-tests; mkdir -p "$tmp"
pass=0; fail=0
ok()  { echo "PASS $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1"; fail=$((fail+1)); }

objdump -T "$lib" | grep -v '\*UND\*' | awk 'NF >= 6 && ($4 == ".text" || $4 == ".bss" || $4 == ".data") {print $(NF-1), $NF}' | sort > "$tmp/sym.got"
sort softverbs/expected-symbols.txt > "$tmp/sym.want"
if diff -u "$tmp/sym.want" "$tmp/sym.got" > "$tmp/sym.diff"; then ok "exported symbols and versions ($(wc -l < "$tmp/sym.got"))"
else bad "exported symbols differ:"; cat "$tmp/sym.diff"; fi

objdump -T "$lib" | awk 'NR>4 && NF>=6' | grep -v '\*UND\*' \
  | awk '!($4 == ".text" || $4 == ".bss" || $4 == ".data") && !($4 == "*ABS*" && $NF ~ /^(IBVERBS|SOFTVERBS)_/)' > "$tmp/stray.txt" || true
[ ! -s "$tmp/stray.txt" ] && ok "no stray exported symbols" || { bad "stray exported symbols:"; cat "$tmp/stray.txt"; }

dups=$(awk '{print $2}' "$tmp/sym.got" | uniq -d | wc -l)
hidden=$(objdump -T "$lib" | grep -v '\*UND\*' | grep -c '(IBVERBS\|(SOFTVERBS' || true)
[ "$dups" -eq 0 ] && [ "$hidden" -eq 0 ] && ok "one default (@@) version per symbol" || bad "duplicate or hidden versions"

objdump -T "$lib" > "$tmp/dynsyms.txt"  # a file, not a pipe: grep -q + pipefail can fail on SIGPIPE
grep -q 'DO \.bss.*IBVERBS_PRIVATE_34 verbs_allow_disassociate_destroy' "$tmp/dynsyms.txt" \
  && ok "verbs_allow_disassociate_destroy is a 1-byte data object" || bad "verbs_allow_disassociate_destroy is not a 1-byte data object"

readelf -V "$lib" > "$tmp/versions.txt"
chain_ok=1; prev=IBVERBS_1.0
for v in 1.1 1.5 1.6 1.7 1.8 1.9 1.10 1.11 1.12 1.13 1.14; do
  grep -A1 "Name: IBVERBS_$v\$" "$tmp/versions.txt" | grep -q "Parent 1: $prev" || chain_ok=0
  prev=IBVERBS_$v
done
for n in IBVERBS_PRIVATE_34 SOFTVERBS_1.0; do
  grep -A1 "Name: $n\$" "$tmp/versions.txt" | grep -q 'Parent' && chain_ok=0
  grep -q "Name: $n\$" "$tmp/versions.txt" || chain_ok=0
done
[ $chain_ok -eq 1 ] && ok "version nodes chain like upstream's; PRIVATE_34 and SOFTVERBS_1.0 stand alone" || { bad "version node chain"; grep -A1 'Name:' "$tmp/versions.txt"; }

soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = libibverbs.so.1 ] && ok "SONAME libibverbs.so.1" || bad "SONAME is '$soname'"
real=$(basename "$(readlink -f "$lib")")
[ "$real" = libibverbs.so.1.14.0 ] && ok "file name $real" || bad "file name $real"
needed=$(readelf -d "$lib" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
extra=$(echo "$needed" | tr ' ' '\n' | grep -Ev '^(libc\.so\.6|libgcc_s\.so\.1|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libutil\.so\.1|ld-linux-x86-64\.so\.2|)$' || true)
[ -z "$extra" ] && ok "NEEDED: $needed(no libnl)" || bad "NEEDED has $extra"

cp softverbs/libibverbs.map "$tmp/map.orig"
softverbs/tools/gen-map.sh
if cmp -s softverbs/libibverbs.map "$tmp/map.orig"; then ok "libibverbs.map matches expected-symbols.txt"
else bad "libibverbs.map is stale (run softverbs/tools/gen-map.sh)"; cp "$tmp/map.orig" softverbs/libibverbs.map; fi

echo "symbols: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
