#!/usr/bin/python3
"""Fuzz test of softverbs' RoCEv2 receive path: malformed or hostile packets never crash
softverbs and never touch memory outside a registered MR with the right access.

    /usr/bin/python3 softverbs/tests/roce_fuzz.py [--seed N] [--seconds S] [--packets N]
    (ROCE_FUZZ_DEBUG=1: the probes' PSN resynchronisation, step by step)

Needs root: the test re-executes itself in a network namespace of its own (`unshare -n`),
where softverbs owns UDP 4791 on 127.0.0.1 and the fake peer 127.0.0.2:4791, apart from
every other test's RoCEv2 traffic. Inside, pyverbs loads softverbs (LD_LIBRARY_PATH=
build/lib/soft, SOFTVERBS_WIRE=roce) and the peer is a plain UDP socket (unconnected,
IP_PMTUDISC_DO: IPv4 ID 0, so its ICRC is computed exactly, shared/reference/roce.md section
3). The process may not reserve more than 3 GiB of address space.

Memory, one mmap with guard bytes around and between the regions:
  A  MR LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC (the only remotely writable one)
  B  MR REMOTE_READ       R  MR LOCAL_WRITE: RC receives (200-byte SGEs in 256-byte slots)
  L  MR LOCAL_WRITE: the RC QP's own READ/atomic/SEND buffers (100-byte SGEs, 128-byte slots)
  U  MR LOCAL_WRITE: UD receives (140-byte SGEs, 256-byte slots)
Rounds, each with a fresh RC QP (AV ::ffff:127.0.0.2, is_global; dest QPN X_BASE+round;
random rq_psn; round 0's wraps) and UD QP: a control WRITE ONLY into A's control slot (the
first must land and be ACKed: the path and this test's ICRC work); the QP posts a READ, an
atomic and a SEND of its own to the peer (hostile responses then meet a requester); then
batches of packets, each followed by a probe (a valid WRITE with AckReq into the control
slot, PSN kept in step by the responder's sequence NAKs), until a NAK ends the round or
its batches are done; the QPs are destroyed whatever their state. A fifth of the rounds
keep to kinds that leave the connection up (long request streams, duplicates, PSN games),
the rest use every kind (KINDS: all 256 opcodes; bounds, keys, lengths, pads, P_Keys, TVer,
truncation, oversize, wrong source/QPN, responses to the requester; a right ICRC unless the
kind is bad_icrc, whose ICRC no IPv4 ID satisfies).

Checked after every round and at the end:
  - guard bytes and all of B unchanged, byte for byte; R, L, U changed only inside SGEs;
  - A changed in the round only where a packet of the round that could pass every gate
    (ICRC, source address, P_Key, QPN) named A's rkey with an in-bounds range, and only to
    bytes such packets carried there (WRITE ONLY/FIRST, and MIDDLE/LAST payloads at MTU
    multiples behind a WRITE FIRST); aligned in-bounds atomics with A's rkey: any value;
  - each READ RESPONSE / ATOMIC ACK the peer gets answers an authorized in-bounds READ /
    atomic of the round, and READ data equals the MR there (no byte from outside it);
  - every ACKed probe is in memory; softverbs' own packets carry a right ICRC;
  - the process is alive (a crash kills the namespace's process: reported with its signal),
    and at the end a fresh QP still takes a WRITE and answers a READ over RoCEv2, and a
    loopback RC pair in the same context still completes a SEND.
Packet generation is deterministic for a seed (printed); the PSN resynchronisation follows
the responder's answers. Bounded by --seconds / --packets. Exit 0 iff no violation."""
import argparse
import os
import random
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SOFT = os.path.join(ROOT, "build", "lib", "soft")

ROCE_PORT = 4791
SV_IP, PEER_IP, WRONG_IP = "127.0.0.1", "127.0.0.2", "127.0.0.3"
IP_MTU_DISCOVER, IP_PMTUDISC_DO = 10, 2
PMTU = 1024                      # the QP's path MTU (IBV_MTU_1024)
X_BASE = 0x0ABC00                # dest QPN of round r: X_BASE + r
PAGE = 4096


def log(*a):
    print(*a, flush=True)


# ------------------------------------------------------------------ outside: the namespace
def outer(args):
    if os.geteuid() != 0:
        log("roce_fuzz: needs root (a private network namespace)")
        return 2
    lib = os.path.join(SOFT, "libibverbs.so.1")
    if not os.path.exists(lib):
        log(f"roce_fuzz: {lib} missing (make softverbs)")
        return 2
    env = dict(os.environ)
    env["ROCE_FUZZ_INNER"] = "1"
    env["LD_LIBRARY_PATH"] = SOFT + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["SOFTVERBS_WIRE"] = "roce"
    env.pop("RDMACM_RS_TRACE", None)
    env.pop("SOFTVERBS_ROCE_DROP", None)
    cmd = ["unshare", "-n", "--", "/usr/bin/python3", os.path.abspath(__file__)] + sys.argv[1:]
    p = subprocess.Popen(cmd, env=env)
    try:
        rc = p.wait(timeout=args.seconds + 45)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        log("FAIL roce_fuzz: hung (killed after %ds)" % (args.seconds + 45))
        return 1
    if rc < 0:
        log("FAIL roce_fuzz: the softverbs process died of signal %d (%s)" % (-rc, signal.Signals(-rc).name))
        return 1
    return rc


# ------------------------------------------------------------------ packets
def icrc(src, dst, sport, dport, body):
    """roce.md section 3: CRC-32 over 8 x 0xFF, the masked IPv4 header (ID 0, DF), the masked
    UDP header, the BTH with byte 4 masked, the rest; stored little-endian."""
    total = 20 + 8 + len(body) + 4
    iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0xFF, total, 0, 0x4000, 0xFF, 17, 0xFFFF,
                      socket.inet_aton(src), socket.inet_aton(dst))
    udph = struct.pack("!HHHH", sport, dport, 8 + len(body) + 4, 0xFFFF)
    b = bytearray(body[:12])
    if len(b) > 4:
        b[4] = 0xFF
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + iph + udph + bytes(b) + body[12:]) & 0xFFFFFFFF)


def id_solvable(src, dst, sport, dport, pkt):
    """Whether some IPv4 ID makes pkt's ICRC match (what the receiver checks)."""
    if len(pkt) < 16:
        return False
    body, want = pkt[:-4], struct.unpack("<I", pkt[-4:])[0]
    total = 20 + 8 + len(pkt)
    b = bytearray(body[:12])
    b[4] = 0xFF
    pre = struct.pack("!BBH", 0x45, 0xFF, total)
    rest = struct.pack("!HBBH4s4s", 0x4000, 0xFF, 17, 0xFFFF, socket.inet_aton(src), socket.inet_aton(dst)) + \
        struct.pack("!HHHH", sport, dport, 8 + len(pkt), 0xFFFF) + bytes(b) + body[12:]
    c = lambda i: zlib.crc32(b"\xff" * 8 + pre + struct.pack("!H", i) + rest) & 0xFFFFFFFF
    c0 = c(0)
    basis = []
    for k in range(16):
        v = c(1 << k) ^ c0
        for bv in basis:
            v = min(v, v ^ bv)
        if v:
            basis.append(v)
            basis.sort(reverse=True)
    t = want ^ c0
    for bv in basis:
        t = min(t, t ^ bv)
    return t == 0


def bth(opcode, dqpn, psn, pad, pkey=0xFFFF, se=False, ack=False, tver=0, mig=0, resv8a=0, resv7=0):
    b1 = (se << 7) | (mig << 6) | ((pad & 3) << 4) | (tver & 15)
    return struct.pack("!BBHII", opcode & 0xFF, b1, pkey, ((resv8a & 0xFF) << 24) | (dqpn & 0xFFFFFF),
                       (ack << 31) | ((resv7 & 0x7F) << 24) | (psn & 0xFFFFFF))


reth = lambda va, rkey, ln: struct.pack("!QII", va & (2**64 - 1), rkey & 0xFFFFFFFF, ln & 0xFFFFFFFF)
atometh = lambda va, rkey, swap, cmp: struct.pack("!QIQQ", va & (2**64 - 1), rkey & 0xFFFFFFFF, swap & (2**64 - 1), cmp & (2**64 - 1))
aeth = lambda syn, msn: struct.pack("!I", ((syn & 0xFF) << 24) | (msn & 0xFFFFFF))
u32 = lambda v: struct.pack("!I", v & 0xFFFFFFFF)

# Extension headers by opcode, as softverbs' packet::op_info has them (RC 0x00, UC 0x20
# (SEND/WRITE rows only), UD 0x64/0x65): (reth, atomic, aeth, atomic_ack, imm, ieth, deth, payload)
_RCI = {0x00: "P", 0x01: "P", 0x02: "P", 0x03: "IP", 0x04: "P", 0x05: "IP", 0x06: "RP", 0x07: "P",
        0x08: "P", 0x09: "IP", 0x0A: "RP", 0x0B: "RIP", 0x0C: "R", 0x0D: "AP", 0x0E: "P", 0x0F: "AP",
        0x10: "AP", 0x11: "A", 0x12: "AK", 0x13: "T", 0x14: "T", 0x16: "EP", 0x17: "EP"}
HLEN = {"R": 16, "T": 28, "A": 4, "K": 8, "I": 4, "E": 4, "D": 8}


def op_info(opc):
    if opc in (0x64, 0x65):
        return "D" + ("IP" if opc == 0x65 else "P")
    t, low = opc & 0xE0, opc & 0x1F
    if t not in (0x00, 0x20) or (t == 0x20 and low > 0x0B):
        return None
    return _RCI.get(low)


def headers_len(info):
    return 12 + sum(HLEN.get(c, 0) for c in info)


def decode(pkt):
    """softverbs' packet::decode: (opcode, pkey, dqpn, psn, fields, payload) or None."""
    if len(pkt) < 16 or pkt[1] & 0x0F:
        return None
    info = op_info(pkt[0])
    if info is None:
        return None
    hl = headers_len(info)
    body_end = len(pkt) - 4
    if hl > body_end:
        return None
    body = pkt[hl:body_end]
    pad = (pkt[1] >> 4) & 3
    if "P" in info:
        if pad > len(body):
            return None
        payload = body[:len(body) - pad]
    elif pad or body:
        return None
    else:
        payload = b""
    f, pos = {}, 12
    for c in "DRTAKIE":
        if c in info:
            f[c] = pkt[pos:pos + HLEN[c]]
            pos += HLEN[c]
    pkey = struct.unpack("!H", pkt[2:4])[0]
    dqpn = struct.unpack("!I", pkt[4:8])[0] & 0xFFFFFF
    psn = struct.unpack("!I", pkt[8:12])[0] & 0xFFFFFF
    return pkt[0], pkey, dqpn, psn, f, payload


# ------------------------------------------------------------------ inner: the test
class Region:
    def __init__(self, name, off, size, slot=0, sge=0):
        self.name, self.off, self.size, self.slot, self.sge = name, off, size, slot, sge


WC_STATUS = {0: "SUCCESS", 1: "LOC_LEN_ERR", 2: "LOC_QP_OP_ERR", 4: "LOC_PROT_ERR", 5: "WR_FLUSH_ERR",
             9: "REM_INV_REQ_ERR", 10: "REM_ACCESS_ERR", 11: "REM_OP_ERR", 12: "RETRY_EXC_ERR",
             13: "RNR_RETRY_EXC_ERR"}


def inner(args):
    # No more address space than this: a packet that made softverbs reserve a buffer as
    # large as a RETH's 32-bit length asks (4 GiB) aborts the process here, as it would on
    # a machine with less memory or strict overcommit.
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    import ctypes
    import mmap
    import pyverbs.enums as e
    from pyverbs.addr import AHAttr, GlobalRoute, GID
    from pyverbs.cq import CQ
    from pyverbs.device import Context
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
    from pyverbs.wr import SGE, RecvWR, SendWR

    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    log(f"roce_fuzz: seed {seed} (rerun: --seed {seed}); up to {args.packets} packets or {args.seconds:g} s")
    t_start = time.monotonic()
    deadline = t_start + args.seconds
    failures = []

    def fail(msg):
        if len(failures) < 30:
            log("VIOLATION: " + msg)
        failures.append(msg)

    # ---- memory: one mapping; guard bytes around and between the regions
    A = Region("A", PAGE + 40, 2 * PAGE)                    # REMOTE_WRITE|READ|ATOMIC
    B = Region("B", 4 * PAGE + 24, PAGE)                    # REMOTE_READ only
    R = Region("R", 6 * PAGE + 8, 16 * 256, 256, 200)       # RC receives
    L = Region("L", 8 * PAGE + 16, 8 * 128, 128, 100)       # the QP's own READ/atomic/SEND
    U = Region("U", 10 * PAGE + 32, 8 * 256, 256, 140)      # UD receives (40 B GRH + 100)
    TOTAL = 12 * PAGE
    mem = mmap.mmap(-1, TOTAL)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    init = bytearray((b"GUARD\xa5\x5a\xc3-" * (TOTAL // 9 + 1))[:TOTAL])
    for reg, mul, add in ((A, 131, 7), (B, 29, 101), (R, 17, 3), (L, 53, 11), (U, 71, 5)):
        init[reg.off:reg.off + reg.size] = bytes(((i * mul + add) ^ (i >> 8)) & 0xFF for i in range(reg.size))
    init = bytes(init)
    mem[:] = init
    addr = lambda reg, o=0: base + reg.off + o

    ctx = Context(name="soft0")
    pd = PD(ctx)
    LW, RWR, RRD, RAT = e.IBV_ACCESS_LOCAL_WRITE, e.IBV_ACCESS_REMOTE_WRITE, e.IBV_ACCESS_REMOTE_READ, e.IBV_ACCESS_REMOTE_ATOMIC
    mrs = {}                                # (kept: the MRs live as long as the test)
    for reg, acc in ((A, LW | RWR | RRD | RAT), (B, RRD), (R, LW), (L, LW), (U, LW)):
        mr = MR(pd, reg.size, acc, address=addr(reg))
        mrs[reg.name] = mr
        reg.va, reg.rkey, reg.lkey = addr(reg), mr.rkey, mr.lkey
    cq = CQ(ctx, 8192)
    gid0 = ctx.query_gid(1, 0)
    if str(gid0) != "0000:0000:0000:0000:0000:ffff:7f00:0001":
        log(f"FAIL roce_fuzz: soft0's GID 0 is {gid0}, not ::ffff:127.0.0.1")
        return 1
    peer_gid = GID()
    peer_gid.gid = "0000:0000:0000:0000:0000:ffff:7f00:0002"

    def peer_sock(ip):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        s.bind((ip, ROCE_PORT))
        s.setblocking(False)
        return s
    peer, wrong = peer_sock(PEER_IP), peer_sock(WRONG_IP)

    stats, wcs, ends, ends_mode = {}, {}, {}, {}
    counts = dict(sent=0, rounds=0, controls=0, probes=0, rx=0, rx_read_resp=0, rx_atomic_ack=0, rx_ack=0,
                  rx_nak=0, rx_nak_seq=0, rx_rnr=0, rx_requests=0, a_changed=0)

    def in_mr(reg, va, ln):
        return ln >= 0 and reg.va <= va and va + ln <= reg.va + reg.size

    # ---- the round's model: what may change in A, which READs/atomics may be answered
    class Round:
        pass
    r = Round()

    def allow(o, data):
        for i, v in enumerate(data):
            if 0 <= o + i < A.size:
                r.a_vals.setdefault(o + i, set()).add(v)

    def note_sent(p, src_ok, qpn):
        """What a packet that passes every gate (ICRC, source, P_Key, QPN) may do."""
        if not src_ok or not id_solvable(PEER_IP, SV_IP, ROCE_PORT, ROCE_PORT, p):
            return
        d = decode(p)
        if d is None:
            return
        opc, pkey, dqpn, psn, f, payload = d
        if pkey & 0x7FFF != 0x7FFF or dqpn != qpn or opc >= 0x40:
            return
        # (UC opcodes too: softverbs' RC link goes by the opcode's low 5 bits)
        low = opc & 0x1F
        if low in (0x06, 0x0A, 0x0B):
            va, rkey, ln = struct.unpack("!QII", f["R"])
            if rkey == A.rkey and in_mr(A, va, ln):
                o = va - A.va
                allow(o, payload[:ln])
                if low == 0x06:
                    r.firsts.append((o, ln))
        elif low in (0x07, 0x08, 0x09):
            # reassembled behind any WRITE FIRST of the round, at a multiple of the MTU
            for o, ln in r.firsts:
                for j in range(0, ln, PMTU):
                    allow(o + j, payload[:ln - j])
        elif opc == 0x0C:
            r.reads.setdefault(psn, []).append(struct.unpack("!QII", f["R"]))
        elif opc in (0x13, 0x14):
            va, rkey = struct.unpack("!QI", f["T"][:12])
            r.atomics.setdefault(psn, []).append((va, rkey))
            if rkey == A.rkey and va % 8 == 0 and in_mr(A, va, 8):
                r.a_any[va - A.va:va - A.va + 8] = b"\x01" * 8

    def a_byte_ok(o, v, cur=None):
        """May byte o of A hold v (cur: also its value now, for READ data)?"""
        return v == r.snap[o] or r.a_any[o] or v in r.a_vals.get(o, ()) or (cur is not None and v == cur[A.off + o])

    def check_memory(where):
        cur = bytes(mem)
        spans = [(0, A.off, "guard before A"), (A.off + A.size, B.off, "guard between A and B"),
                 (B.off, B.off + B.size, "MR B (REMOTE_READ only)")]
        prev = B
        for reg in (R, L, U):
            spans.append((prev.off + prev.size, reg.off, f"guard before {reg.name}"))
            for s in range(reg.size // reg.slot):
                spans.append((reg.off + s * reg.slot + reg.sge, reg.off + (s + 1) * reg.slot, f"MR {reg.name} slot {s} past its SGE"))
            prev = reg
        spans.append((prev.off + prev.size, TOTAL, "guard after U"))
        for lo, hi, what in spans:
            if cur[lo:hi] != init[lo:hi]:
                i = next(k for k in range(lo, hi) if cur[k] != init[k])
                fail(f"{where}: {what}: byte {i - lo} changed ({init[i]:#04x} -> {cur[i]:#04x})")
        a = cur[A.off:A.off + A.size]
        if a != r.snap:
            for o in range(A.size):
                if a[o] != r.snap[o]:
                    counts["a_changed"] += 1
                    if not a_byte_ok(o, a[o]):
                        fail(f"{where}: MR A byte {o} is {a[o]:#04x} (was {r.snap[o]:#04x}): no authorized WRITE or atomic of the round put it there")
                        break

    def read_ok(psn, payload):
        cur = bytes(mem)
        for back in range(16):
            for va, rkey, ln in r.reads.get((psn - back) & 0xFFFFFF, ()):
                if ln == 0 and back == 0 and not payload:
                    return True                 # zero-length READ: no data, no key check (as rxe)
                reg = A if rkey == A.rkey else B if rkey == B.rkey else None
                off = back * PMTU
                if reg is None or not in_mr(reg, va, ln) or off + len(payload) > ln:
                    continue
                o = va - reg.va + off
                if reg is B and payload == cur[B.off + o:B.off + o + len(payload)]:
                    return True
                if reg is A and all(a_byte_ok(o + i, v, cur) for i, v in enumerate(payload)):
                    return True
        return False

    # ---- what softverbs sends to the peer
    def on_rx(data, ip, port):
        counts["rx"] += 1
        if (ip, port) != (SV_IP, ROCE_PORT):
            return fail(f"a packet from {ip}:{port}, not from softverbs' {SV_IP}:{ROCE_PORT}")
        if len(data) < 16 or data[-4:] != icrc(SV_IP, PEER_IP, ROCE_PORT, ROCE_PORT, data[:-4]):
            return fail(f"softverbs sent a packet whose ICRC (IPv4 ID 0) does not match: {data[:16].hex()}")
        d = decode(data)
        if d is None:
            return fail(f"softverbs sent an undecodable packet: {data[:16].hex()}")
        opc, pkey, dqpn, psn, f, payload = d
        mine = dqpn == r.X
        if opc in (0x0D, 0x0E, 0x0F, 0x10):
            counts["rx_read_resp"] += 1
            if not mine or not read_ok(psn, payload):
                fail(f"READ response (dqpn {dqpn:#x}, psn {psn:#x}, {len(payload)} B) answers no authorized in-bounds READ of the round")
        elif opc == 0x12:
            counts["rx_atomic_ack"] += 1
            if not mine or not any(rk == A.rkey and va % 8 == 0 and in_mr(A, va, 8) for va, rk in r.atomics.get(psn, ())):
                fail(f"ATOMIC ACK (dqpn {dqpn:#x}, psn {psn:#x}) answers no authorized atomic of the round")
        elif opc == 0x11:
            syn = f["A"][0]
            kind = syn >> 5
            name = {0: "rx_ack", 1: "rx_rnr"}.get(kind, "rx_nak_seq" if syn == 0x60 else "rx_nak")
            counts[name] += 1
            if mine:
                r.events.append((name, syn, psn))
        else:
            counts["rx_requests"] += 1
            if mine:
                r.peer_reqs.append((opc, psn))

    def drain(wait=0.0):
        """Reads what came; with wait > 0, waits that long for the first packet."""
        for s in (peer, wrong):
            if wait > 0 and s is peer:
                select.select([peer], [], [], wait)
            while True:
                try:
                    data, (ip, port) = s.recvfrom(65536)
                except BlockingIOError:
                    break
                if s is wrong:
                    fail(f"softverbs answered the wrong source {WRONG_IP}")
                    continue
                on_rx(data, ip, port)

    def poll_cq():
        while True:
            n, wl = cq.poll(num_entries=64)
            for w in wl[:n]:
                name = WC_STATUS.get(w.status, str(w.status))
                wcs[name] = wcs.get(name, 0) + 1
            if n < 64:
                return

    # ---- packets
    def pkt(opcode, dqpn, psn, hdrs=b"", payload=b"", pad=None, **kw):
        n = (-len(payload)) & 3
        body = bth(opcode, dqpn, psn, n if pad is None else pad, **kw) + hdrs + payload + b"\0" * n
        return body + icrc(PEER_IP, SV_IP, ROCE_PORT, ROCE_PORT, body)

    def recrc(body):
        return body + icrc(PEER_IP, SV_IP, ROCE_PORT, ROCE_PORT, body)

    def bad_crc(p):
        """The packet with an ICRC that no IPv4 ID satisfies."""
        p = bytearray(p)
        while True:
            p[-4 + rng.randrange(4)] ^= 1 << rng.randrange(8)
            if not id_solvable(PEER_IP, SV_IP, ROCE_PORT, ROCE_PORT, bytes(p)):
                return bytes(p)

    def send(p, kind, src_ok=True, sock=None):
        if len(p) >= 12:                        # the PSNs it may take
            psn = struct.unpack("!I", p[8:12])[0] & 0xFFFFFF
            n = 1
            if p[0] == 0x0C and len(p) >= 28:
                n = min(64, max(1, -(-struct.unpack("!I", p[24:28])[0] // PMTU)))
            r.used.update((psn + i) & 0xFFFFFF for i in range(n))
        (sock or peer).sendto(p, (SV_IP, ROCE_PORT))
        counts["sent"] += 1
        stats[kind] = stats.get(kind, 0) + 1
        note_sent(p, src_ok, r.qpn)
        r.history.append(p)

    CTRL, CTRL_LEN = A.size // 2, 64        # the control/probe slot: hostile writes keep off it

    def a_off(ln):
        while True:
            o = rng.randrange(0, A.size - ln + 1)
            if o + ln <= CTRL or o >= CTRL + CTRL_LEN:
                return o

    def edge_va(reg, ln):
        s, end = reg.va, reg.va + reg.size
        return rng.choice([s - 1, s - ln + 1, s - ln, end - ln + 1, end, end - 1, end + 1, s + reg.size * 2,
                           0, 1, 2**64 - 1, 2**64 - ln + 1, 2**64 - 8, 2**63, s + 2**32, s - 2**32,
                           base - 1, base + TOTAL - ln, B.va - 1, R.va + 300, rng.randrange(2**64)]) & (2**64 - 1)

    def rand_key():
        return rng.choice([A.rkey, B.rkey, R.rkey, L.rkey, U.rkey, A.lkey, A.rkey ^ 1, A.rkey + 1, 0, 0xFFFFFFFF,
                           rng.randrange(2**32)])

    def nxt(n=1):
        p = r.psn
        r.psn = (r.psn + n) & 0xFFFFFF
        return p

    # ---- kinds of packet in the barrage (each returns the packets to send)
    def k_write_ok():
        ln = rng.choice([1, 4, 7, 64, 255, 1000, PMTU])
        return [pkt(0x0A, r.qpn, nxt(), reth(A.va + a_off(ln), A.rkey, ln), rng.randbytes(ln), ack=rng.random() < 0.5)]

    def k_write_imm():
        ln = rng.choice([0, 4, 33, 512])
        return [pkt(0x0B, r.qpn, nxt(), reth(A.va + a_off(ln), A.rkey, ln) + u32(rng.randrange(2**32)), rng.randbytes(ln), ack=True)]

    def k_write_bounds():
        ln = rng.choice([1, 2, 8, 100, PMTU])
        reg = rng.choice([A, A, A, B, R, L])
        plen = rng.choice([ln, ln, ln - 1, ln + 1, 0, rng.randrange(PMTU + 1)])
        return [pkt(0x0A, r.qpn, nxt(), reth(edge_va(reg, ln), rng.choice([A.rkey, reg.rkey]), ln), rng.randbytes(max(0, plen)), ack=True)]

    def k_write_len():
        ln = rng.choice([0, 1, 63, 65, PMTU + 1, 2**26, 2**26 + 1, 2**31, 2**32 - 1])
        opc = rng.choice([0x0A, 0x06, 0x0B])
        hd = reth(A.va + a_off(64), A.rkey, ln) + (u32(3) if opc == 0x0B else b"")
        return [pkt(opc, r.qpn, nxt(), hd, rng.randbytes(rng.choice([0, 64, PMTU])), ack=True)]

    def k_write_key():
        reg = rng.choice([A, B, R, L, U])
        ln = rng.choice([1, 8, 64])
        o = a_off(ln) if reg is A else rng.randrange(0, reg.size - ln + 1)
        opc = rng.choice([0x0A, 0x0A, 0x2A])        # 0x2A: UC WRITE ONLY to an RC QP
        return [pkt(opc, r.qpn, nxt(), reth(reg.va + o, rand_key(), ln), rng.randbytes(ln), ack=True)]

    def k_write_multi():
        npk = rng.randrange(2, 5)
        total = PMTU * (npk - 1) + rng.randrange(1, PMTU + 1)
        key = A.rkey if rng.random() < 0.7 else rand_key()
        va = A.va + a_off(total) if rng.random() < 0.8 else edge_va(A, total)
        rlen = total if rng.random() < 0.7 else rng.choice([total - 1, total + 1, 2**32 - 1, 2**26 + 1, PMTU])
        data = rng.randbytes(total)
        parts = []
        for i in range(npk):
            opc = 0x06 if i == 0 else 0x07 if i < npk - 1 else rng.choice([0x08, 0x09])
            parts.append((opc, reth(va, key, rlen) if i == 0 else u32(5) if opc == 0x09 else b"", data[i * PMTU:(i + 1) * PMTU]))
        m = rng.random()
        if m < 0.15 and npk > 2:
            parts.pop(1)                                        # a MIDDLE lost
        elif m < 0.25:
            i, j = rng.sample(range(npk), 2)                    # two swapped
            parts[i], parts[j] = parts[j], parts[i]
        elif m < 0.35:
            parts[0] = (0x07, b"", parts[0][2])                 # no FIRST
        elif m < 0.45 and npk > 2:
            parts[1] = (0x07, b"", parts[1][2][:PMTU - rng.randrange(1, 8)])   # a short MIDDLE
        elif m < 0.5:
            parts.insert(1, (0x06, reth(A.va, A.rkey, 2 * PMTU), data[:PMTU]))  # FIRST twice
        elif m < 0.55:
            parts[-1] = (parts[-1][0], parts[-1][1], parts[-1][2] + rng.randbytes(PMTU))  # LAST too long
        return [pkt(o, r.qpn, nxt(), hd, ch, ack=(i == len(parts) - 1)) for i, (o, hd, ch) in enumerate(parts)]

    def k_read():
        reg = rng.choice([A, A, B, B, R, L])
        ln = rng.choice([0, 1, 8, 100, PMTU, PMTU + 1, 3 * PMTU + 5, reg.size, reg.size + 1, 2**31, 2**32 - 1])
        if rng.random() < 0.5 and ln <= reg.size:
            va = reg.va + rng.randrange(0, reg.size - ln + 1)
        else:
            va = edge_va(reg, max(ln, 1))
        key = reg.rkey if rng.random() < 0.7 else rand_key()
        n = max(1, -(-ln // PMTU))
        return [pkt(0x0C, r.qpn, nxt(n if n <= 16 else 1), reth(va, key, ln), ack=True)]

    def k_read_ok():
        reg = rng.choice([A, B])
        ln = rng.choice([1, 8, 100, PMTU, 2 * PMTU + 3, 4 * PMTU])
        va = reg.va + rng.randrange(0, reg.size - ln + 1)
        return [pkt(0x0C, r.qpn, nxt(-(-ln // PMTU)), reth(va, reg.rkey, ln), ack=True)]

    def k_read_dup():
        # a READ again at a PSN inside one the responder remembers: resumed in range, or not
        if not r.reads:
            return k_read_ok()
        psn0 = rng.choice(list(r.reads))
        va, rkey, ln = rng.choice(r.reads[psn0])
        k = rng.randrange(max(1, -(-ln // PMTU))) if ln < 2**20 else 0
        m = rng.random()
        if m < 0.4:
            va, ln = va + k * PMTU, max(0, ln - k * PMTU)           # a resume, as a requester would
        elif m < 0.7:
            va, ln = rng.choice([(2**64 - 16, 100), (va - 1, ln), (va, ln + 1), (va + k * PMTU, 2**32 - 1), (2**64 - 1, 2)])
        else:
            rkey = rand_key()
        return [pkt(0x0C, r.qpn, (psn0 + k) & 0xFFFFFF, reth(va, rkey, ln), ack=True)]

    def k_atomic_ok():
        va = A.va + (a_off(16) + 7 & ~7)
        return [pkt(rng.choice([0x13, 0x14]), r.qpn, nxt(), atometh(va, A.rkey, rng.randrange(2**64), rng.randrange(2**64)), ack=True)]

    def k_atomic():
        reg = rng.choice([A, A, A, B, R])
        va = A.va + (a_off(16) + 7 & ~7) if reg is A else reg.va + 8 * rng.randrange(reg.size // 8)
        m = rng.random()
        if m < 0.3:
            va += rng.randrange(1, 8)                           # misaligned
        elif m < 0.5:
            va = edge_va(reg, 8)
        key = reg.rkey if rng.random() < 0.8 else rand_key()
        return [pkt(rng.choice([0x13, 0x14]), r.qpn, nxt(), atometh(va, key, rng.randrange(2**64), rng.randrange(2**64)), ack=True)]

    def k_send():
        opc = rng.choice([0x04, 0x05, 0x17, 0x04])
        ln = rng.choice([0, 1, 50, 199, 200, 200, 201, PMTU])
        hd = u32(rng.randrange(2**32)) if opc in (0x05, 0x17) else b""
        return [pkt(opc, r.qpn, nxt(), hd, rng.randbytes(ln), ack=True, se=rng.random() < 0.3)]

    def k_send_multi():
        ops = [0x00] + [0x01] * rng.randrange(0, 3) + [rng.choice([0x02, 0x03, 0x16])]
        if rng.random() < 0.5:
            rng.shuffle(ops)
        out = []
        for i, o in enumerate(ops):
            ln = PMTU if o in (0x00, 0x01) and rng.random() < 0.8 else rng.randrange(0, PMTU + 2)
            out.append(pkt(o, r.qpn, nxt(), u32(9) if o in (0x03, 0x16) else b"", rng.randbytes(ln), ack=True))
        return out

    opcodes, opcodes_seen = [], set()

    def k_random_opcode():
        if not opcodes:
            opcodes.extend(range(256))
            rng.shuffle(opcodes)
        opc = opcodes.pop()
        opcodes_seen.add(opc)
        info = op_info(opc)
        hd = bytearray(rng.randbytes(headers_len(info) - 12 if info and rng.random() < 0.7 else rng.randrange(0, 40)))
        if info and "R" in info and len(hd) >= 16 and rng.random() < 0.5:    # a RETH naming A, sometimes
            hd[0:16] = reth(edge_va(A, 8) if rng.random() < 0.5 else A.va + a_off(16), A.rkey, rng.choice([0, 8, 16, 2**32 - 1]))
        if info and "T" in info and len(hd) >= 12 and rng.random() < 0.5:
            hd[0:12] = atometh(A.va + (a_off(16) + 7 & ~7) + rng.choice([0, 0, 1, 4]), A.rkey, 0, 0)[:12]
        psn = rng.choice([r.psn, r.psn, rng.randrange(2**24)])
        if psn == r.psn:
            nxt()
        return [pkt(opc, r.qpn if rng.random() < 0.9 else rng.randrange(2**24), psn, bytes(hd),
                    rng.randbytes(rng.choice([0, 1, 3, 16, 100])), pad=rng.choice([None, None, rng.randrange(4)]),
                    ack=rng.random() < 0.5, se=rng.random() < 0.2)]

    def k_truncated():
        p = rng.choice(VALID)()[0]
        cut = rng.randrange(0, min(len(p), 60))
        return [recrc(p[:cut]) if cut and rng.random() < 0.7 else p[:cut]]

    def k_bad_pad():
        ln = rng.choice([1, 2, 3, 5, 64])
        pad = rng.choice([p for p in range(4) if p != (-ln) & 3])
        return [pkt(0x0A, r.qpn, nxt(), reth(A.va + a_off(ln), A.rkey, ln), rng.randbytes(ln), pad=pad, ack=True)]

    def k_bad_hdr_bits():
        kw = rng.choice([dict(pkey=rng.choice([0x0000, 0x7FFE, 0x8000, 0x1234, rng.randrange(2**16)])),
                         dict(tver=rng.randrange(1, 16)), dict(mig=1), dict(resv8a=rng.randrange(1, 256)),
                         dict(resv7=rng.randrange(1, 128)), dict(pkey=0x7FFF)])
        return [pkt(0x0A, r.qpn, nxt(), reth(A.va + a_off(8), A.rkey, 8), rng.randbytes(8), ack=True, **kw)]

    def k_bad_icrc():
        return [bad_crc(p) for p in rng.choice(VALID)()]

    def k_psn():
        d = rng.choice([-3, -2, -1, 1, 2, 3, 100, -100, 2**23, 2**23 - 1, -(2**23)])
        return [pkt(0x0A, r.qpn, (r.psn + d) & 0xFFFFFF, reth(A.va + a_off(16), A.rkey, 16), rng.randbytes(16), ack=True)]

    def k_dup():
        return [rng.choice(r.history[-20:])] if r.history else k_write_ok()

    def k_wrong_qpn():
        p = bytearray(k_write_ok()[0][:-4])
        q = rng.choice([rng.randrange(2**24), r.qpn + 1, r.qpn - 1, r.ud_qpn, 1, 0, 0xFFFFFF] + r.old_qpns[-3:])
        p[5:8] = (q & 0xFFFFFF).to_bytes(3, "big")
        return [recrc(bytes(p))]

    def k_ud():
        opc = rng.choice([0x64, 0x65])
        hd = struct.pack("!II", rng.choice([0x11111111, 0x11111111, 0, 0x80010000, rng.randrange(2**32)]), rng.randrange(2**24))
        hd += u32(1) if opc == 0x65 else b""
        return [pkt(opc, rng.choice([r.ud_qpn, r.ud_qpn, r.qpn, 1]), rng.randrange(2**24), hd, rng.randbytes(rng.choice([0, 40, 100, 101, 256, 300])))]

    def k_size():
        n = rng.choice([0, 1, 4, 11, 15, 16, 17, 4352 - 20, 4353, 5000, 9000])
        if n < 20:
            return [rng.randbytes(n)]
        return [pkt(0x0A, r.qpn, r.psn, reth(A.va + a_off(8), A.rkey, n), rng.randbytes(n - 32), ack=True)]

    def k_responses():
        # answers (some right, most hostile) to the QP's own READ, atomic and SEND
        reqs = r.peer_reqs or [(0x0C, r.sq_psn)]
        opc0, p0 = rng.choice(reqs)
        if rng.random() < 0.3:                  # the right answer
            if opc0 == 0x0C:
                return [pkt(0x10, r.X, p0, aeth(0x1F, 1), rng.randbytes(100))]
            if opc0 in (0x13, 0x14):
                return [pkt(0x12, r.X, p0, aeth(0x1F, 1) + struct.pack("!Q", rng.randrange(2**64)))]
            return [pkt(0x11, r.X, p0, aeth(0x1F, 1))]
        psn = (p0 + rng.choice([0, 0, 0, 1, -1, 2, 5, 200])) & 0xFFFFFF
        syn = rng.choice([0x1F, 0x1F, 0x00, 0x60, 0x61, 0x62, 0x63, 0x64, 0x20 | rng.randrange(32), 0x40 | rng.randrange(32), 0x80, 0xFF])
        c = rng.random()
        if c < 0.45:
            opc = rng.choice([0x10, 0x10, 0x0D, 0x0E, 0x0F])
            hd = aeth(syn, rng.randrange(2**24)) if opc != 0x0E else b""
            return [pkt(opc, r.X, psn, hd, rng.randbytes(rng.choice([0, 8, 99, 100, 100, 101, 200, PMTU])))]
        if c < 0.7:
            return [pkt(0x12, r.X, psn, aeth(syn, rng.randrange(2**24)) + struct.pack("!Q", rng.randrange(2**64)))]
        return [pkt(0x11, r.X, psn, aeth(syn, rng.randrange(2**24)))]

    VALID = [k_write_ok, k_write_imm, k_read, k_atomic, k_send, k_write_bounds]
    KINDS = [(k_write_ok, 6), (k_write_imm, 2), (k_write_bounds, 8), (k_write_len, 4), (k_write_key, 6),
             (k_write_multi, 4), (k_read, 8), (k_atomic, 6), (k_send, 4), (k_send_multi, 3),
             (k_random_opcode, 10), (k_truncated, 4), (k_bad_pad, 3), (k_bad_hdr_bits, 4), (k_bad_icrc, 5),
             (k_psn, 4), (k_dup, 4), (k_wrong_qpn, 3), (k_ud, 3), (k_size, 2), (k_responses, 6), (k_read_dup, 3), (None, 2)]
    # Rounds of a second mode keep to kinds that leave the connection up (every gate's drops,
    # PSN games, duplicates, valid requests), so that long request streams are exercised too.
    QUIET = [(k_write_ok, 6), (k_write_imm, 2), (k_write_multi, 1), (k_read_ok, 6), (k_atomic_ok, 4), (k_dup, 6),
             (k_psn, 4), (k_bad_icrc, 4), (k_wrong_qpn, 3), (k_ud, 3), (k_truncated, 2), (k_bad_hdr_bits, 3),
             (k_size, 1), (k_read_dup, 3), (None, 2)]
    modes = {"hostile": ([k for k, _ in KINDS], [w for _, w in KINDS]), "quiet": ([k for k, _ in QUIET], [w for _, w in QUIET])}

    # ---- QPs
    def make_qp(X, rq_psn, sq_psn, dgid=peer_gid, timeout=14):
        qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                               cap=QPCap(max_send_wr=16, max_recv_wr=32, max_send_sge=1, max_recv_sge=1)))
        at = QPAttr(port_num=1)
        at.qp_access_flags = RWR | RRD | RAT
        at.path_mtu = e.IBV_MTU_1024
        at.dest_qp_num = X
        at.rq_psn = rq_psn
        at.sq_psn = sq_psn
        at.max_dest_rd_atomic = 16
        at.max_rd_atomic = 4
        at.min_rnr_timer = 1
        at.timeout = timeout
        at.retry_cnt = 7
        at.rnr_retry = 7
        at.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=dgid, sgid_index=0, hop_limit=64))
        qp.to_rts(at)
        return qp

    def make_ud():
        qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq,
                               cap=QPCap(max_send_wr=4, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)))
        at = QPAttr(port_num=1)
        at.qkey = 0x11111111
        at.sq_psn = 0
        qp.to_rts(at)
        for s in range(U.size // U.slot):
            qp.post_recv(RecvWR(wr_id=2000 + s, num_sge=1, sg=[SGE(addr(U, s * U.slot), U.sge, U.lkey)]))
        return qp

    def expected(events):
        """The PSN the responder expects, if its last sequence NAK says it: no ACK at or
        past that PSN came after it (nothing executed since)."""
        seq = [(i, p) for i, (name, _, p) in enumerate(events) if name == "rx_nak_seq"]
        if not seq:
            return None
        i, e = seq[-1]
        if any(name == "rx_ack" and (p - e) & 0xFFFFFF < 0x800000 for name, _, p in events[i + 1:]):
            return None
        return e

    def probe(first=False):
        """A valid WRITE ONLY with AckReq into the control slot: True once it is ACKed (and
        its bytes are in MR A). The PSN follows the responder's sequence NAKs (packets the
        gates dropped did not take the PSNs they were given) and duplicates' re-ACKs. False
        once the round's link took a fatal NAK, or on silence (an RNR wait, the QP in ERR)."""
        debug = os.environ.get("ROCE_FUZZ_DEBUG")
        for _ in range(8):
            drain()
            if any(name == "rx_nak" for name, _, _ in r.events):
                r.end = "NAK"
                return False
            exp = expected(r.events)
            if exp is not None:
                r.psn = exp
            psn = nxt()
            fresh = psn not in r.used             # else an ACK may be a duplicate's re-ACK
            tag = struct.pack("!III", r.n, psn, counts["sent"]) + rng.randbytes(CTRL_LEN - 12)
            seen = len(r.events)
            send(pkt(0x0A, r.qpn, psn, reth(A.va + CTRL, A.rkey, CTRL_LEN), tag, ack=True), "control" if first else "probe")
            counts["probes"] += 1
            t0 = time.monotonic()
            while True:
                drain(0.002)
                ev = r.events[seen:]
                waited = time.monotonic() - t0
                if any(name == "rx_ack" and p == psn for name, _, p in ev):
                    landed = bytes(mem[A.off + CTRL:A.off + CTRL + CTRL_LEN]) == tag
                    if not landed and not fresh:
                        break                   # a packet sent before at that PSN may have been ACKed
                    if not landed:
                        fail(f"round {r.n}: an ACKed WRITE ONLY (psn {psn:#x}) is not in MR A")
                        if debug:
                            log("events %s" % [(a, hex(b), hex(c)) for a, b, c in r.events])
                            for h in r.history[-12:]:
                                log("  sent %s" % h[:44].hex())
                    return True
                if any(name == "rx_nak" for name, _, _ in ev):
                    r.end = "NAK"
                    return False
                # a sequence NAK or a duplicate's re-ACK: the probe's ACK would be here by now
                if (ev and waited > 0.002) or waited > (2.0 if first else 0.05):
                    break
            if debug:
                log("probe psn %#x: no ACK after %.1f ms; events %s" % (psn, waited * 1000, [(a, hex(c)) for a, _, c in r.events[-8:]]))
            if not ev:
                break
            exp = expected(ev)
            acks = [p for name, _, p in ev if name == "rx_ack"]
            r.psn = exp if exp is not None and psn not in acks else (max(acks, key=lambda p: (p - psn) & 0xFFFFFF) + 1) & 0xFFFFFF
        st = r.qp.query(e.IBV_QP_STATE)[0].qp_state
        r.end = "QP in ERR" if st == e.IBV_QPS_ERR else "no answer"
        if debug:
            log("END %s psn %#x events %s" % (r.end, r.psn, [(a, hex(c)) for a, _, c in r.events[-10:]]))
            for h in r.history[-10:]:
                log("  sent %s" % h[:44].hex())
        return False

    # ---- the rounds
    old_qpns = []
    n = 0
    while counts["sent"] < args.packets and time.monotonic() < deadline:
        r = Round()
        r.n, r.X = n, X_BASE + n
        r.rq_psn = 0xFFFFF8 if n == 0 else rng.randrange(2**24)     # round 0: the PSN wraps
        r.sq_psn = rng.randrange(2**24)
        r.psn = r.rq_psn
        r.snap = bytes(mem[A.off:A.off + A.size])
        r.a_any, r.a_vals, r.firsts, r.reads, r.atomics = bytearray(A.size), {}, [], {}, {}
        r.history, r.events, r.peer_reqs, r.old_qpns, r.end, r.used = [], [], [], old_qpns, "batches done", set()
        qp = make_qp(r.X, r.rq_psn, r.sq_psn)
        ud = make_ud()
        r.qpn, r.ud_qpn, r.qp = qp.qp_num, ud.qp_num, qp
        for s in range(R.size // R.slot):
            qp.post_recv(RecvWR(wr_id=1000 + s, num_sge=1, sg=[SGE(addr(R, s * R.slot), R.sge, R.lkey)]))
        if not probe(first=True):
            fail(f"round {n}: the control WRITE (valid ICRC, A's rkey, in bounds) got no ACK: {r.end}")
            if n == 0:
                log("FAIL roce_fuzz: the RoCEv2 path (or this test's ICRC) does not work")
                return 1
        else:
            counts["controls"] += 1
        if rng.random() < 0.7:
            # the QP as a requester too: a READ, a FETCH_ADD and a SEND to the peer
            wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_READ, num_sge=1, sg=[SGE(addr(L, 0), L.sge, L.lkey)])
            wr.set_wr_rdma(0x1234, 0x10000)
            qp.post_send(wr)
            wr = SendWR(wr_id=2, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1, sg=[SGE((addr(L, L.slot) + 7) & ~7, 8, L.lkey)])
            wr.set_wr_atomic(0x1234, 0x20000, 1, 0)
            qp.post_send(wr)
            wr = SendWR(wr_id=3, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(addr(L, 2 * L.slot), 64, L.lkey)])
            wr.send_flags = e.IBV_SEND_SIGNALED
            qp.post_send(wr)
            drain(0.005)
        mode = "quiet" if rng.random() < 0.2 else "hostile"
        kind_fns, kind_w = modes[mode]
        ends_mode[mode] = ends_mode.get(mode, 0) + 1
        for _ in range(rng.randrange(2, 24) if mode == "hostile" else rng.randrange(10, 60)):
            if counts["sent"] >= args.packets or time.monotonic() >= deadline:
                r.end = "budget"
                break
            for _ in range(rng.randrange(1, 6)):
                k = rng.choices(kind_fns, kind_w)[0]
                if k is None:                   # a valid WRITE from the wrong source address
                    p = k_write_ok()[0]
                    send(p[:-4] + icrc(WRONG_IP, SV_IP, ROCE_PORT, ROCE_PORT, p[:-4]), "wrong_src", src_ok=False, sock=wrong)
                    continue
                for p in k():
                    send(p, k.__name__[2:])
            drain()
            if not probe():
                break
        drain(0.002)
        poll_cq()
        qp.close()
        ud.close()
        old_qpns.append(r.qpn)
        drain()
        check_memory(f"round {n}")
        ends[r.end] = ends.get(r.end, 0) + 1
        counts["rounds"] += 1
        n += 1
        if failures and not args.keep_going:
            break
    barrage = time.monotonic() - t_start

    # ---- after the barrage: a fresh QP still takes a WRITE and answers a READ over RoCEv2
    live = True
    r = Round()
    r.n, r.X, r.psn, r.sq_psn = n, X_BASE + 0x8000, 0x123456, 0x654321
    r.snap = bytes(mem[A.off:A.off + A.size])
    r.a_any, r.a_vals, r.firsts, r.reads, r.atomics = bytearray(A.size), {}, [], {}, {}
    r.history, r.events, r.peer_reqs, r.old_qpns, r.end, r.ud_qpn, r.used = [], [], [], old_qpns, "", 0, set()
    qp = make_qp(r.X, r.psn, r.sq_psn)
    r.qpn, r.qp = qp.qp_num, qp
    if not probe(first=True):
        live = False
        log(f"FAIL roce_fuzz: after the barrage, a valid WRITE on a fresh QP was not ACKed ({r.end})")
    before = counts["rx_read_resp"]
    send(pkt(0x0C, r.qpn, nxt(3), reth(B.va + 100, B.rkey, 2 * PMTU + 10), ack=True), "final")
    t0 = time.monotonic()
    while counts["rx_read_resp"] - before < 3 and time.monotonic() - t0 < 2:
        drain(0.01)
    if counts["rx_read_resp"] - before != 3:
        live = False
        log(f"FAIL roce_fuzz: after the barrage, a 3-packet READ of MR B got {counts['rx_read_resp'] - before} responses")
    qp.close()
    check_memory("final")

    # ---- and a loopback RC pair in the same context still completes a SEND
    cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
    q1, q2 = (QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)) for _ in range(2))
    for a, b in ((q1, q2), (q2, q1)):
        at = QPAttr(port_num=1)
        at.qp_access_flags = RWR
        at.path_mtu = e.IBV_MTU_1024
        at.dest_qp_num = b.qp_num
        at.rq_psn = at.sq_psn = 77
        at.max_dest_rd_atomic = at.max_rd_atomic = 1
        at.min_rnr_timer, at.timeout, at.retry_cnt, at.rnr_retry = 1, 14, 7, 7
        at.ah_attr = AHAttr(port_num=1, is_global=1, gr=GlobalRoute(dgid=gid0, sgid_index=0, hop_limit=64))
        a.to_rts(at)
    poll_cq()
    msg = b"loopback SEND after the barrage!"
    mem[L.off + 2 * L.slot:L.off + 2 * L.slot + len(msg)] = msg
    q2.post_recv(RecvWR(wr_id=77, num_sge=1, sg=[SGE(addr(R, 0), R.sge, R.lkey)]))
    wr = SendWR(wr_id=78, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(addr(L, 2 * L.slot), len(msg), L.lkey)])
    wr.send_flags = e.IBV_SEND_SIGNALED
    q1.post_send(wr)
    got, t0 = {}, time.monotonic()
    while len(got) < 2 and time.monotonic() - t0 < 5:
        k, wl = cq.poll(num_entries=8)
        got.update((w.wr_id, w.status) for w in wl[:k])
        if not k:
            time.sleep(0.001)
    if got != {77: 0, 78: 0} or bytes(mem[R.off:R.off + len(msg)]) != msg:
        live = False
        log(f"FAIL roce_fuzz: a loopback SEND after the barrage did not complete: {got}")
    q1.close()
    q2.close()
    drain()

    dt = time.monotonic() - t_start
    log("roce_fuzz: %d packets (%d besides controls and probes) in %d rounds, %.1f s barrage, %.1f s in all (seed %d)"
        % (counts["sent"], counts["sent"] - counts["probes"], counts["rounds"], barrage, dt, seed))
    log(f"  random_opcode covered {len(opcodes_seen)} of the 256 opcodes")
    log("  sent, by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(stats.items(), key=lambda kv: -kv[1])))
    log("  softverbs sent %d: %d ACK, %d NAK (%d sequence), %d RNR NAK, %d READ responses, %d atomic ACKs, %d requests of its QPs"
        % (counts["rx"], counts["rx_ack"], counts["rx_nak"] + counts["rx_nak_seq"], counts["rx_nak_seq"], counts["rx_rnr"],
           counts["rx_read_resp"], counts["rx_atomic_ack"], counts["rx_requests"]))
    log("  rounds: " + ", ".join(f"{k} {v}" for k, v in sorted(ends_mode.items())) + "; ended by: " + ", ".join(f"{k} {v}" for k, v in sorted(ends.items(), key=lambda kv: -kv[1]))
        + f"; controls ACKed {counts['controls']}/{counts['rounds']}; MR A bytes changed {counts['a_changed']}")
    log("  completions: " + ", ".join(f"{k} {v}" for k, v in sorted(wcs.items(), key=lambda kv: -kv[1])))
    if failures or not live:
        log(f"FAIL roce_fuzz: {len(failures)} violation(s)" + ("" if live else "; softverbs no longer works after the barrage"))
        return 1
    log("PASS roce_fuzz: no crash, no byte outside an MR with the right access touched, no READ data from outside one")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--seconds", type=float, default=20.0, help="time bound of the barrage")
    ap.add_argument("--packets", type=int, default=20000)
    ap.add_argument("--keep-going", action="store_true", help="go on after a violation")
    args = ap.parse_args()
    if os.environ.get("ROCE_FUZZ_INNER") == "1":
        sys.exit(inner(args))
    sys.exit(outer(args))


if __name__ == "__main__":
    main()
