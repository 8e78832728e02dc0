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

/// Datagrams received per `recvmmsg`, and the room for each (a 4096-byte MTU packet and
/// its headers; anything longer is no RoCEv2 packet of ours and is dropped).
const RX_BATCH: usize = 32;
const RX_SLOT: usize = 4352;

/// The timer's period while a link has packets awaiting acknowledgement or an RNR wait.
const TICK_NS: i64 = 1_000_000;

/// How long the owner of 4791 trusts what it looked up of another process's QPN.
const QPN_CACHE: std::time::Duration = std::time::Duration::from_secs(1);

pub struct Endpoint {
    pub socks: Vec<(Ipv4Addr, OwnedFd)>,
    /// Per socket: its UDP port (4791 where we own the address, else our own port there,
    /// which the ICRC covers), and whether we own 4791 there (`share`).
    sports: Vec<std::sync::atomic::AtomicU16>,
    owning: Vec<AtomicBool>,
    /// Our registry claims on the addresses we own.
    claims: Mutex<Vec<crate::net::peers::RegFile>>,
    /// Sends forward frames to the user's other processes.
    fwd: OwnedFd,
    /// The engines' epoll sets watching our sockets (with their first token), so that a
    /// socket replaced when we take 4791 over is watched again.
    epolls: Mutex<Vec<(Arc<OwnedFd>, u64)>>,
    /// When we last tried to take 4791 over on an address we do not own.
    last_try: Mutex<Option<Instant>>,
    /// The context port whose owner claim we write.
    port: u16,
    /// The port's active MTU (an `ibv_mtu`): the largest IB MTU whose packets fit every
    /// interface the endpoint is on (rxe's rule: the netdev MTU less 80 bytes), so that
    /// programs sizing UD messages or path MTUs from the port agree with a RoCE peer.
    pub mtu: u32,
    /// The contexts sharing this endpoint (see `open`).
    ctxs: Mutex<Vec<std::sync::Weak<Context>>>,
    pub timer: OwnedFd,
    links: Mutex<IntMap<u32, Arc<RoceLink>>>,
    /// Where the owner of 4791 hands another process's QPN on (`peers::roce_qpn_port`, a
    /// file and a liveness check per lookup: too slow for every packet), with when it was
    /// looked up. A QPN that moved meanwhile loses packets for at most `QPN_CACHE`, which
    /// retransmission repairs; its new owner's process drops nothing it does not hold.
    qpn_ports: Mutex<IntMap<u32, (u16, Instant)>>,
    rx: Mutex<Vec<u8>>,
    ticking: AtomicBool,
    pub dropped: AtomicU64,
    /// Progress passes of application threads polling any context that shares the
    /// endpoint: each context's engine watches the endpoint's sockets, and while some
    /// thread polls them all engines leave them alone (`Engine::park_while_polled`).
    pub polls: AtomicU64,
    /// MADs for QP1 (the CM's), until the CM reads them; `mad_ev` is readable meanwhile.
    mads: Mutex<std::collections::VecDeque<Mad>>,
    pub mad_ev: OwnedFd,
    mad_psn: std::sync::atomic::AtomicU32,
    /// Multicast groups joined by QPs of the process (`mcast`).
    pub mcast: super::mcast::Groups,
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
    bind_udp(ip, ROCE_PORT)
}

/// An unconnected, nonblocking UDP socket bound to `ip:port` with `IP_PMTUDISC_DO`.
fn bind_udp(ip: Ipv4Addr, port: u16) -> Option<OwnedFd> {
    // SAFETY: plain socket syscall; checked by `owned`.
    let fd = owned(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) }).ok()?;
    if !setopt(fd.as_raw_fd(), libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO) {
        return None;
    }
    setopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 4 << 20);
    setopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20);
    let (ss, len) = crate::net::addr::to_storage(&SocketAddr::from((ip, port)), false)?;
    // SAFETY: ss holds a valid sockaddr of len bytes.
    cerr(unsafe { libc::bind(fd.as_raw_fd(), &ss as *const _ as *const libc::sockaddr, len) }).ok()?;
    Some(fd)
}

/// Whether another soft-fabric process of ours owns UDP 4791 on `ip`. It binds the port
/// before it writes its registry claim, so a process that starts at the same moment
/// (two servers launched together) waits a little for the claim before it concludes that
/// someone else (rdma_rxe) holds the port.
fn owner_of(ip: Ipv4Addr) -> bool {
    for _ in 0..25 {
        if crate::net::peers::roce_owner(ip).is_some() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(8));
    }
    false
}

/// The port a socket is bound to.
fn bound_port(fd: &OwnedFd) -> u16 {
    crate::net::addr::local_addr(fd.as_raw_fd()).map_or(0, |a| a.port())
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

/// Fault injection for the tests of loss recovery (the host's kernel may lack netem):
/// `SOFTVERBS_ROCE_DROP=N` drops about one received RoCEv2 packet in N, at random.
fn test_drop() -> bool {
    static N: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let n = *N.get_or_init(|| std::env::var("SOFTVERBS_ROCE_DROP").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0));
    if n == 0 {
        return false;
    }
    static X: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0x9e37_79b9);
    let mut x = X.load(Ordering::Relaxed);
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    X.store(x, Ordering::Relaxed);
    x.is_multiple_of(n)
}

/// The MTU of interface `ifindex`.
fn netdev_mtu(ifindex: u32) -> Option<usize> {
    let mut name = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: name has IF_NAMESIZE bytes, as if_indextoname requires.
    if unsafe { libc::if_indextoname(ifindex, name.as_mut_ptr()) }.is_null() {
        return None;
    }
    // SAFETY: if_indextoname wrote a NUL-terminated name.
    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
    std::fs::read_to_string(format!("/sys/class/net/{name}/mtu")).ok()?.trim().parse().ok()
}

/// The largest IB MTU (`ibv_mtu`) whose RoCEv2 packets fit a link of `mtu` bytes.
fn ib_mtu(mtu: usize) -> u32 {
    match mtu.saturating_sub(80) {
        m if m >= 4096 => IBV_MTU_4096,
        m if m >= 2048 => IBV_MTU_2048,
        m if m >= 1024 => IBV_MTU_1024,
        m if m >= 512 => IBV_MTU_512,
        _ => IBV_MTU_256,
    }
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
        let ep = ctx.net().and_then(|n| n.roce()).filter(|ep| ep.has(src));
        if ep.is_none() {
            unbound_warning(src, dst);
        }
        ep.map(|_| Wire::Roce(src, dst))
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

/// Addresses whose UDP 4791 could not be bound, and why (errno).
static UNBOUND: Mutex<Vec<(Ipv4Addr, i32)>> = Mutex::new(Vec::new());

/// A QP needs RoCEv2 from `src` (its peer has no soft-fabric endpoint) and there is no
/// endpoint there: say why once per address, on standard error as rdma-core's providers
/// do, since the QP's completions (RETRY_EXC_ERR) cannot.
fn unbound_warning(src: Ipv4Addr, dst: Ipv4Addr) {
    static SAID: Mutex<Vec<Ipv4Addr>> = Mutex::new(Vec::new());
    let mut said = lock(&SAID);
    if said.contains(&src) {
        return;
    }
    said.push(src);
    let why = match lock(&UNBOUND).iter().find(|(a, _)| *a == src).map(|(_, e)| *e) {
        Some(libc::EADDRINUSE) => format!("UDP port {ROCE_PORT} on {src} is taken (by another soft-fabric process, or by the kernel's rdma_rxe module, which binds it on every address)"),
        Some(e) => format!("UDP port {ROCE_PORT} on {src} could not be bound: {}", std::io::Error::from_raw_os_error(e)),
        None => format!("{src} is not an IPv4 address of this context"),
    };
    eprintln!("libibverbs (softverbs): no RoCEv2 from {src}: {why}; {dst} is tried over the soft-fabric stream protocol, which a RoCE peer does not speak");
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
    pub fn open(ctx: &Arc<Context>, port: u16) -> Option<Arc<Endpoint>> {
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
        let ep = Self::bind_all(ctx, port)?;
        ep.stop_tick();
        shared.push((ns, Arc::downgrade(&ep)));
        Some(ep)
    }

    fn bind_all(ctx: &Arc<Context>, port: u16) -> Option<Arc<Endpoint>> {
        let mut socks = Vec::new();
        let mut claims = Vec::new();
        let mut owning = Vec::new();
        for g in &ctx.gids {
            let Some(ip) = super::v4_of_gid(&g.gid) else { continue };
            if socks.iter().any(|(a, _)| *a == ip) {
                continue;
            }
            match bind_roce(ip) {
                Some(fd) => {
                    claims.extend(crate::net::peers::roce_claim_owner(ip, port));
                    socks.push((ip, fd));
                    owning.push(true);
                }
                None => {
                    let e = std::io::Error::last_os_error();
                    // Another soft-fabric process of ours owns it: it hands us our packets.
                    if owner_of(ip) {
                        if let Some(fd) = bind_udp(ip, 0) {
                            socks.push((ip, fd));
                            owning.push(false);
                            continue;
                        }
                    }
                    crate::trace::note(&format!("RoCEv2: {ip}:{ROCE_PORT} not bound ({e}): no RoCEv2 from that address"));
                    lock(&UNBOUND).push((ip, e.raw_os_error().unwrap_or(0)));
                }
            }
        }
        if socks.is_empty() {
            return None;
        }
        // SAFETY: plain syscall; checked by `owned`.
        let timer = owned(unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) }).ok()?;
        // SAFETY: as above.
        let mad_ev = owned(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) }).ok()?;
        let mcast = super::mcast::Groups::new(&socks)?;
        // SAFETY: plain socket syscall; checked by `owned`.
        let fwd = owned(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) }).ok()?;
        // A message's packets are handed on in a burst: room for it, as on the sockets.
        setopt(fwd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20);
        let sports = socks.iter().map(|(_, fd)| std::sync::atomic::AtomicU16::new(bound_port(fd))).collect();
        let mtu = ctx.gids.iter().filter(|g| super::v4_of_gid(&g.gid).is_some_and(|ip| !ip.is_loopback() && socks.iter().any(|(a, _)| *a == ip))).filter_map(|g| netdev_mtu(g.ifindex)).min().map_or(IBV_MTU_4096, ib_mtu);
        Some(Arc::new(Endpoint {
            socks,
            sports,
            owning: owning.into_iter().map(AtomicBool::new).collect(),
            claims: Mutex::new(claims),
            fwd,
            epolls: Mutex::new(Vec::new()),
            last_try: Mutex::new(None),
            port,
            mtu,
            ctxs: Mutex::new(vec![Arc::downgrade(ctx)]),
            timer,
            links: Mutex::new(IntMap::default()),
            qpn_ports: Mutex::new(IntMap::default()),
            rx: Mutex::new(vec![0u8; RX_BATCH * RX_SLOT]),
            ticking: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            polls: AtomicU64::new(0),
            mads: Mutex::new(std::collections::VecDeque::new()),
            mad_ev,
            mad_psn: std::sync::atomic::AtomicU32::new(0),
            mcast,
        }))
    }

    pub fn has(&self, ip: Ipv4Addr) -> bool {
        self.socks.iter().any(|(a, _)| *a == ip)
    }

    /// Whether this process owns UDP 4791 on `ip` (a packet sent there comes back to us).
    fn owns(&self, ip: Ipv4Addr) -> bool {
        self.socks.iter().position(|(a, _)| *a == ip).is_some_and(|i| self.owning[i].load(Ordering::Relaxed))
    }

    /// The UDP source port of our packets from `ip` (the ICRC covers it).
    pub fn sport(&self, ip: Ipv4Addr) -> u16 {
        self.socks.iter().position(|(a, _)| *a == ip).map_or(ROCE_PORT, |i| self.sports[i].load(Ordering::Relaxed))
    }

    /// An engine watches our sockets in `epfd`, socket i with token `first + i`.
    pub fn attach_epoll(&self, epfd: Arc<OwnedFd>, first: u64) {
        lock(&self.epolls).push((epfd, first));
    }

    /// Takes UDP 4791 over on the addresses another process of ours owned, if it is free
    /// now (that process exited), at most once a second. The socket keeps its descriptor
    /// number (dup2), and is watched again by every engine.
    fn try_own(&self) {
        if self.owning.iter().all(|o| o.load(Ordering::Relaxed)) {
            return;
        }
        {
            let mut last = lock(&self.last_try);
            if last.is_some_and(|t| t.elapsed() < std::time::Duration::from_secs(1)) {
                return;
            }
            *last = Some(Instant::now());
        }
        for (i, (ip, fd)) in self.socks.iter().enumerate() {
            if self.owning[i].load(Ordering::Relaxed) {
                continue;
            }
            let Some(new) = bind_roce(*ip) else { continue };
            // SAFETY: both descriptors are ours; dup2 replaces the old socket atomically.
            if unsafe { libc::dup2(new.as_raw_fd(), fd.as_raw_fd()) } < 0 {
                continue;
            }
            drop(new);
            super::mcast::sender_opts(fd.as_raw_fd(), *ip);
            self.sports[i].store(ROCE_PORT, Ordering::Relaxed);
            self.owning[i].store(true, Ordering::Relaxed);
            lock(&self.claims).extend(crate::net::peers::roce_claim_owner(*ip, self.port));
            for (ep, first) in lock(&self.epolls).iter() {
                let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: first + i as u64 };
                // SAFETY: ev is a live epoll_event; both descriptors are open.
                unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut ev) };
            }
            crate::trace::note(&format!("RoCEv2: took UDP {ROCE_PORT} on {ip} over"));
        }
    }

    /// Whether `port` is the context port of one of our contexts.
    fn is_ours(&self, port: u16) -> bool {
        lock(&self.ctxs).iter().filter_map(|w| w.upgrade()).any(|c| c.port() == port)
    }

    /// At the owner of 4791 on `me`: hands a packet for another process of ours to it.
    /// True if it did.
    fn forwarded(&self, me: Ipv4Addr, src: Ipv4Addr, sport: u16, data: &[u8]) -> bool {
        use super::share::{target, Target};
        let port = match target(data) {
            Target::Qpn(q) if q != 1 && q != packet::MCAST_QPN && self.find_qp(q).is_none() => self.qpn_port(q),
            Target::Service(sid) => crate::net::peers::roce_service_port(sid),
            Target::CommPort(p) if p != 0 => Some(p),
            _ => None,
        };
        let Some(port) = port.filter(|p| !self.is_ours(*p)) else { return false };
        let frame = super::share::encode_fwd(src, me, sport, data);
        let Some((ss, len)) = crate::net::addr::to_storage(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)), false) else { return false };
        // SAFETY: frame is a live buffer; ss holds a valid sockaddr of len bytes.
        unsafe { libc::sendto(self.fwd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), libc::MSG_NOSIGNAL, &ss as *const _ as *const libc::sockaddr, len) };
        true
    }

    fn qpn_port(&self, qpn: u32) -> Option<u16> {
        let now = Instant::now();
        if let Some(&(port, at)) = lock(&self.qpn_ports).get(&qpn) {
            if now.duration_since(at) < QPN_CACHE {
                return Some(port);
            }
        }
        let port = crate::net::peers::roce_qpn_port(qpn);
        let mut cache = lock(&self.qpn_ports);
        match port {
            Some(p) => {
                if cache.len() >= 4096 {
                    cache.retain(|_, (_, at)| now.duration_since(*at) < QPN_CACHE);
                }
                cache.insert(qpn, (p, now));
            }
            None => {
                cache.remove(&qpn);
            }
        }
        port
    }

    /// A forward frame arrived on a context's UDP socket from the owner of 4791 (on this
    /// host: the engine takes it only from a loopback address).
    pub fn on_forward(self: &Arc<Self>, frame: &[u8]) {
        let Some((src, dst, sport, data)) = super::share::decode_fwd(frame) else { return };
        let Some(i) = self.socks.iter().position(|(a, _)| *a == dst) else { return };
        if self.owning[i].load(Ordering::Relaxed) {
            // We took the port over meanwhile: it is ours to route again.
            if self.forwarded(dst, src, sport, data) {
                return;
            }
        }
        self.deliver_packet(dst, src, sport, data);
    }

    /// Sends one UDP payload (headers .. ICRC) from `src`'s socket to `dst:4791`.
    pub fn send_to(&self, src: Ipv4Addr, dst: Ipv4Addr, bytes: &[u8]) {
        self.try_own();
        // To an address whose 4791 we own, for another process of ours: hand it on now.
        // Through the socket it would wait in our own receive queue, and be lost if we
        // exit first (a UD reply, say, right before the program ends).
        if self.owns(dst) && self.forwarded(dst, src, self.sport(src), bytes)
        {
            return;
        }
        let Some((_, fd)) = self.socks.iter().find(|(a, _)| *a == src) else { return };
        let Some((ss, len)) = crate::net::addr::to_storage(&SocketAddr::from((dst, ROCE_PORT)), false) else { return };
        // SAFETY: bytes is a live slice; ss holds a valid sockaddr of len bytes.
        unsafe { libc::sendto(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL, &ss as *const _ as *const libc::sockaddr, len) };
    }

    /// Sends several UDP payloads from `src`'s socket to `dst:4791` with as few syscalls as
    /// `sendmmsg` allows (a message's packets).
    pub fn send_many(&self, src: Ipv4Addr, dst: Ipv4Addr, pkts: &[Vec<u8>]) {
        if self.owns(dst) {
            // To an address whose 4791 we own: each handed on at once (`send_to`).
            return pkts.iter().for_each(|p| self.send_to(src, dst, p));
        }
        self.try_own();
        let Some((_, fd)) = self.socks.iter().find(|(a, _)| *a == src) else { return };
        let Some((mut ss, len)) = crate::net::addr::to_storage(&SocketAddr::from((dst, ROCE_PORT)), false) else { return };
        for chunk in pkts.chunks(64) {
            let mut iov: Vec<libc::iovec> = chunk.iter().map(|p| libc::iovec { iov_base: p.as_ptr() as *mut libc::c_void, iov_len: p.len() }).collect();
            let mut msgs: Vec<libc::mmsghdr> = (0..chunk.len())
                .map(|k| {
                    // SAFETY: mmsghdr is plain data.
                    let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                    m.msg_hdr.msg_iov = &mut iov[k];
                    m.msg_hdr.msg_iovlen = 1;
                    m.msg_hdr.msg_name = (&mut ss as *mut libc::sockaddr_storage).cast();
                    m.msg_hdr.msg_namelen = len;
                    m
                })
                .collect();
            let mut done = 0;
            while done < msgs.len() {
                // SAFETY: msgs[done..] are live headers whose iovecs point into `chunk`'s
                // packets and whose name is ss, all alive for the call.
                let n = unsafe { libc::sendmmsg(fd.as_raw_fd(), msgs[done..].as_mut_ptr(), (msgs.len() - done) as u32, libc::MSG_NOSIGNAL) };
                if n <= 0 {
                    // A full socket buffer or an error: the rest counts as lost (the
                    // requester's retransmission covers it, as for a lost packet).
                    break;
                }
                done += n as usize;
            }
        }
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

    /// Nothing awaits an acknowledgement: the timer stops, or, while another process owns
    /// 4791 on one of our addresses, slows to once a second (`try_own`).
    fn stop_tick(&self) {
        self.ticking.store(false, Ordering::SeqCst);
        // SAFETY: an all-zero itimerspec disarms our own timerfd.
        let mut spec: libc::itimerspec = unsafe { std::mem::zeroed() };
        if !self.owning.iter().all(|o| o.load(Ordering::Relaxed)) {
            spec.it_interval.tv_sec = 1;
            spec.it_value.tv_sec = 1;
        }
        // SAFETY: spec is a live itimerspec; our own timerfd.
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
        self.try_own();
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
            let again = lock(&self.links).values().any(|l| l.busy());
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
        // SAFETY: sockaddr_in is plain data.
        let mut from: [libc::sockaddr_in; RX_BATCH] = unsafe { std::mem::zeroed() };
        for _ in 0..16 {
            let base = buf.as_mut_ptr();
            let mut iov: [libc::iovec; RX_BATCH] = std::array::from_fn(|k| libc::iovec {
                // SAFETY: slot k of the RX_BATCH * RX_SLOT buffer.
                iov_base: unsafe { base.add(k * RX_SLOT) }.cast(),
                iov_len: RX_SLOT,
            });
            // SAFETY: mmsghdr is plain data.
            let mut msgs: [libc::mmsghdr; RX_BATCH] = unsafe { std::mem::zeroed() };
            for (k, m) in msgs.iter_mut().enumerate() {
                m.msg_hdr.msg_iov = &mut iov[k];
                m.msg_hdr.msg_iovlen = 1;
                m.msg_hdr.msg_name = (&mut from[k] as *mut libc::sockaddr_in).cast();
                m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
            }
            // One syscall for up to RX_BATCH datagrams.
            // SAFETY: msgs, iov and from are live arrays of RX_BATCH entries each, pointing
            // into buf, which holds RX_BATCH slots of RX_SLOT bytes.
            let n = unsafe { libc::recvmmsg(fd.as_raw_fd(), msgs.as_mut_ptr(), RX_BATCH as u32, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
            if n <= 0 {
                break;
            }
            any = true;
            for k in 0..n as usize {
                let len = msgs[k].msg_len as usize;
                if msgs[k].msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let src = Ipv4Addr::from(u32::from_be(from[k].sin_addr.s_addr));
                let sport = u16::from_be(from[k].sin_port);
                self.on_datagram(*ip, src, sport, &buf[k * RX_SLOT..k * RX_SLOT + len]);
            }
            if (n as usize) < RX_BATCH {
                break;
            }
        }
        any
    }

    fn on_datagram(self: &Arc<Self>, me: Ipv4Addr, src: Ipv4Addr, sport: u16, data: &[u8]) {
        if test_drop() {
            return;
        }
        if self.forwarded(me, src, sport, data) {
            return;
        }
        self.deliver_packet(me, src, sport, data);
    }

    /// A packet for a QP of this process (or for its CM).
    fn deliver_packet(self: &Arc<Self>, me: Ipv4Addr, src: Ipv4Addr, sport: u16, data: &[u8]) {
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
        let f = super::ud_frame(h, d, src, me, payload.len());
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
        let hd = Headers { bth, deth: Some(packet::Deth { qkey: h.qkey, src_qp: h.src_qpn }), imm: imm.then_some(super::imm_to_wire(h.imm)), ..Headers::default() };
        let mut out = Vec::with_capacity(payload.len() + 40);
        packet::encode_headers(&hd, payload.len(), &mut out);
        out.extend_from_slice(payload);
        out.resize(out.len() + packet::pad_len(payload.len()), 0);
        let ip = super::icrc::Ipv4Udp { src, dst, id: 0, df: true, sport: self.sport(src), dport: ROCE_PORT };
        let crc = super::icrc::icrc_v4(&ip, &[&out]);
        out.extend_from_slice(&crc.to_le_bytes());
        self.send_to(src, dst, &out);
    }
}
