#!/bin/bash
# Proves the export table of build/lib/librdmacm.so.1 by reading it back:
# exactly upstream's 74 functions in RDMACM_1.0..1.5 plus our RDMACM_RS_1.0
# helpers, one default (@@) version each, nothing else defined; the identity
# (SONAME, NEEDED); the map matches the lists; abidiff against Debian's
# library reports nothing removed or changed.
set -euo pipefail
cd "$(dirname "$0")/.."
lib=${1:-build/lib/librdmacm.so.1}
sys=/usr/lib/x86_64-linux-gnu/librdmacm.so.1
tmp=build/abi-tests; mkdir -p "$tmp"
pass=0; fail=0
ok()  { echo "PASS $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1"; fail=$((fail+1)); }

# 1. versioned functions == the lists
objdump -T "$lib" | awk '$4 == ".text" {print $(NF-1), $NF}' | sort > "$tmp/got.txt"
cat abi-tests/expected-symbols.txt abi-tests/rs-symbols.txt | sort > "$tmp/want.txt"
if diff -u "$tmp/want.txt" "$tmp/got.txt" > "$tmp/sym.diff"; then ok "exported functions and versions ($(wc -l < "$tmp/got.txt"))"
else bad "exported functions differ from the lists:"; cat "$tmp/sym.diff"; fi

# 2. nothing else defined: only the version-node symbols besides the functions
objdump -T "$lib" | awk 'NR>4 && NF>=6' | grep -v '\*UND\*' | awk '!($4 == ".text") && !($4 == "*ABS*" && $NF ~ /^RDMACM_/)' > "$tmp/stray.txt" || true
[ ! -s "$tmp/stray.txt" ] && ok "no stray exported symbols" || { bad "stray exported symbols:"; cat "$tmp/stray.txt"; }

# 3. every symbol has exactly one version, and it is the default one
dups=$(awk '{print $2}' "$tmp/got.txt" | sort | uniq -d | wc -l)
hidden=$(objdump -T "$lib" | awk '$4 == ".text"' | grep -c '(RDMACM' || true)
[ "$dups" -eq 0 ] && [ "$hidden" -eq 0 ] && ok "one default (@@) version per symbol" || bad "duplicate or non-default versions"

# 4. version nodes chain like upstream's
readelf -V "$lib" > "$tmp/versions.txt"
chain_ok=1
for pair in "1.1 1.0" "1.2 1.1" "1.3 1.2" "1.4 1.3" "1.5 1.4"; do
  set -- $pair
  grep -A1 "Name: RDMACM_$1\$" "$tmp/versions.txt" | grep -q "Parent 1: RDMACM_$2" || chain_ok=0
done
grep -A1 "Name: RDMACM_RS_1.0\$" "$tmp/versions.txt" | grep -q "Parent 1: RDMACM_1.5" || chain_ok=0
[ $chain_ok -eq 1 ] && ok "version nodes chain 1.0 <- 1.1 <- ... <- 1.5 <- RS_1.0" || { bad "version node chain"; grep -A1 Name: "$tmp/versions.txt"; }

# 5. identity: SONAME, file name, NEEDED
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = librdmacm.so.1 ] && ok "SONAME librdmacm.so.1" || bad "SONAME is '$soname'"
real=$(readlink -f "$lib"); case "$(basename "$real")" in librdmacm.so.1.5.*) ok "file name $(basename "$real") (ABI 1.5 = newest node)";; *) bad "file name $(basename "$real")";; esac
needed=$(readelf -d "$lib" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
extra=$(echo "$needed" | tr ' ' '\n' | grep -Ev '^(libibverbs\.so\.1|libc\.so\.6|libgcc_s\.so\.1|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libutil\.so\.1|ld-linux-x86-64\.so\.2|)$' || true)
if echo "$needed" | grep -q 'libibverbs.so.1' && [ -z "$extra" ]; then ok "NEEDED: $needed"; else bad "NEEDED: $needed (unexpected: $extra)"; fi

# 6. the checked-in map is what the lists generate
cp librdmacm.map "$tmp/map.orig"; tools/gen-map.sh
if cmp -s librdmacm.map "$tmp/map.orig"; then ok "librdmacm.map matches the symbol lists"; else bad "librdmacm.map is stale (run tools/gen-map.sh)"; cp "$tmp/map.orig" librdmacm.map; fi

# 7. abidiff against Debian's library: nothing removed or changed
if [ -e "$sys" ] && command -v abidiff >/dev/null; then
  abidiff "$sys" "$lib" > "$tmp/abidiff.txt" || true
  if grep -q 'Function symbols changes summary: 0 Removed' "$tmp/abidiff.txt" \
     && grep -q 'Functions changes summary: 0 Removed, 0 Changed' "$tmp/abidiff.txt"; then
    ok "abidiff vs Debian's librdmacm: 0 removed, 0 changed"
  else bad "abidiff vs Debian's librdmacm:"; cat "$tmp/abidiff.txt"; fi
else bad "abidiff or $sys missing (install abigail-tools librdmacm1)"; fi

echo "symbols: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
