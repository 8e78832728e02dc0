#!/bin/bash
# Stage 2 (PID 1 on the overlay root): set up RDMA (rxe and/or siw) on a
# network device, run /qrxe/cmd with output on /dev/ttyS1, store the exit
# status in /qrxe/rc and power off.  Diagnostics go to the console (ttyS0).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8
log() { echo "qrxe: $*" >/dev/console; }
finish() { echo "$1" >/qrxe/rc; sync; busybox poweroff -f; sleep 10; }
trap 'finish 126' ERR
set -E

mount -t tmpfs -o mode=755 tmpfs /run
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
# devtmpfs has no /dev/fd (bash process substitution needs it)
ln -sfn /proc/self/fd /dev/fd; ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout; ln -sf /proc/self/fd/2 /dev/stderr
mount -t tmpfs tmpfs /dev/shm
mountpoint -q /tmp || true   # /tmp stays the (writable) overlay of the host /tmp
source /qrxe/env
KVER=$(uname -r)
mkdir -p "/lib/modules/$KVER"
mount --bind "$QRXE_KMODS" "/lib/modules/$KVER"
hostname qrxe
ip link set lo up
log "stage2 up at uptime $(cut -d' ' -f1 /proc/uptime)s"

# --- network device for the soft RDMA device(s) ---
IP=${QRXE_IP:-10.10.10.1}
case "$QRXE_NET" in
  dummy) modprobe dummy numdummies=0; ip link add qrxe0 type dummy; NETDEV=qrxe0
         # dummy is NOARP by default: every neighbour "resolves" and rdma_resolve_addr never
         # fails; with ARP on, unanswered addresses (QRXE_ROUTES) give ADDR_ERROR -ETIMEDOUT
         [ "${QRXE_ARP:-on}" = on ] && ip link set qrxe0 arp on ;;
  virtio) modprobe virtio_net; sleep 0.5; NETDEV=$(ls /sys/class/net | grep -v -x lo | head -1) ;;
  lo) NETDEV=lo ;;
  *) log "unknown QRXE_NET=$QRXE_NET"; finish 125 ;;
esac
if [ "$NETDEV" != lo ]; then
  ip link set "$NETDEV" mtu "${QRXE_MTU:-1500}" up
  ip addr add "$IP/24" dev "$NETDEV"
else
  ip addr add "$IP/32" dev lo   # rdma_cm to 127.0.0.1 fails (resolve_route: ENODEV)
fi
for r in ${QRXE_ROUTES:-}; do ip route add "$r" dev "$NETDEV" 2>/dev/console || log "route $r failed"; done
if [ -n "${QRXE_OUTDIR:-}" ]; then
  mkdir -p "$QRXE_OUTDIR"
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 qrxeout "$QRXE_OUTDIR" || log "cannot mount $QRXE_OUTDIR"
fi

# --- RDMA ---
modprobe -a ib_core ib_uverbs rdma_cm rdma_ucm ib_umad 2>/dev/console || true
for t in $QRXE_RDMA; do
  case $t in
    rxe) modprobe rdma_rxe && rdma link add rxe0 type rxe netdev "$NETDEV" 2>/dev/console || log "rxe setup failed" ;;
    siw) modprobe siw && rdma link add siw0 type siw netdev "$NETDEV" 2>/dev/console || log "siw setup failed" ;;
    none) ;;
  esac
done
for i in $(seq 50); do [ -e /dev/infiniband/rdma_cm ] && break; sleep 0.1; done
export QRXE_IP=$IP QRXE_NETDEV=$NETDEV QRXE_RDMA
for kv in ${QRXE_ENV:-}; do export "$kv"; done
log "ready at uptime $(cut -d' ' -f1 /proc/uptime)s netdev=$NETDEV ip=$IP rdma=[$(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ')]"
echo "$(cut -d' ' -f1 /proc/uptime)" >/qrxe/ready

# --- run the command ---
stty -F /dev/ttyS1 raw -echo 2>/dev/null || true
cd /root 2>/dev/null || cd /
trap - ERR
set +E
bash /qrxe/cmd </dev/null >/dev/ttyS1 2>&1
rc=$?
log "command exited with $rc at uptime $(cut -d' ' -f1 /proc/uptime)s"
finish $rc
