//! A context's RoCEv2 endpoint: one UDP socket on port 4791 of each of its IPv4 addresses,
//! a timer for retransmissions, and the QPs' RoCE links by local QPN.
//!
//! Sockets are unconnected, bound to the exact address, with `IP_PMTUDISC_DO`: the kernel
//! then sends every datagram with DF set and IPv4 ID 0, the only header a sender can put in
//! its ICRC (rxe drops packets whose ICRC does not match, silently). A port already taken
//! (another soft-fabric process, or the kernel's rdma_rxe, which binds `*:4791`) leaves that
//! address without RoCE; the trace says so.
//!
//! Received packets are checked before anything else: UDP destination 4791, decodable
//! headers, an ICRC that some IPv4 ID satisfies (the receiver never sees the ID),
//! P_Key 0xFFFF; then sorted by destination QP. RC/UC packets must come from the address
//! the QP is connected to.

use super::icrc::solve_id_v4;
use super::link::{Deliver, RoceLink};
use super::packet::{self, Headers, ROCE_PORT};
use crate::core::context::Context;
use crate::core::registry::lock;
use crate::net::frame::{Header, Op, F_IMM, F_SOLICITED};
use crate::net::Link;
use crate::qp::{requester, responder, ud, Qp, QpState};
use crate::sys::{cerr, owned};
use common::inthash::IntMap;
use rdma_abi::verbs::*;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The timer's period while a link has packets awaiting acknowledgement or an RNR wait.
const TICK_NS: i64 = 1_000_000;

pub struct Endpoint {
    pub socks: Vec<(Ipv4Addr, OwnedFd)>,
    /// The contexts sharing this endpoint (see `open`).
    ctxs: Mutex<Vec<std::sync::Weak<Context>>>,
    pub timer: OwnedFd,
    links: Mutex<IntMap<u32, Arc<RoceLink>>>,
    rx: Mutex<Vec<u8>>,
    ticking: AtomicBool,
    pub dropped: AtomicU64,
    /// MADs for QP1 (the CM's), until the CM reads them; `mad_ev` is readable meanwhile.
    mads: Mutex<std::collections::VecDeque<Mad>>,
    pub mad_ev: OwnedFd,
    mad_psn: std::sync::atomic::AtomicU32,
}

/// A MAD received on QP1: from, to, the 256 bytes.
pub type Mad = (Ipv4Addr, Ipv4Addr, [u8; MAD_LEN]);

pub const MAD_LEN: usize = 256;
/// MADs kept for the CM before the oldest are dropped (the CM retransmits).
const MADS_MAX: usize = 1024;

fn setopt(fd: i32, level: i32, name: i32, val: i32) -> bool {
    // SAFETY: passes a live int of the right size.
    unsafe { libc::setsockopt(fd, level, name, (&val as *const i32).cast(), 4) == 0 }
}

fn bind_roce(ip: Ipv4Addr) -> Option<OwnedFd> {
    // SAFETY: plain socket syscall; checked by `owned`.
    let fd = owned(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) }).ok()?;
    if !setopt(fd.as_raw_fd(), libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO) {
        return None;
    }
    setopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 4 << 20);
    setopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20);
    let (ss, len) = crate::net::addr::to_storage(&SocketAddr::from((ip, ROCE_PORT)), false)?;
    // SAFETY: ss holds a valid sockaddr of len bytes.
    cerr(unsafe { libc::bind(fd.as_raw_fd(), &ss as *const _ as *const libc::sockaddr, len) }).ok()?;
    Some(fd)
}

/// The largest IB MTU (bytes) whose packets fit the route to `dst` (rxe's rule: at most
/// the interface MTU less 80 bytes of headers), or None if the route is unknown.
pub fn route_mtu(dst: Ipv4Addr) -> Option<usize> {
    // SAFETY: plain socket syscall; checked by `owned`.
    let fd = owned(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) }).ok()?;
    let (ss, len) = crate::net::addr::to_storage(&SocketAddr::from((dst, ROCE_PORT)), false)?;
    // SAFETY: ss holds a valid sockaddr of len bytes; connecting a UDP socket sends nothing.
    cerr(unsafe { libc::connect(fd.as_raw_fd(), &ss as *const _ as *const libc::sockaddr, len) }).ok()?;
    let mut mtu: i32 = 0;
    let mut ml = 4 as libc::socklen_t;
    // SAFETY: mtu is a live int of ml bytes.
    cerr(unsafe { libc::getsockopt(fd.as_raw_fd(), libc::IPPROTO_IP, libc::IP_MTU, (&mut mtu as *mut i32).cast(), &mut ml) }).ok()?;
    [4096, 2048, 1024, 512, 256].into_iter().find(|&m| m + 80 <= mtu as usize)
}

/// The wire a QP uses to reach its peer.
pub enum Wire {
    /// The stream protocol, to this soft-fabric endpoint.
    Stream(SocketAddr),
    /// RoCEv2, from our address to the peer's.
    Roce(Ipv4Addr, Ipv4Addr),
}

/// `SOFTVERBS_WIRE`: `stream` (never RoCEv2), `roce` (always, for IPv4 peers), else auto.
pub fn forced() -> Option<bool> {
    static W: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    *W.get_or_init(|| match std::env::var("SOFTVERBS_WIRE").ok().as_deref().map(str::trim) {
        Some("stream") => Some(false),
        Some("roce") => Some(true),
        _ => None,
    })
}

/// Chooses the wire to `(dgid, qpn)`: a soft-fabric endpoint the CM told us about, or one
/// of this host's registry (for an address of this host), keeps the stream protocol;
/// otherwise an IPv4 peer on another host is reached over RoCEv2 from the address of
/// `sgid`. `SOFTVERBS_WIRE` forces either.
pub fn choose(ctx: &Context, table: Option<SocketAddr>, sgid: &[u8; 16], dgid: &[u8; 16], qpn: u32, is_global: bool) -> Option<Wire> {
    let stream = || crate::net::peers::resolve(table, dgid, qpn, is_global).map(Wire::Stream);
    let roce = || {
        let src = super::v4_of_gid(sgid)?;
        let dst = super::v4_of_gid(dgid)?;
        let ep = ctx.net()?.roce()?;
        ep.has(src).then_some(Wire::Roce(src, dst))
    };
    match forced() {
        Some(false) => stream(),
        Some(true) => roce().or_else(stream),
        None => {
            if table.is_some() || !is_global {
                return stream();
            }
            let local = crate::net::local::is_local(crate::core::device::gid_to_ip(dgid));
            if local {
                stream()
            } else {
                roce().or_else(stream)
            }
        }
    }
}

/// The network namespace of the calling thread (endpoints are per namespace).
fn netns() -> String {
    std::fs::read_link("/proc/thread-self/ns/net").map(|p| p.to_string_lossy().into_owned()).unwrap_or_default()
}

impl Endpoint {
    /// The endpoint of this process in the caller's network namespace: a port binds once,
    /// so every context of the process shares one (programs open several: perftest its
    /// own beside librdmacm's). Made by the first context, which binds 4791 on each of
    /// its IPv4 addresses that is free; gone with the last.
    pub fn open(ctx: &Arc<Context>) -> Option<Arc<Endpoint>> {
        if forced() == Some(false) {
            return None;
        }
        static SHARED: Mutex<Vec<(String, std::sync::Weak<Endpoint>)>> = Mutex::new(Vec::new());
        let ns = netns();
        let mut shared = lock(&SHARED);
        shared.retain(|(_, w)| w.strong_count() > 0);
        if let Some(ep) = shared.iter().find(|(n, _)| *n == ns).and_then(|(_, w)| w.upgrade()) {
            let mut c = lock(&ep.ctxs);
            c.retain(|w| w.strong_count() > 0);
            c.push(Arc::downgrade(ctx));
            drop(c);
            return Some(ep);
        }
        let ep = Self::bind_all(ctx)?;
        shared.push((ns, Arc::downgrade(&ep)));
        Some(ep)
    }

    fn bind_all(ctx: &Arc<Context>) -> Option<Arc<Endpoint>> {
        let mut socks = Vec::new();
        for g in &ctx.gids {
            let Some(ip) = super::v4_of_gid(&g.gid) else { continue };
            if socks.iter().any(|(a, _)| *a == ip) {
                continue;
            }
            match bind_roce(ip) {
                Some(fd) => socks.push((ip, fd)),
                None => crate::trace::note(&format!("RoCEv2: {ip}:{ROCE_PORT} not bound ({}): no RoCEv2 from that address", std::io::Error::last_os_error())),
            }
        }
        if socks.is_empty() {
            return None;
        }
        // SAFETY: plain syscall; checked by `owned`.
        let timer = owned(unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) }).ok()?;
        // SAFETY: as above.
        let mad_ev = owned(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) }).ok()?;
        Some(Arc::new(Endpoint {
            socks,
            ctxs: Mutex::new(vec![Arc::downgrade(ctx)]),
            timer,
            links: Mutex::new(IntMap::default()),
            rx: Mutex::new(vec![0u8; 65536]),
            ticking: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            mads: Mutex::new(std::collections::VecDeque::new()),
            mad_ev,
            mad_psn: std::sync::atomic::AtomicU32::new(0),
        }))
    }

    pub fn has(&self, ip: Ipv4Addr) -> bool {
        self.socks.iter().any(|(a, _)| *a == ip)
    }

    /// Sends one UDP payload (headers .. ICRC) from `src`'s socket to `dst:4791`.
    pub fn send_to(&self, src: Ipv4Addr, dst: Ipv4Addr, bytes: &[u8]) {
        let Some((_, fd)) = self.socks.iter().find(|(a, _)| *a == src) else { return };
        let Some((ss, len)) = crate::net::addr::to_storage(&SocketAddr::from((dst, ROCE_PORT)), false) else { return };
        // SAFETY: bytes is a live slice; ss holds a valid sockaddr of len bytes.
        unsafe { libc::sendto(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL, &ss as *const _ as *const libc::sockaddr, len) };
    }

    /// Starts the timer (if it is not running); `now`: fire at once (UC completions).
    pub fn want_tick(&self, now: bool) {
        if self.ticking.swap(true, Ordering::SeqCst) && !now {
            return;
        }
        let first = if now { 1 } else { TICK_NS };
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: TICK_NS },
            it_value: libc::timespec { tv_sec: 0, tv_nsec: first },
        };
        // SAFETY: spec is a live itimerspec; our own timerfd.
        unsafe { libc::timerfd_settime(self.timer.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
    }

    fn stop_tick(&self) {
        self.ticking.store(false, Ordering::SeqCst);
        // SAFETY: an all-zero itimerspec disarms our own timerfd.
        let spec: libc::itimerspec = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        unsafe { libc::timerfd_settime(self.timer.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
    }

    /// The RoCE link of `qp` to its peer (the QP is RTR or later; `st` is its locked state).
    pub fn link(self: &Arc<Self>, qp: &Qp, st: &QpState, src: Ipv4Addr, dst: Ipv4Addr) -> Arc<RoceLink> {
        let rqpn = st.attr.dest_qp_num & 0x00ff_ffff;
        let mut links = lock(&self.links);
        if let Some(l) = links.get(&qp.qpn) {
            if !l.is_dead() && l.rqpn == rqpn && l.dst == dst && l.src == src && l.qp.ptr_eq(&qp.me) {
                return l.clone();
            }
        }
        let l = Arc::new(RoceLink::new(self, qp, st, src, dst));
        links.insert(qp.qpn, l.clone());
        l
    }

    /// The timer fired.
    pub fn on_timer(&self) {
        let mut v = 0u64;
        // SAFETY: reads the 8-byte expiry count from our nonblocking timerfd.
        unsafe { libc::read(self.timer.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        let links: Vec<Arc<RoceLink>> = lock(&self.links).values().cloned().collect();
        let now = Instant::now();
        let mut busy = false;
        let mut gone = Vec::new();
        for l in links {
            if l.qp.strong_count() == 0 || l.is_dead() {
                gone.push(l.lqpn);
                continue;
            }
            let (d, b) = l.on_tick(now);
            busy |= b;
            self.deliver(&l, d);
        }
        if !gone.is_empty() {
            let mut links = lock(&self.links);
            for q in gone {
                if links.get(&q).is_some_and(|l| l.qp.strong_count() == 0 || l.is_dead()) {
                    links.remove(&q);
                }
            }
        }
        if !busy {
            self.stop_tick();
            // A link may have asked between the scan and now.
            let again = lock(&self.links).values().any(|l| l.on_tick(Instant::now()).1);
            if again {
                self.want_tick(false);
            }
        }
    }

    fn deliver(&self, l: &Arc<RoceLink>, d: Vec<Deliver>) {
        if d.is_empty() {
            return;
        }
        let Some(qp) = l.qp.upgrade() else { return };
        let me: Arc<dyn Link> = l.clone();
        for x in d {
            match x {
                Deliver::Request(h, p) => responder::on_request(&qp, &me, &h, &p),
                Deliver::Response(h, p) => requester::on_response(&qp, &me, &h, &p),
                Deliver::Drained => requester::on_drained(&qp, &me),
            }
        }
    }

    /// The QP numbered `qpn` in any context sharing the endpoint.
    fn find_qp(&self, qpn: u32) -> Option<Arc<Qp>> {
        let ctxs: Vec<Arc<Context>> = lock(&self.ctxs).iter().filter_map(|w| w.upgrade()).collect();
        ctxs.iter().find_map(|c| c.find_qp(qpn))
    }

    /// Receives what waits on socket `i` (for whichever context the packets are). `wait`:
    /// the progress thread (may wait for the receive lock); a polling thread skips it
    /// when busy.
    pub fn on_readable(self: &Arc<Self>, i: usize, wait: bool) -> bool {
        let Some((ip, fd)) = self.socks.get(i) else { return false };
        let g = if wait { Some(lock(&self.rx)) } else { crate::core::registry::try_lock(&self.rx) };
        let Some(mut buf) = g else { return false };
        let mut any = false;
        for _ in 0..256 {
            // SAFETY: sockaddr_in is plain data.
            let mut from: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            let mut flen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            // SAFETY: buf and from are live and sized as passed.
            let n = unsafe { libc::recvfrom(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT, &mut from as *mut _ as *mut libc::sockaddr, &mut flen) };
            if n < 0 {
                break;
            }
            any = true;
            let src = Ipv4Addr::from(u32::from_be(from.sin_addr.s_addr));
            let sport = u16::from_be(from.sin_port);
            self.on_datagram(*ip, src, sport, &buf[..n as usize]);
        }
        any
    }

    fn on_datagram(self: &Arc<Self>, me: Ipv4Addr, src: Ipv4Addr, sport: u16, data: &[u8]) {
        let ok = packet::decode(data).ok().filter(|(h, _)| h.bth.pkey & 0x7fff == 0x7fff);
        let Some((h, payload)) = ok else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if solve_id_v4(src, me, sport, ROCE_PORT, data).is_none() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let opc = h.bth.opcode;
        if opc >> 5 == 3 {
            return self.on_ud(me, src, &h, payload);
        }
        let Some(qp) = self.find_qp(h.bth.dqpn) else { return };
        let Some(l) = self.link_for_packet(&qp, src, me) else { return };
        let d = l.on_packet(&h, payload);
        self.deliver(&l, d);
    }

    /// The link a packet from `src` to `qp` belongs to; made on the first one (the QP must
    /// be RTR or later and connected to `src`).
    fn link_for_packet(self: &Arc<Self>, qp: &Arc<Qp>, src: Ipv4Addr, me: Ipv4Addr) -> Option<Arc<RoceLink>> {
        if let Some(l) = lock(&self.links).get(&qp.qpn) {
            if !l.is_dead() && l.qp.ptr_eq(&qp.me) {
                return (l.dst == src).then(|| l.clone());
            }
        }
        let mut st = lock(&qp.st);
        if !matches!(st.state, IBV_QPS_RTR | IBV_QPS_RTS | IBV_QPS_SQD) || qp.kind == crate::qp::state::Kind::Ud {
            return None;
        }
        // SAFETY: reading the raw bytes of a plain-data union.
        let dgid = unsafe { st.attr.ah_attr.grh.dgid.raw };
        if super::v4_of_gid(&dgid) != Some(src) {
            return None;
        }
        let l = self.link(qp, &st, me, src);
        let w: Arc<dyn Link> = l.clone();
        st.in_links.retain(|w| w.strong_count() > 0);
        st.in_links.push(Arc::downgrade(&w));
        Some(l)
    }

    fn on_ud(&self, me: Ipv4Addr, src: Ipv4Addr, h: &Headers, payload: &[u8]) {
        let Some(d) = h.deth else { return };
        if h.bth.dqpn == 1 {
            // QP1: the CM's. rxe takes only 256-byte MADs with the GSI Q_Key.
            if d.qkey == packet::GSI_QKEY && payload.len() == MAD_LEN {
                let mut m = [0u8; MAD_LEN];
                m.copy_from_slice(payload);
                let mut q = lock(&self.mads);
                if q.len() >= MADS_MAX {
                    q.pop_front();
                }
                q.push_back((src, me, m));
                let one = 1u64;
                // SAFETY: writes 8 bytes from a live u64 to our eventfd.
                unsafe { libc::write(self.mad_ev.as_raw_fd(), (&one as *const u64).cast(), 8) };
            }
            return;
        }
        let mut f = Header::new(Op::UdSend);
        f.dst_qpn = h.bth.dqpn;
        f.src_qpn = d.src_qp;
        f.qkey = d.qkey;
        f.sgid = super::gid_of_v4(src);
        f.dgid = super::gid_of_v4(me);
        if let Some(imm) = h.imm {
            f.flags |= F_IMM;
            f.imm = imm;
        }
        if h.bth.se {
            f.flags |= F_SOLICITED;
        }
        f.payload_len = payload.len() as u32;
        if let Some(qp) = self.find_qp(f.dst_qpn) {
            ud::on_datagram(&qp.ctx, &f, payload, None);
        }
    }

    /// The oldest MAD waiting for the CM.
    pub fn mad_recv(&self) -> Option<Mad> {
        let mut q = lock(&self.mads);
        let m = q.pop_front();
        if q.is_empty() {
            let mut v = 0u64;
            // SAFETY: reads the 8-byte counter of our nonblocking eventfd (resets it).
            unsafe { libc::read(self.mad_ev.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        }
        m
    }

    /// Sends a MAD from QP1 at `src` to QP1 at `dst`, as rxe's GSI QP does.
    pub fn mad_send(&self, src: Ipv4Addr, dst: Ipv4Addr, mad: &[u8; MAD_LEN]) {
        let mut h = Header::new(Op::UdSend);
        h.dst_qpn = 1;
        h.src_qpn = 1;
        h.qkey = packet::GSI_QKEY;
        let psn = self.mad_psn.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff;
        self.send_ud(src, dst, &h, psn, mad);
    }

    /// Sends a UD datagram over RoCEv2.
    pub fn send_ud(&self, src: Ipv4Addr, dst: Ipv4Addr, h: &Header, psn: u32, payload: &[u8]) {
        let imm = h.flags & F_IMM != 0;
        let bth = packet::Bth {
            opcode: if imm { packet::op::UD_SEND_ONLY_IMM } else { packet::op::UD_SEND_ONLY },
            se: h.flags & F_SOLICITED != 0,
            pkey: 0xffff,
            dqpn: h.dst_qpn,
            psn,
            ..packet::Bth::default()
        };
        let hd = Headers { bth, deth: Some(packet::Deth { qkey: h.qkey, src_qp: h.src_qpn }), imm: imm.then_some(h.imm), ..Headers::default() };
        let mut out = Vec::with_capacity(payload.len() + 40);
        packet::encode_headers(&hd, payload.len(), &mut out);
        out.extend_from_slice(payload);
        out.resize(out.len() + packet::pad_len(payload.len()), 0);
        let ip = super::icrc::Ipv4Udp { src, dst, id: 0, df: true, sport: ROCE_PORT, dport: ROCE_PORT };
        let crc = super::icrc::icrc_v4(&ip, &[&out]);
        out.extend_from_slice(&crc.to_le_bytes());
        self.send_to(src, dst, &out);
    }
}
