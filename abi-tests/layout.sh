#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
#
# Source/ABI compatibility of our include/rdma/{rdma_cma,rdma_verbs,rsocket}.h
# with the system's rdma-core headers (Debian 12: rdma-core 44):
#   compile   - each header alone and together, C (c99..gnu17) and C++ (98..20),
#               strict warnings, helpers instantiated at -O2, extern "C" linkage
#   layout    - layout_probe.c: sizeof/_Alignof/offsetof of every field and the
#               value/type/kind of every constant, ours vs system, plus the
#               compile-time field type assertions it contains
#   dwarf     - member trees (names, order, offsets, type names) and named
#               enums read back from DWARF, ours vs system
#   coverage  - same struct/union/enum tags, enumerators and macros as the
#               system headers, and every one of them is printed by the probe
#   protos    - -aux-info prototypes of all exported functions and inline
#               helpers, ours vs system
#   helpers   - helpers_probe.c: the inline helpers' calls into verbs, traced
#               against fakes, ours vs system
# Items that exist only in upstream >= v60 (RDMACM_1.4/1.5) are absent from
# Debian 12's headers; they are compared with the literal values below.
#
# No arguments. Uses ${CC:-cc} and ${CXX:-g++}; temporaries in build/abi-tests/.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
CC=${CC:-cc}
CXX=${CXX:-g++}
OUT=build/abi-tests/layout
rm -rf "$OUT"
mkdir -p "$OUT"

OURS="-I include"
SYS=""			# no -I: <rdma/...> resolves to /usr/include
HEADERS="rdma_cma rdma_verbs rsocket"

# Everything either header set pulls in, so -dM can isolate their own macros.
DEPS='#include <assert.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <infiniband/verbs.h>
#include <infiniband/sa.h>'
ALL='#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>'

C_WARN="-Wall -Wextra -Werror -pedantic -Wshadow -Wstrict-prototypes
	-Wmissing-prototypes -Wconversion -Wsign-conversion -Wcast-qual -Wundef
	-Wredundant-decls"
CXX_WARN="-Wall -Wextra -Werror -pedantic -Wshadow -Wconversion
	-Wsign-conversion -Wcast-qual -Wundef -Wzero-as-null-pointer-constant"

# Upstream-only (rdma-core >= v60) items, as our outputs must print them.
NEW_PROBE='new:field struct rdma_cm_event.param.arg offset 24 size 8 align 8
new:const RDMA_CM_EVENT_ADDRINFO_RESOLVED = 0x10 size 4 signed enum
new:const RDMA_CM_EVENT_ADDRINFO_ERROR = 0x11 size 4 signed enum
new:const RDMA_CM_EVENT_USER = 0x12 size 4 signed enum
new:const RDMA_CM_EVENT_INTERNAL = 0x13 size 4 signed enum
new:const RAI_SA = 0x10 size 4 signed macro
new:const RAI_DNS = 0x20 size 4 signed macro'
NEW_DWARF='struct rdma_cm_event.param.arg @24 uint64_t
enum rdma_cm_event_type.RDMA_CM_EVENT_ADDRINFO_RESOLVED = 16
enum rdma_cm_event_type.RDMA_CM_EVENT_ADDRINFO_ERROR = 17
enum rdma_cm_event_type.RDMA_CM_EVENT_USER = 18
enum rdma_cm_event_type.RDMA_CM_EVENT_INTERNAL = 19'
NEW_NAMES='enumerator RDMA_CM_EVENT_ADDRINFO_RESOLVED
enumerator RDMA_CM_EVENT_ADDRINFO_ERROR
enumerator RDMA_CM_EVENT_USER
enumerator RDMA_CM_EVENT_INTERNAL
macro RAI_SA
macro RAI_DNS'
NEW_PROTOS='rdma_cma.h NC extern int rdma_resolve_addrinfo (struct rdma_cm_id *, const char *, const char *, const struct rdma_addrinfo *);
rdma_cma.h NC extern int rdma_query_addrinfo (struct rdma_cm_id *, struct rdma_addrinfo **);
rdma_cma.h NC extern int rdma_write_cm_event (struct rdma_cm_id *, enum rdma_cm_event_type, int, uint64_t);
rsocket.h NC extern int repoll_create (int);
rsocket.h NC extern int repoll_ctl (int, int, int, struct epoll_event *);
rsocket.h NC extern int repoll_wait (int, struct epoll_event *, int, int);'
N_EXPORTS=74		# symbols.md: 68 in rdma-core 44 + 3 (1.4) + 3 (1.5)
N_INLINES=18		# 16 in rdma_verbs.h + rdma_get_{local,peer}_addr

passed=0
failed=0

# Run one check in a background subshell so `set -e` stays in force inside it
# (it would be ignored in an `if` condition); show its log only on failure.
check() {
	local name=$1
	shift
	local log="$OUT/$name.log"
	( "$@" ) >"$log" 2>&1 &
	if wait $!; then
		passed=$((passed + 1))
		echo "ok   $name"
	else
		failed=$((failed + 1))
		echo "FAIL $name"
		sed 's/^/     | /' "$log" | head -n 60
	fi
}

# Fail with a unified diff unless the two files are identical.
same() {	# same <what> <expected-file> <actual-file>
	if ! diff -u "$2" "$3"; then
		echo "$1 differ (- expected/system, + ours)"
		return 1
	fi
}

# --- compile -------------------------------------------------------------

check_spdx() {
	local h
	for h in $HEADERS; do
		head -n 1 "include/rdma/$h.h" |
			grep -qx '/\* SPDX-License-Identifier: MIT OR Apache-2.0 \*/'
		grep -q "rdmacm-rs's own" "include/rdma/$h.h"
	done
}

check_c_standalone() {
	local h std
	for h in $HEADERS; do
		printf '#include <rdma/%s.h>\n#include <rdma/%s.h>\n' "$h" "$h" \
			>"$OUT/alone_$h.c"
		for std in c99 gnu99 c11 gnu17; do
			echo "$h.h -std=$std"
			# shellcheck disable=SC2086
			$CC -std=$std $C_WARN $OURS -c "$OUT/alone_$h.c" -o /dev/null
			# shellcheck disable=SC2086
			$CC -std=$std $C_WARN -DNDEBUG $OURS -c "$OUT/alone_$h.c" -o /dev/null
		done
	done
	# every include order
	printf '%s\n' '#include <rdma/rsocket.h>' '#include <rdma/rdma_verbs.h>' \
		'#include <rdma/rdma_cma.h>' >"$OUT/order1.c"
	printf '%s\n' '#include <rdma/rdma_verbs.h>' '#include <rdma/rsocket.h>' \
		'#include <rdma/rdma_cma.h>' >"$OUT/order2.c"
	# shellcheck disable=SC2086
	$CC -std=c99 $C_WARN $OURS -c "$OUT/order1.c" -o /dev/null
	# shellcheck disable=SC2086
	$CC -std=c99 $C_WARN $OURS -c "$OUT/order2.c" -o /dev/null
}

check_cxx_standalone() {
	local h std
	for h in $HEADERS; do
		for std in c++98 c++11 c++17 c++20; do
			echo "$h.h -std=$std"
			# shellcheck disable=SC2086
			$CXX -x c++ -std=$std $CXX_WARN $OURS -c "$OUT/alone_$h.c" -o /dev/null
		done
	done
}

# A TU that calls every inline helper, so code generation warnings show too.
write_use_helpers() {
	cat >"$OUT/use_helpers.c" <<'EOF'
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>

int use_helpers(struct rdma_cm_id *id, struct ibv_mr *mr, struct ibv_sge *sgl,
		struct ibv_ah *ah, struct ibv_wc *wc, void *buf);

int use_helpers(struct rdma_cm_id *id, struct ibv_mr *mr, struct ibv_sge *sgl,
		struct ibv_ah *ah, struct ibv_wc *wc, void *buf)
{
	int r = 0;

	r += rdma_seterrno(EINVAL);
	r += rdma_reg_msgs(id, buf, 64) != NULL;
	r += rdma_reg_read(id, buf, 64) != NULL;
	r += rdma_reg_write(id, buf, 64) != NULL;
	r += rdma_dereg_mr(mr);
	r += rdma_post_recvv(id, buf, sgl, 2);
	r += rdma_post_sendv(id, buf, sgl, 2, IBV_SEND_SIGNALED);
	r += rdma_post_readv(id, buf, sgl, 2, 0, 0x1000, 7);
	r += rdma_post_writev(id, buf, sgl, 2, 0, 0x1000, 7);
	r += rdma_post_recv(id, buf, buf, 64, mr);
	r += rdma_post_send(id, buf, buf, 64, mr, 0);
	r += rdma_post_read(id, buf, buf, 64, mr, 0, 0x1000, 7);
	r += rdma_post_write(id, buf, buf, 64, NULL, IBV_SEND_INLINE, 0x1000, 7);
	r += rdma_post_ud_send(id, buf, buf, 64, mr, 0, ah, 0xffffff);
	r += rdma_get_send_comp(id, wc);
	r += rdma_get_recv_comp(id, wc);
	r += rdma_get_local_addr(id)->sa_family;
	r += rdma_get_peer_addr(id)->sa_family;
	return r;
}
EOF
}

check_c_helpers() {
	write_use_helpers
	local opt
	for opt in -O0 -O2 "-O2 -DNDEBUG"; do
		echo "C $opt"
		# shellcheck disable=SC2086
		$CC -std=gnu11 $opt $C_WARN $OURS -c "$OUT/use_helpers.c" -o "$OUT/use_helpers.o"
	done
}

check_cxx_helpers() {
	write_use_helpers
	local opt
	for opt in -O0 -O2 "-O2 -DNDEBUG"; do
		echo "C++ $opt"
		# shellcheck disable=SC2086
		$CXX -x c++ -std=c++11 $opt $CXX_WARN $OURS -c "$OUT/use_helpers.c" \
			-o "$OUT/use_helpers_cxx.o"
	done
}

# C++ callers must reference every export unmangled (extern "C" guards).
check_cxx_linkage() {
	protos ours >/dev/null
	local names
	names=$(export_names "$OUT/protos.ours")
	{
		printf '%s\n' "$ALL"
		echo 'typedef void (*fn_t)(void);'
		echo 'extern fn_t table[];'
		echo 'fn_t table[] = {'
		for n in $names; do echo "	reinterpret_cast<fn_t>(&$n),"; done
		echo '};'
	} >"$OUT/linkage.cc"
	# shellcheck disable=SC2086
	$CXX -std=c++11 -Wall -Wextra -Werror $OURS -c "$OUT/linkage.cc" -o "$OUT/linkage.o"
	nm -u "$OUT/linkage.o" | awk '{ print $2 }' | sort >"$OUT/linkage.undef"
	printf '%s\n' $names | sort >"$OUT/linkage.want"
	same "undefined symbols of a C++ user" "$OUT/linkage.want" "$OUT/linkage.undef"
	test "$(wc -l <"$OUT/linkage.want")" -eq "$N_EXPORTS"
}

# --- layout probe ----------------------------------------------------------

build_probe() {	# build_probe ours|sys  -> $OUT/probe.<v>.txt, probe.<v>.o
	local v=$1 inc=$SYS def=""
	if [ "$v" = ours ]; then inc=$OURS; def=-DPROBE_OURS; fi
	# built once, reused by later checks; the .txt appears only on success
	if [ ! -e "$OUT/probe.$v.txt" ]; then
		# shellcheck disable=SC2086
		$CC -std=gnu11 -Wall -Wextra -Werror $def $inc \
			abi-tests/layout_probe.c -o "$OUT/probe.$v"
		# shellcheck disable=SC2086
		$CC -std=gnu11 -g -O0 -fno-eliminate-unused-debug-types $def $inc \
			-c abi-tests/layout_probe.c -o "$OUT/probe.$v.o"
		"$OUT/probe.$v" >"$OUT/probe.$v.tmp"
		mv "$OUT/probe.$v.tmp" "$OUT/probe.$v.txt"
	fi
}

check_layout() {
	build_probe ours
	build_probe sys
	grep -v '^new:' "$OUT/probe.sys.txt" >"$OUT/probe.sys.main"
	grep -v '^new:' "$OUT/probe.ours.txt" >"$OUT/probe.ours.main"
	echo "$(grep -c . "$OUT/probe.ours.main") lines compared"
	same "layouts/constants" "$OUT/probe.sys.main" "$OUT/probe.ours.main"
}

check_layout_new() {
	build_probe ours
	build_probe sys
	printf '%s\n' "$NEW_PROBE" >"$OUT/probe.new.want"
	grep '^new:' "$OUT/probe.ours.txt" >"$OUT/probe.ours.new" || true
	same "upstream-only layouts/constants" "$OUT/probe.new.want" "$OUT/probe.ours.new"
	# with rdma-core >= v60 system headers, compare with them as well
	if grep -q '^new:' "$OUT/probe.sys.txt"; then
		grep '^new:' "$OUT/probe.sys.txt" >"$OUT/probe.sys.new"
		same "upstream-only layouts/constants" "$OUT/probe.sys.new" "$OUT/probe.ours.new"
	fi
}

# --- declarations: tags, enumerators, macros --------------------------------

# "struct X" / "union X" / "enum X" definitions and "enumerator X" names from
# the preprocessed text of the three rdma headers only.
decls() {	# decls ours|sys
	local inc=$SYS
	[ "$1" = ours ] && inc=$OURS
	# shellcheck disable=SC2086
	printf '%s\n' "$ALL" | $CC -std=gnu11 $inc -E -x c - | awk '
		/^# [0-9]+ "/ {
			keep = ($3 ~ /\/rdma\/(rdma_cma|rdma_verbs|rsocket)\.h"$/)
			next
		}
		keep { text = text " " $0 }
		END {
			t = text
			while (match(t, /(struct|union|enum)[ \t]+[A-Za-z_][A-Za-z0-9_]*[ \t]*[{]/)) {
				d = substr(t, RSTART, RLENGTH)
				t = substr(t, RSTART + RLENGTH)
				sub(/[ \t]*[{]$/, "", d)
				gsub(/[ \t]+/, " ", d)
				print d
			}
			t = text
			while (match(t, /enum[ \t]*[A-Za-z0-9_]*[ \t]*[{][^}]*[}]/)) {
				b = substr(t, RSTART, RLENGTH)
				t = substr(t, RSTART + RLENGTH)
				sub(/^[^{]*[{]/, "", b)
				sub(/[}]$/, "", b)
				n = split(b, item, ",")
				for (i = 1; i <= n; i++) {
					it = item[i]
					sub(/^[ \t]+/, "", it)
					if (match(it, /^[A-Za-z_][A-Za-z0-9_]*/))
						print "enumerator " substr(it, 1, RLENGTH)
				}
			}
		}' | sort -u
}

# Macros the three rdma headers add on top of their dependencies.
macros() {	# macros ours|sys
	local inc=$SYS
	[ "$1" = ours ] && inc=$OURS
	# shellcheck disable=SC2086
	printf '%s\n' "$DEPS" | $CC -std=gnu11 $inc -dM -E -x c - | sort >"$OUT/dM.base.$1"
	# shellcheck disable=SC2086
	printf '%s\n' "$DEPS" "$ALL" | $CC -std=gnu11 $inc -dM -E -x c - | sort >"$OUT/dM.all.$1"
	comm -13 "$OUT/dM.base.$1" "$OUT/dM.all.$1" |
		awk '{ n = $2; sub(/\(.*/, "", n); print "macro " n }' | sort -u
}

check_names() {
	local v
	for v in ours sys; do
		{ decls $v; macros $v; } | sort -u >"$OUT/names.$v"
	done
	# what ours may have beyond the system's: the upstream-only names
	{ cat "$OUT/names.sys"; printf '%s\n' "$NEW_NAMES"; } | sort -u >"$OUT/names.want"
	echo "$(grep -c . "$OUT/names.ours") names compared"
	same "tags/enumerators/macros" "$OUT/names.want" "$OUT/names.ours"
}

# Every enumerator and (non-guard) macro must be printed by the probe.
check_probe_coverage() {
	build_probe ours
	{ decls ours; macros ours; } | sort -u |
		awk '$1 == "enumerator" || $1 == "macro" { print $2 }' |
		grep -vx -e RDMA_CMA_H -e RDMA_VERBS_H -e RSOCKET_H >"$OUT/cov.want"
	sed -n 's/^\(new:\)\{0,1\}const \([A-Za-z0-9_]*\) .*/\2/p' "$OUT/probe.ours.txt" |
		sort -u >"$OUT/cov.have"
	local missing
	missing=$(comm -23 <(sort -u "$OUT/cov.want") "$OUT/cov.have")
	if [ -n "$missing" ]; then
		echo "constants not covered by layout_probe.c:"
		echo "$missing"
		return 1
	fi
	# and every struct/union tag has a "type" line
	decls ours | awk '$1 == "struct" || $1 == "union" { print $1 " " $2 }' >"$OUT/cov.tags"
	missing=$(while read -r t; do
		grep -q "^type $t size" "$OUT/probe.ours.txt" || echo "$t"
	done <"$OUT/cov.tags")
	if [ -n "$missing" ]; then
		echo "types not covered by layout_probe.c:"
		echo "$missing"
		return 1
	fi
	echo "$(grep -c . "$OUT/cov.want") constants and $(grep -c . "$OUT/cov.tags") types covered"
}

# --- DWARF member trees -------------------------------------------------------

# Prints, for each wanted struct/union/enum, its size and every member
# (recursing into unnamed struct/union types) with offset and type name.
DWARF_AWK='
function strip(v) {
	sub(/^\(indirect (line )?string, offset: 0x[0-9a-f]+\): /, "", v)
	sub(/[ \t]+$/, "", v)
	return v
}
function ref(v) {
	sub(/^<0x/, "", v)
	sub(/>.*/, "", v)
	return v
}
function tname(o,   t, s, i, c) {
	if (o == "")
		return "void"
	t = tag[o]
	if (t == "base_type" || t == "typedef")
		return name[o]
	if (t == "structure_type")
		return "struct " ((o in name) ? name[o] : "{anon}")
	if (t == "union_type")
		return "union " ((o in name) ? name[o] : "{anon}")
	if (t == "enumeration_type")
		return "enum " ((o in name) ? name[o] : "{anon}")
	if (t == "pointer_type")
		return tname(type[o]) " *"
	if (t == "const_type")
		return "const " tname(type[o])
	if (t == "volatile_type")
		return "volatile " tname(type[o])
	if (t == "array_type") {
		s = tname(type[o])
		for (i = 1; i <= nch[o]; i++) {
			c = ch[o, i]
			s = s "[" ((c in ub) ? ub[c] + 1 : "") "]"
		}
		return s
	}
	if (t == "subroutine_type")
		return "function"
	return t
}
function dump(o, path, base,   i, c, n, t) {
	for (i = 1; i <= nch[o]; i++) {
		c = ch[o, i]
		if (tag[c] != "member")
			continue
		n = (c in name) ? name[c] : "{anon}"
		t = type[c]
		print path "." n " @" (base + loc[c]) " " tname(t)
		if ((tag[t] == "structure_type" || tag[t] == "union_type") && !(t in name))
			dump(t, path "." n, base + loc[c])
	}
}
/^ *<[0-9]+><[0-9a-f]+>: Abbrev Number: / {
	split($0, a, /[<>]/)
	if ($0 ~ /Abbrev Number: 0$/) {
		cur = ""
		next
	}
	d = a[2] + 0
	cur = a[4]
	match($0, /\(DW_TAG_[a-z_]+\)/)
	tag[cur] = substr($0, RSTART + 8, RLENGTH - 9)
	order[++ndie] = cur
	top[d] = cur
	if (d > 0) {
		p = top[d - 1]
		ch[p, ++nch[p]] = cur
	}
	next
}
cur != "" && /DW_AT_/ {
	match($0, /DW_AT_[a-z_]+/)
	at = substr($0, RSTART + 6, RLENGTH - 6)
	v = substr($0, RSTART + RLENGTH)
	sub(/^[ \t]*:[ \t]*/, "", v)
	if (at == "name") name[cur] = strip(v)
	else if (at == "type") type[cur] = ref(v)
	else if (at == "byte_size") size[cur] = v + 0
	else if (at == "data_member_location") loc[cur] = v + 0
	else if (at == "upper_bound") ub[cur] = v + 0
	else if (at == "const_value") cval[cur] = v + 0
	else if (at == "declaration") decl[cur] = 1
}
END {
	nw = split(want, w, ",")
	for (i = 1; i <= nw; i++)
		wanted[w[i]] = 1
	for (k = 1; k <= ndie; k++) {
		o = order[k]
		if (!(o in name) || (o in decl))
			continue
		t = tag[o]
		if (t == "structure_type") kind = "struct"
		else if (t == "union_type") kind = "union"
		else if (t == "enumeration_type") kind = "enum"
		else continue
		full = kind " " name[o]
		if (!(full in wanted) || (full in done))
			continue
		done[full] = 1
		if (kind == "enum") {
			print full " size " size[o] " underlying " tname(type[o])
			for (i = 1; i <= nch[o]; i++) {
				c = ch[o, i]
				print full "." name[c] " = " cval[c]
			}
		} else {
			print full " size " size[o]
			dump(o, full, 0)
		}
	}
	for (f in wanted)
		if (!(f in done))
			print "MISSING " f
}'

dwarf() {	# dwarf ours|sys
	build_probe "$1"
	local want
	want=$(decls ours | grep -v '^enumerator ' | paste -sd, -)
	readelf --debug-dump=info "$OUT/probe.$1.o" >"$OUT/probe.$1.dwarfinfo"
	awk -v want="$want" "$DWARF_AWK" "$OUT/probe.$1.dwarfinfo"
}

check_dwarf() {
	dwarf ours >"$OUT/dwarf.ours"
	dwarf sys >"$OUT/dwarf.sys"
	printf '%s\n' "$NEW_DWARF" >"$OUT/dwarf.new"
	local line
	while read -r line; do
		grep -qxF "$line" "$OUT/dwarf.ours" || { echo "ours lacks: $line"; return 1; }
	done <"$OUT/dwarf.new"
	grep -vxF -f "$OUT/dwarf.new" "$OUT/dwarf.sys" >"$OUT/dwarf.sys.main" || true
	grep -vxF -f "$OUT/dwarf.new" "$OUT/dwarf.ours" >"$OUT/dwarf.ours.main" || true
	echo "$(grep -c . "$OUT/dwarf.ours.main") member/enumerator lines compared"
	if grep '^MISSING' "$OUT/dwarf.ours" "$OUT/dwarf.sys"; then
		return 1
	fi
	same "DWARF member trees" "$OUT/dwarf.sys.main" "$OUT/dwarf.ours.main"
}

# --- prototypes ------------------------------------------------------------

# "<header> NC|NF <declaration>" for every function the rdma headers declare
# (NC) or define (NF: static inline); parameter names of definitions dropped.
protos() {	# protos ours|sys  -> stdout and $OUT/protos.<v>
	local inc=$SYS
	[ "$1" = ours ] && inc=$OURS
	printf '%s\n' "$ALL" >"$OUT/protos.c"
	# shellcheck disable=SC2086
	$CC -std=gnu11 $inc -aux-info "$OUT/aux.$1" -c "$OUT/protos.c" -o "$OUT/protos.o"
	grep -E '^/\* [^ ]*/rdma/(rdma_cma|rdma_verbs|rsocket)\.h:[0-9]+:[A-Z]{2} \*/' "$OUT/aux.$1" |
		sed -E 's|^/\* [^ ]*/rdma/([a-z_]+\.h):[0-9]+:([A-Z]{2}) \*/ |\1 \2 |
			s| /\*.*\*/$||' |
		sed -E '/^[a-z_]+\.h NF /{
			s/[A-Za-z_][A-Za-z0-9_]*([,)])/\1/g
			s/ +([,)])/\1/g
		}' | sort >"$OUT/protos.$1"
	cat "$OUT/protos.$1"
}

export_names() {	# function names of the NC lines of a protos file
	awk '$2 == "NC"' "$1" | sed -E 's/^.*[ *]([A-Za-z_][A-Za-z0-9_]*) \(.*$/\1/' | sort
}

check_protos() {
	protos ours >/dev/null
	protos sys >/dev/null
	{ cat "$OUT/protos.sys"; printf '%s\n' "$NEW_PROTOS"; } | sort -u >"$OUT/protos.want"
	same "prototypes" "$OUT/protos.want" "$OUT/protos.ours"
	local nc nf
	nc=$(awk '$2 == "NC"' "$OUT/protos.ours" | wc -l)
	nf=$(awk '$2 == "NF"' "$OUT/protos.ours" | wc -l)
	echo "$nc exported prototypes, $nf inline helpers compared"
	test "$nc" -eq "$N_EXPORTS"
	test "$nf" -eq "$N_INLINES"
	test "$(export_names "$OUT/protos.ours" | uniq | wc -l)" -eq "$N_EXPORTS"
}

# --- inline helper behaviour ---------------------------------------------------

check_helpers() {
	local v inc
	for v in ours sys; do
		inc=$SYS
		[ $v = ours ] && inc=$OURS
		# shellcheck disable=SC2086
		$CC -std=gnu11 -O2 -Wall -Wextra -Werror $inc \
			abi-tests/helpers_probe.c -o "$OUT/helpers.$v"
		"$OUT/helpers.$v" >"$OUT/helpers.$v.txt"
	done
	echo "$(grep -c . "$OUT/helpers.ours.txt") trace lines compared"
	same "helper traces" "$OUT/helpers.sys.txt" "$OUT/helpers.ours.txt"
}

# ------------------------------------------------------------------------------

command -v "$CXX" >/dev/null || { echo "FAIL: C++ compiler '$CXX' not found"; exit 1; }

check spdx-header-lines	check_spdx
check c-standalone	check_c_standalone
check cxx-standalone	check_cxx_standalone
check c-helpers-codegen	check_c_helpers
check cxx-helpers-codegen	check_cxx_helpers
check cxx-linkage	check_cxx_linkage
check layout		check_layout
check layout-upstream-only	check_layout_new
check names		check_names
check probe-coverage	check_probe_coverage
check dwarf-members	check_dwarf
check prototypes	check_protos
check helpers-behaviour	check_helpers

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
