#!/bin/bash
# Network mode of the VM harness: a live guest whose rxe0 sits on a virtio NIC attached to a
# tap in a private network namespace, so host programs in that namespace reach the guest's
# rxe over real RoCEv2 (UDP 4791). Nothing leaves the namespace. Needs root.
#
#   roce-net.sh up                 netns + tap 10.77.0.1/24, boot the guest (10.77.0.2, rxe0 on eth0)
#   roce-net.sh guest 'cmd'        run cmd in the guest, print its output, exit with its status
#   roce-net.sh guest-bg 'cmd' NAME [SECS]   start cmd in the guest in the background
#                                  (output in $ROCE_WORK/run/bg-NAME.log; killed after SECS)
#   roce-net.sh wait-bg NAME SECS  its exit status (124 and the job killed if not done by then)
#   roce-net.sh host 'cmd'         run cmd on the host inside the namespace
#   roce-net.sh down               stop the guest, delete tap and namespace (idempotent)
#
# Env: ROCE_NS (rdmacmrs-roce), ROCE_TAP (rroce0), ROCE_WORK (/tmp/rdmacmrs-roce),
#      GWAIT seconds a guest command may take (300), ROCE_BOOT_WAIT (300),
#      ROCE_SMP (2), ROCE_MEM MiB (1024), ROCE_VM_TIMEOUT hard cap on the guest's life (3600),
#      QRXE_WORK / QRXE_KPKG: the kernel cache run-in-guest.sh keeps.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
NS=${ROCE_NS:-rdmacmrs-roce}
TAP=${ROCE_TAP:-rroce0}
WORK=${ROCE_WORK:-/tmp/rdmacmrs-roce}
RUN=$WORK/run
HOST_IP=10.77.0.1 GUEST_IP=10.77.0.2
die() { echo "roce-net: $*" >&2; exit 1; }

# qemu's pid (from -pidfile), only while that process really is our qemu
qemu_pid() {
  local p; p=$(cat "$RUN/qemu.pid" 2>/dev/null) || return 1
  [ -n "$p" ] && grep -q qemu "/proc/$p/comm" 2>/dev/null && echo "$p"
}

# Commands go to the agent as files cmd.N (one at a time, in order); a lock keeps
# concurrent callers from taking the same N.
submit() {
  local n
  exec 9>"$RUN/.lock"; flock 9
  n=0; while [ -e "$RUN/cmd.$n" ]; do n=$((n+1)); done
  printf '%s\n' "$1" >"$RUN/.cmd.tmp" && mv "$RUN/.cmd.tmp" "$RUN/cmd.$n"
  flock -u 9; exec 9>&-
  echo "$n"
}

cmd_up() {
  cmd_down >/dev/null 2>&1   # a leftover of a crashed run would hold the tap
  local QW=${QRXE_WORK:-/tmp/qemu-rxe} KPKG KDIR KVER
  KPKG=${QRXE_KPKG:-$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}')}
  KDIR=$QW/k/$KPKG
  # run-in-guest.sh fetches the kernel and builds the initramfs; one throw-away boot does it
  if [ ! -e "$KDIR/initramfs.cpio.gz" ] || [ ! -e "$KDIR/.done" ]; then
    echo "roce-net: preparing the kernel cache ($QW) with run-in-guest.sh" >&2
    QRXE_WORK=$QW "$HERE/run-in-guest.sh" true >/dev/null || die "run-in-guest.sh failed"
  fi
  KVER=$(ls "$KDIR/root/lib/modules" | head -1)
  [ -e "$KDIR/root/lib/modules/$KVER/modules.dep" ] || die "no modules.dep in $KDIR"

  ip netns add "$NS" || die "cannot create netns $NS"
  ip netns exec "$NS" ip link set lo up
  ip netns exec "$NS" ip tuntap add dev "$TAP" mode tap
  ip netns exec "$NS" ip addr add "$HOST_IP/24" dev "$TAP"
  ip netns exec "$NS" ip link set "$TAP" up || die "tap setup failed"

  rm -rf "$RUN"; mkdir -p "$RUN"
  # stage 2 is the harness's own guest-init.sh (QRXE_NET=virtio gives eth0); its
  # command is this agent loop. Each command is bounded by the timeout its caller wrote.
  cp "$HERE/guest-init.sh" "$RUN/"
  cat >"$RUN/cmd" <<'EOF'
n=0
echo "agent up at uptime $(cut -d' ' -f1 /proc/uptime)"
while [ ! -e /qrxe/stop ]; do
  if [ -e /qrxe/cmd.$n ]; then
    bash /qrxe/cmd.$n </dev/null >/qrxe/out.$n 2>&1
    echo $? >/qrxe/.rc; mv /qrxe/.rc /qrxe/rc.$n; n=$((n+1))   # appears whole to the host
  else sleep 0.1; fi
done
echo "agent stop"
EOF
  {
    printf 'QRXE_KMODS=%q\n' "$KDIR/root/lib/modules/$KVER"
    echo QRXE_RDMA=rxe; echo QRXE_NET=virtio; echo QRXE_IP=$GUEST_IP; echo QRXE_MTU=1500
    echo "QRXE_ROUTES=''"; echo QRXE_ARP=on; echo "QRXE_OUTDIR=''"; echo "QRXE_ENV=''"
  } >"$RUN/env"

  local t0=$SECONDS
  # setsid: the guest outlives this shell; timeout caps its life if nobody calls down
  ( exec setsid timeout "${ROCE_VM_TIMEOUT:-3600}" ip netns exec "$NS" qemu-system-x86_64 \
      -accel tcg,thread=multi -cpu max -smp "${ROCE_SMP:-2}" -m "${ROCE_MEM:-1024}" \
      -machine pc -display none -no-reboot -nodefaults -pidfile "$RUN/qemu.pid" \
      -kernel "$KDIR/root/boot/vmlinuz-$KVER" -initrd "$KDIR/initramfs.cpio.gz" \
      -append "console=ttyS0 loglevel=4 panic=-1 rdinit=/init mitigations=off tsc=reliable" \
      -serial "file:$RUN/console.log" -serial "file:$RUN/agent.log" \
      -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
      -virtfs "local,path=$RUN,mount_tag=qrxe,security_model=none" \
      -netdev "tap,id=n0,ifname=$TAP,script=no,downscript=no" \
      -device virtio-net-pci,netdev=n0,mac=52:54:00:77:00:02 \
      </dev/null >"$RUN/qemu.out" 2>&1 ) &
  echo $! >"$RUN/timeout.pid"
  while [ $((SECONDS - t0)) -lt "${ROCE_BOOT_WAIT:-300}" ]; do
    [ -e "$RUN/ready" ] || [ -e "$RUN/rc" ] && break
    kill -0 "$(cat "$RUN/timeout.pid")" 2>/dev/null || break
    sleep 0.2
  done
  if [ ! -e "$RUN/ready" ] || [ -e "$RUN/rc" ]; then
    echo "roce-net: guest not ready after $((SECONDS - t0))s (rc=$(cat "$RUN/rc" 2>/dev/null)); console tail:" >&2
    tail -n 30 "$RUN/console.log" "$RUN/qemu.out" >&2
    cmd_down >/dev/null 2>&1; exit 1
  fi
  echo "roce-net: guest ready after $((SECONDS - t0))s (guest uptime $(cat "$RUN/ready")s); netns $NS, tap $TAP $HOST_IP, guest $GUEST_IP, qemu pid $(qemu_pid)"
}

cmd_guest() {
  [ -e "$RUN/ready" ] && qemu_pid >/dev/null || die "guest not up (roce-net.sh up)"
  local w=${GWAIT:-300} n t0=$SECONDS
  n=$(submit "$(printf 'timeout -k 5 %s bash -c %q' "$w" "$1")")
  # the guest's own timeout plus slack for the agent and 9p
  while [ ! -s "$RUN/rc.$n" ] && [ $((SECONDS - t0)) -lt $((w + 15)) ]; do sleep 0.1; done
  cat "$RUN/out.$n" 2>/dev/null
  [ -s "$RUN/rc.$n" ] || { echo "roce-net: guest command $n got no status in ${w}s" >&2; return 124; }
  return "$(cat "$RUN/rc.$n")"
}

cmd_guest_bg() {
  local name=$2 secs=${3:-${GWAIT:-300}}
  rm -f "$RUN/bg-$name".*
  # setsid: the job is a session of its own (wait-bg kills it as one), apart from the agent's timeout
  GWAIT=30 cmd_guest "$(printf 'cd /root; setsid bash -c %q >/qrxe/bg-%s.log 2>&1 </dev/null & echo $! >/qrxe/bg-%s.pid' \
    "timeout -k 5 $secs bash -c $(printf %q "$1"); echo \$? >/qrxe/bg-$name.rc.tmp; mv /qrxe/bg-$name.rc.tmp /qrxe/bg-$name.rc" \
    "$name" "$name")"
}

cmd_wait_bg() {
  local name=$1 secs=$2 t0=$SECONDS
  while [ ! -s "$RUN/bg-$name.rc" ] && [ $((SECONDS - t0)) -lt "$secs" ]; do sleep 0.2; done
  [ -s "$RUN/bg-$name.rc" ] && return "$(cat "$RUN/bg-$name.rc")"
  # the job's session: timeout makes a process group of its own inside it
  local sid; sid=$(cat "$RUN/bg-$name.pid" 2>/dev/null)
  [ -n "$sid" ] && GWAIT=20 cmd_guest "pkill -KILL -s $sid" >/dev/null
  return 124
}

cmd_down() {
  local p t0=$SECONDS
  if p=$(qemu_pid); then
    touch "$RUN/stop"   # the agent exits, guest-init powers off, qemu ends
    while kill -0 "$p" 2>/dev/null && [ $((SECONDS - t0)) -lt 15 ]; do sleep 0.2; done
    if kill -0 "$p" 2>/dev/null; then
      kill "$p" 2>/dev/null; sleep 1; kill -9 "$p" 2>/dev/null
    fi
    echo "roce-net: guest stopped after $((SECONDS - t0))s (guest rc=$(cat "$RUN/rc" 2>/dev/null))"
  fi
  p=$(cat "$RUN/timeout.pid" 2>/dev/null) && grep -q timeout "/proc/$p/comm" 2>/dev/null && kill "$p" 2>/dev/null
  ip netns exec "$NS" ip link del "$TAP" 2>/dev/null
  ip netns del "$NS" 2>/dev/null
  return 0
}

case ${1:-} in
  up) cmd_up ;;
  guest) [ $# -ge 2 ] || die "usage: guest 'cmd'"; cmd_guest "$2" ;;
  guest-bg) [ $# -ge 3 ] || die "usage: guest-bg 'cmd' NAME [SECS]"; cmd_guest_bg "$2" "$3" "${4:-}" ;;
  wait-bg) [ $# -ge 3 ] || die "usage: wait-bg NAME SECS"; cmd_wait_bg "$2" "$3" ;;
  host) [ $# -ge 2 ] || die "usage: host 'cmd'"; exec ip netns exec "$NS" bash -c "$2" ;;
  down) cmd_down ;;
  *) sed -n '2,/^set -uo/{/^#/p}' "$0" >&2; exit 2 ;;
esac
