#!/bin/bash
# Every softverbs check (run from the repository root by `make test-softverbs`):
#   1. cargo unit tests (state machine, frame codec, protection, fuzz-style decode run)
#   2. symbols.sh: export table of build/lib/soft/libibverbs.so.1 read back with objdump
#   3. BIND_NOW load of every Debian consumer with LD_LIBRARY_PATH=build/lib/soft:build/lib
#   4. ibv_devices / ibv_devinfo show soft0
#   5. the C behaviour tests in tests/c (two contexts over 127.0.0.1), also under valgrind
#   6. Debian's verbs-only programs (perftest, qperf) as two processes; 5 and 6 again
#      with SOFTVERBS_SHM=0 (no valgrind, fewer pairs)
#   7. the verbs trace (RDMACM_RS_TRACE) over an rping pair
#   8. roce_fuzz.py: hostile RoCEv2 packets from a fake peer, in a network namespace of its
#      own (root; about 20 s)
# Prints PASS/FAIL lines and ends with "N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/../.."
SOFT=$PWD/build/lib/soft
LIBS=$SOFT:$PWD/build/lib
out=build/softverbs-tests
mkdir -p "$out"
pass=0; fail=0
ok()  { echo "PASS $1"; pass=$((pass+1)); }
bad() { echo "FAIL $1"; fail=$((fail+1)); }

# 1. unit tests
if timeout 600 cargo test -q -p softverbs --release > "$out/cargo.txt" 2>&1; then
  ok "cargo unit tests ($(grep -o '[0-9]* passed' "$out/cargo.txt" | head -1))"
else bad "cargo unit tests"; tail -30 "$out/cargo.txt"; fi

# 2. symbols
if timeout 120 bash softverbs/tests/symbols.sh > "$out/symbols.txt" 2>&1; then ok "symbols ($(tail -1 "$out/symbols.txt"))"
else bad "symbols"; cat "$out/symbols.txt"; fi

# 3. BIND_NOW loads
loader_errors='symbol lookup error|undefined symbol|version .*not found|no version information available|error while loading shared libraries'
consumers=(
  "/usr/bin/rping -h" "/usr/bin/udaddy -h" "/usr/bin/mckey -h" "/usr/bin/ucmatose -h" "/usr/bin/cmtime -h"
  "/usr/bin/rdma_client -h" "/usr/bin/rdma_server -h" "/usr/bin/rdma_xclient -h" "/usr/bin/rdma_xserver -h"
  "/usr/bin/rstream -h" "/usr/bin/riostream -h" "/usr/bin/udpong -h" "/usr/bin/rcopy -h"
  "/usr/bin/ib_send_lat --help" "/usr/bin/ib_write_bw --help" "/usr/bin/ib_read_lat --help" "/usr/bin/ib_send_bw --help"
  "/usr/bin/qperf --help"
)
for c in "${consumers[@]}"; do
  prog=${c%% *}; name=$(basename "$prog")
  if [ ! -x "$prog" ]; then bad "load $name: $prog missing (tools/install-deps.sh)"; continue; fi
  # shellcheck disable=SC2086
  LD_BIND_NOW=1 LD_DEBUG=bindings LD_DEBUG_OUTPUT=$out/bind.$name LD_LIBRARY_PATH=$LIBS timeout 10 $c > /dev/null 2> "$out/load.$name" < /dev/null
  if grep -Eq "$loader_errors" "$out/load.$name"; then bad "load $name: $(grep -E "$loader_errors" "$out/load.$name" | head -1)"
  elif ! grep -qs "to $SOFT/libibverbs.so.1 \[0\]: normal symbol \`ibv_" "$out"/bind.$name.*; then bad "load $name: no ibv_* binding to our libibverbs"
  else ok "load $name (BIND_NOW)"; fi
  rm -f "$out"/bind.$name.*
done
if LD_BIND_NOW=1 LD_LIBRARY_PATH=$LIBS timeout 20 /usr/bin/python3 -c 'import pyverbs.device, pyverbs.qp, pyverbs.cq, pyverbs.mr, pyverbs.pd' > "$out/py.txt" 2>&1; then
  ok "load pyverbs (device qp cq mr pd)"
else bad "load pyverbs"; cat "$out/py.txt"; fi
if LD_LIBRARY_PATH=$LIBS timeout 20 /usr/bin/python3 -c '
import pyverbs.device as d
l = d.get_device_list()
assert len(l) == 1 and l[0].name.decode() == "soft0", l
with d.Context(name="soft0") as c:
    a = c.query_device(); p = c.query_port(1)
    assert a.max_qp_rd_atom >= 16 and p.state == 4
    c.query_gid(1, 0); c.query_gid_type(1, 0)
' > "$out/py2.txt" 2>&1; then ok "pyverbs opens soft0 and queries it"
else bad "pyverbs query"; cat "$out/py2.txt"; fi

# 4. ibverbs-utils
if LD_LIBRARY_PATH=$SOFT timeout 10 ibv_devices > "$out/devices.txt" 2>&1 && grep -q 'soft0' "$out/devices.txt"; then ok "ibv_devices shows soft0"
else bad "ibv_devices"; cat "$out/devices.txt"; fi
if LD_LIBRARY_PATH=$SOFT timeout 10 ibv_devinfo -v > "$out/devinfo.txt" 2>&1 && grep -q 'hca_id:.*soft0' "$out/devinfo.txt" && grep -q 'PORT_ACTIVE' "$out/devinfo.txt"; then
  ok "ibv_devinfo shows soft0, port ACTIVE"
else bad "ibv_devinfo"; cat "$out/devinfo.txt"; fi

# 5. C behaviour tests
if cc -std=gnu11 -Wall -Wextra -Werror -O1 -g -o "$out/verbs_test" softverbs/tests/c/verbs_test.c -L"$SOFT" -l:libibverbs.so.1 -lpthread -ldl > "$out/cc.txt" 2>&1; then
  LD_LIBRARY_PATH=$SOFT timeout 120 "$out/verbs_test" > "$out/verbs_test.txt" 2>&1
  rc=$?
  sed 's/^/    /' "$out/verbs_test.txt"
  [ $rc -eq 0 ] && ok "C tests: $(tail -1 "$out/verbs_test.txt")" || bad "C tests (exit $rc)"
  # The transmit window's override (SOFTVERBS_TX_WINDOW): t_tx_window expects its bound.
  for w in 131072 1048576; do
    if SOFTVERBS_TX_WINDOW=$w LD_LIBRARY_PATH=$SOFT timeout 60 "$out/verbs_test" t_tx_window > "$out/tx_window.$w.txt" 2>&1 &&
       grep -q "^PASS t_tx_window" "$out/tx_window.$w.txt" && grep -q "1 passed, 0 failed" "$out/tx_window.$w.txt"; then
      ok "SOFTVERBS_TX_WINDOW=$w: t_tx_window sees that bound"
    else bad "SOFTVERBS_TX_WINDOW=$w: t_tx_window"; sed 's/^/    /' "$out/tx_window.$w.txt"; fi
  done
  if command -v valgrind > /dev/null; then
    if LD_LIBRARY_PATH=$SOFT timeout 600 valgrind -q --error-exitcode=3 --errors-for-leak-kinds=none "$out/verbs_test" > "$out/valgrind.txt" 2>&1; then
      ok "C tests under valgrind (no memory errors)"
    else bad "C tests under valgrind"; tail -40 "$out/valgrind.txt"; fi
  fi
else bad "compile C tests"; cat "$out/cc.txt"; fi

# 6. Debian's verbs-only programs, server and client as two processes over 127.0.0.1
#    (no rdma_cm: QPs are found through the host registry)
pair() { # name server-cmd... -- client-args...
  local name=$1; shift
  local srv=() cli=()
  while [ "$1" != "--" ]; do srv+=("$1"); shift; done; shift
  cli=("$@")
  LD_LIBRARY_PATH=$LIBS timeout 60 "${srv[@]}" > "$out/$name.srv" 2>&1 &
  local spid=$!
  sleep 0.7
  LD_LIBRARY_PATH=$LIBS timeout 60 "${srv[@]}" "${cli[@]}" > "$out/$name.cli" 2>&1
  local crc=$?
  wait $spid; local src=$?
  if [ $crc -eq 0 ] && [ $src -eq 0 ]; then ok "$name (two processes)"
  else bad "$name (client exit $crc, server exit $src)"; tail -n 5 "$out/$name.cli" "$out/$name.srv"; fi
}
pair ib_send_bw ib_send_bw -p 18601 -n 500 -s 4096 -- 127.0.0.1
pair ib_send_bw_ud ib_send_bw -p 18602 -c UD -n 200 -s 1024 -- 127.0.0.1
pair ib_write_bw ib_write_bw -p 18603 -n 500 -s 65536 -- 127.0.0.1
pair ib_read_lat ib_read_lat -p 18604 -n 200 -- 127.0.0.1
pair ib_send_lat ib_send_lat -p 18605 -n 200 -- 127.0.0.1
pair ib_send_bw_event ib_send_bw -p 18606 -e -n 300 -s 4096 -- 127.0.0.1
LD_LIBRARY_PATH=$LIBS timeout 60 qperf -lp 19801 > "$out/qperf.srv" 2>&1 &
qpid=$!
sleep 0.7
if LD_LIBRARY_PATH=$LIBS timeout 50 qperf -lp 19801 127.0.0.1 -t 1 rc_bw rc_lat uc_bw ud_lat rc_rdma_write_bw rc_rdma_read_bw rc_compare_swap_mr rc_fetch_add_mr > "$out/qperf.cli" 2>&1 \
   && ! grep -qi 'failed\|error' "$out/qperf.cli"; then ok "qperf rc/uc/ud/rdma/atomic tests (event mode, SIGALRM)"
else bad "qperf"; tail -20 "$out/qperf.cli"; fi
kill $qpid 2>/dev/null; wait $qpid 2>/dev/null

# 6b. the C tests and Debian's pairs again with the same-host shared-memory paths off
#     (rings, one-sided copies by the initiator): the stream path they fall back to
export SOFTVERBS_SHM=0
if [ -x "$out/verbs_test" ]; then
  if LD_LIBRARY_PATH=$SOFT timeout 120 "$out/verbs_test" > "$out/verbs_test.shm0.txt" 2>&1; then
    ok "C tests, SOFTVERBS_SHM=0: $(tail -1 "$out/verbs_test.shm0.txt")"
  else bad "C tests, SOFTVERBS_SHM=0"; grep -v '^PASS' "$out/verbs_test.shm0.txt" | tail -20; fi
fi
pair ib_send_bw.shm0 ib_send_bw -p 18701 -n 500 -s 4096 -- 127.0.0.1
pair ib_send_bw_ud.shm0 ib_send_bw -p 18702 -c UD -n 200 -s 1024 -- 127.0.0.1
pair ib_write_bw.shm0 ib_write_bw -p 18703 -n 500 -s 65536 -- 127.0.0.1
pair ib_read_lat.shm0 ib_read_lat -p 18704 -n 200 -- 127.0.0.1
unset SOFTVERBS_SHM

# 7. the verbs trace: RDMACM_RS_TRACE=<file> gets librdmacm's CM lines and our verbs lines
#    (whole lines, one clock); unset or 0, nothing is written anywhere.
trace=$PWD/$out/rping.trace
rm -f "$trace"
tline='^(rdmacm-rs|softverbs)\[[0-9]+\] +[0-9]+\.[0-9]{3}ms .* \([0-9]+us\)$'
rping_pair() { # port, then env assignments for both sides
  local port=$1; shift
  env "$@" LD_LIBRARY_PATH=$LIBS timeout 30 rping -s -a 127.0.0.1 -p "$port" -C 10 > "$out/trace.srv" 2>&1 &
  local spid=$!
  sleep 0.7
  env "$@" LD_LIBRARY_PATH=$LIBS timeout 30 rping -c -a 127.0.0.1 -p "$port" -C 10 -v > "$out/trace.cli" 2>&1
  local crc=$?
  wait $spid; local src=$?
  [ $crc -eq 0 ] && [ $src -eq 0 ]
}
if rping_pair 18611 RDMACM_RS_TRACE="$trace"; then
  missing=""
  for want in '^rdmacm-rs\[[0-9]+\] .* rdma_connect\(' '^rdmacm-rs\[[0-9]+\] .* event RDMA_CM_EVENT_ESTABLISHED' \
              '^softverbs\[[0-9]+\] .* ibv_open_device\(' '^softverbs\[[0-9]+\] .* ibv_reg_mr.*lkey 0x' \
              '^softverbs\[[0-9]+\] .* ibv_modify_qp\(.*RTR->RTS' '^softverbs\[[0-9]+\] .* ibv_post_send\(.*RDMA_WRITE num_sge' \
              '^softverbs\[[0-9]+\] .* ibv_post_send\(.*RDMA_READ num_sge' '^softverbs\[[0-9]+\] .* ibv_post_recv\(' \
              '^softverbs\[[0-9]+\] .* ibv_poll_cq\(.* = [1-9][0-9]* \{wr_id 0x[0-9a-f]+ SUCCESS (RDMA_READ|RDMA_WRITE|SEND|RECV) len' \
              '^softverbs\[[0-9]+\] .* ibv_get_cq_event\(' '^softverbs\[[0-9]+\] .* ibv_destroy_qp\('; do
    grep -Eq "$want" "$trace" || missing="$missing [$want]"
  done
  if [ -n "$missing" ]; then bad "verbs trace: missing$missing"; head -40 "$trace"
  elif grep -Evq "$tline" "$trace"; then bad "verbs trace: malformed or torn lines"; grep -Ev "$tline" "$trace" | head -5
  elif grep -q '^softverbs.* ibv_poll_cq(.*) = 0 ' "$trace"; then bad "verbs trace: empty polls logged"
  else ok "verbs trace: rping pair to a file, $(grep -c '^rdmacm-rs' "$trace") CM + $(grep -c '^softverbs' "$trace") verbs lines from $(cut -d' ' -f1 "$trace" | sort -u | wc -l) library/process pairs"; fi
else bad "verbs trace: traced rping pair failed"; tail -5 "$out/trace.srv" "$out/trace.cli"; fi
# Run from an empty directory: "0" taken for a path would leave a file named 0 there.
quiet=$(mktemp -d)
if (cd "$quiet" && out=$OLDPWD/$out && rping_pair 18612 -u RDMACM_RS_TRACE && rping_pair 18613 RDMACM_RS_TRACE=0) \
   && ! grep -Eq '^(rdmacm-rs|softverbs)\[' "$out/trace.srv" "$out/trace.cli" && [ -z "$(ls -A "$quiet")" ]; then
  ok "verbs trace: unset or 0 writes nothing (no trace line, no file)"
else bad "verbs trace: unset/0 run failed, wrote trace lines or made a file ($(ls -A "$quiet"))"; tail -5 "$out/trace.srv" "$out/trace.cli"; fi
rm -rf "$quiet"
for v in 1 stderr; do
  if RDMACM_RS_TRACE=$v LD_LIBRARY_PATH=$SOFT timeout 10 ibv_devinfo > /dev/null 2> "$out/trace.stderr" \
     && grep -Eq '^softverbs\[[0-9]+\] .* ibv_query_port\(.*ACTIVE' "$out/trace.stderr" && [ ! -e "$v" ]; then
    ok "verbs trace: RDMACM_RS_TRACE=$v goes to stderr"
  else bad "verbs trace to stderr (RDMACM_RS_TRACE=$v)"; head -5 "$out/trace.stderr"; fi
done

# 8. RoCEv2 receive path under hostile packets: no crash, no byte touched outside an MR
#    with the right access, no READ data from outside one (ROCE_FUZZ_SEED: another seed)
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP RoCEv2 fuzz (needs root: a network namespace of its own)"
elif PYTHONDONTWRITEBYTECODE=1 timeout 120 /usr/bin/python3 softverbs/tests/roce_fuzz.py --seed "${ROCE_FUZZ_SEED:-1}" \
     --seconds 20 --packets 40000 > "$out/roce_fuzz.txt" 2>&1; then
  ok "RoCEv2 fuzz: $(sed -n 's/^roce_fuzz: \([0-9]* packets\).* in \([0-9]* rounds\), \([0-9.]* s\) barrage.*(seed \([0-9]*\)).*/\1 in \2, \3, seed \4/p' "$out/roce_fuzz.txt"), no crash or stray access"
else bad "RoCEv2 fuzz (log: $out/roce_fuzz.txt)"; grep -v '^  sent, by kind' "$out/roce_fuzz.txt" | tail -n 30; fi

# 9. libFuzzer run of the frame decoder, only where cargo-fuzz and nightly are installed
if command -v cargo-fuzz > /dev/null && rustup toolchain list 2>/dev/null | grep -q nightly; then
  if (cd softverbs/fuzz && timeout 600 cargo +nightly fuzz run decode -- -max_total_time=10) > "$out/fuzz.txt" 2>&1; then
    ok "cargo-fuzz decode: $(grep -o 'Done [0-9]* runs' "$out/fuzz.txt" | tail -1), no crash"
  else bad "cargo-fuzz decode"; tail -n 30 "$out/fuzz.txt"; fi
else
  echo "SKIP cargo-fuzz (not installed; the deterministic 200k-frame run in the unit tests covers decode)"
fi

echo "softverbs: $pass passed, $fail failed"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
