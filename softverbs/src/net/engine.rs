//! The TCP/UDP transport: per context one TCP listener and one UDP socket on the same port
//! (dual-stack `[::]` when IPv6 exists, else `0.0.0.0`), and one progress thread that
//! waits in `epoll_wait` (no timeout while idle; 5 ms ticks only while an RC request waits
//! for a receive with a finite RNR budget).
//!
//! RC: a requester QP opens a TCP connection to the responder's context (lazily, on its
//! first transmission) and sends `Hello` first; the responder answers each request on that
//! same connection, and sends its own QP's requests back on it too when it has none yet (so
//! a QP pair normally shares one connection; if both sides open at once, nobody has to agree
//! on who connects: both use two until one side, with nothing in flight, moves to the other's,
//! see `requester::prefer_peer_link`). Writes never block: what the socket does not take is
//! queued and flushed on `EPOLLOUT`. A peer that leaves too many responses unread, or has
//! too many requests parked at the responder, is stopped through TCP: its link is not read
//! until that clears (see `PARK_MAX_BYTES` and `TcpLink::rearm`).
//!
//! Progress: the progress thread, or — polling-driven progress — any application thread
//! in `ibv_poll_cq` on an empty CQ ([`Transport::progress`]: the same handlers, never
//! waiting for a lock another thread holds). While applications poll, the progress thread
//! parks outside `epoll_wait` (see `park_while_polled`).
//!
//! Same host: a stream to a context of this network namespace is a unix one (`local`);
//! everything above the socket is the same.
//!
//! Every received frame goes through `frame::decode` first; a malformed frame is counted
//! and dropped (and a stream that carried one is closed, since it cannot be re-synchronised).

use super::addr::{local_addr, to_storage};
use super::batch::{Batch, Datagram, SLOTS};
use super::local;
use super::ring::Rings;
use super::frame::{decode, op_of, DecodeError, Header, Op, F_DATAGRAMS, HDR_LEN, MAX_MSG};
use super::{Link, Transport};
use crate::core::context::Context;
use crate::core::registry::{lock, try_lock};
use crate::qp::{requester, responder, ud, Qp, MAX_QP_WR, RD_IN_FLIGHT};
use crate::sys::{cerr, owned, Errno, Result};
use common::inthash::IntMap;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

/// How long sent data may wait for the peer's TCP ACK before the link fails
/// (TCP_USER_TIMEOUT): generous, as the peer's kernel ACKs even while the
/// peer process is busy; a dead or unreachable host is noticed after it.
const LINK_USER_TIMEOUT_MS: i32 = 30_000;
const T_WAKE: u64 = 1;
const T_LISTEN: u64 = 2;
const T_UDP: u64 = 3;
const T_LISTEN_LOCAL: u64 = 4;
const T_ROCE_TIMER: u64 = 5;
/// RoCEv2 sockets (one per IPv4 address): tokens `T_ROCE_SOCK..T_ROCE_GROUPS`.
const T_ROCE_SOCK: u64 = 6;
/// The epoll set of the RoCEv2 endpoint's multicast group sockets (`roce::mcast`).
const T_ROCE_GROUPS: u64 = 16;
const T_FIRST_CONN: u64 = 17;
/// Progress passes per millisecond that mean "an application is busy-polling".
const PARK_POLLS: u64 = 8;

mod ud_links;

pub struct Engine {
    port: u16,
    epfd: Arc<OwnedFd>,
    listener: OwnedFd,
    /// The same-host listener (`local`), when its name could be bound.
    local_listener: Option<OwnedFd>,
    udp: OwnedFd,
    v6: bool,
    conns: Mutex<IntMap<u64, Arc<TcpLink>>>,
    /// The datagram receive buffer; its lock also keeps UD arrivals in order when the
    /// progress thread and a polling application thread both receive.
    udp_rx: Mutex<Batch>,
    /// Same-host datagram links by destination (`ud_links`); None: none could be opened.
    ud_links: Mutex<std::collections::HashMap<SocketAddr, Option<Arc<TcpLink>>>>,
    next_token: AtomicU64,
    stopping: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Progress passes made by polling application threads (`Transport::progress`).
    polls: AtomicU64,
    /// Parked flag and held responses, shared with the links.
    shared: Arc<Shared>,
    kicked: AtomicBool,
    malformed: AtomicU64,
    roce: Option<Arc<crate::roce::endpoint::Endpoint>>,
}

fn setopt(fd: i32, level: i32, name: i32, val: i32) {
    // SAFETY: passes a live int of the right size.
    unsafe { libc::setsockopt(fd, level, name, (&val as *const i32).cast(), 4) };
}

fn epoll_add(epfd: i32, fd: i32, events: u32, token: u64) -> Result<()> {
    let mut ev = libc::epoll_event { events, u64: token };
    // SAFETY: ev is a live epoll_event.
    cerr(unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
    Ok(())
}

fn epoll_mod(epfd: i32, fd: i32, events: u32, token: u64) {
    let mut ev = libc::epoll_event { events, u64: token };
    // SAFETY: ev is a live epoll_event.
    unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_MOD, fd, &mut ev) };
}

/// Binds a TCP listener and a UDP socket to one free port of family `fam`.
fn bind_pair(fam: i32) -> Result<(OwnedFd, OwnedFd, u16)> {
    for _ in 0..32 {
        // SAFETY: plain socket syscalls; results checked.
        let tcp = owned(unsafe { libc::socket(fam, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) })?;
        if fam == libc::AF_INET6 {
            setopt(tcp.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 0);
        }
        let any: SocketAddr = if fam == libc::AF_INET6 { "[::]:0".parse().unwrap_or_else(|_| unreachable_addr()) } else { "0.0.0.0:0".parse().unwrap_or_else(|_| unreachable_addr()) };
        let (ss, len) = to_storage(&any, fam == libc::AF_INET6).ok_or(Errno::EAFNOSUPPORT)?;
        // SAFETY: ss holds a valid sockaddr of len bytes.
        cerr(unsafe { libc::bind(tcp.as_raw_fd(), &ss as *const _ as *const libc::sockaddr, len) })?;
        // SAFETY: listen on our own socket.
        cerr(unsafe { libc::listen(tcp.as_raw_fd(), 128) })?;
        let port = local_addr(tcp.as_raw_fd()).map(|a| a.port()).ok_or(Errno::EIO)?;
        // SAFETY: plain socket syscall.
        let udp = owned(unsafe { libc::socket(fam, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
        if fam == libc::AF_INET6 {
            setopt(udp.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 0);
        }
        setopt(udp.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 4 << 20);
        setopt(udp.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20);
        let at = SocketAddr::new(any.ip(), port);
        let (ss, len) = to_storage(&at, fam == libc::AF_INET6).ok_or(Errno::EAFNOSUPPORT)?;
        // SAFETY: ss holds a valid sockaddr of len bytes.
        if unsafe { libc::bind(udp.as_raw_fd(), &ss as *const _ as *const libc::sockaddr, len) } == 0 {
            return Ok((tcp, udp, port));
        }
    }
    Err(Errno(libc::EADDRINUSE))
}

fn unreachable_addr() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 0))
}

impl Engine {
    /// Opens the endpoint and starts the progress thread for `ctx`.
    pub fn start(ctx: &Arc<Context>) -> Result<Arc<Engine>> {
        let (listener, udp, port, v6) = match bind_pair(libc::AF_INET6) {
            Ok((l, u, p)) => (l, u, p, true),
            Err(_) => {
                let (l, u, p) = bind_pair(libc::AF_INET)?;
                (l, u, p, false)
            }
        };
        // SAFETY: plain syscalls; checked by `owned`.
        let epfd = Arc::new(owned(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?);
        // SAFETY: as above.
        let wake = owned(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
        let ep = epfd.as_raw_fd();
        epoll_add(ep, wake.as_raw_fd(), libc::EPOLLIN as u32, T_WAKE)?;
        epoll_add(ep, listener.as_raw_fd(), libc::EPOLLIN as u32, T_LISTEN)?;
        epoll_add(ep, udp.as_raw_fd(), libc::EPOLLIN as u32, T_UDP)?;
        let local_listener = local::listen(port).and_then(|l| epoll_add(ep, l.as_raw_fd(), libc::EPOLLIN as u32, T_LISTEN_LOCAL).ok().map(|_| l));
        let roce = crate::roce::endpoint::Endpoint::open(ctx, port);
        if let Some(r) = &roce {
            epoll_add(ep, r.timer.as_raw_fd(), libc::EPOLLIN as u32, T_ROCE_TIMER)?;
            for (i, (_, fd)) in r.socks.iter().enumerate().take((T_ROCE_GROUPS - T_ROCE_SOCK) as usize) {
                epoll_add(ep, fd.as_raw_fd(), libc::EPOLLIN as u32, T_ROCE_SOCK + i as u64)?;
            }
            epoll_add(ep, r.mcast.epfd.as_raw_fd(), libc::EPOLLIN as u32, T_ROCE_GROUPS)?;
            r.attach_epoll(epfd.clone(), T_ROCE_SOCK);
        }
        let eng = Arc::new(Engine {
            port,
            epfd,
            listener,
            local_listener,
            udp,
            v6,
            conns: Mutex::new(IntMap::default()),
            udp_rx: Mutex::new(Batch::default()),
            ud_links: Mutex::new(std::collections::HashMap::new()),
            next_token: AtomicU64::new(T_FIRST_CONN),
            stopping: AtomicBool::new(false),
            thread: Mutex::new(None),
            polls: AtomicU64::new(0),
            shared: Arc::new(Shared {
                parked: AtomicBool::new(false),
                pending: AtomicBool::new(false),
                age: std::sync::atomic::AtomicU32::new(0),
                held: Mutex::new(Vec::new()),
                resumed: Mutex::new(Vec::new()),
                resume_pending: AtomicBool::new(false),
                wake,
                thread: std::sync::OnceLock::new(),
                rings: Mutex::new(Arc::new(Vec::new())),
                blocked: AtomicBool::new(false),
            }),
            kicked: AtomicBool::new(false),
            malformed: AtomicU64::new(0),
            roce,
        });
        let weak_ctx = Arc::downgrade(ctx);
        let e2 = eng.clone();
        let h = common::thread::spawn("softverbs", move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| e2.run(&weak_ctx)));
            if r.is_err() {
                eprintln!("libibverbs (softverbs): progress thread failed; the context stops moving data");
            }
        })
        .map_err(|_| Errno::ENOMEM)?;
        let _ = eng.shared.thread.set(h.thread().clone());
        *lock(&eng.thread) = Some(h);
        Ok(eng)
    }

    /// `tcp`: a TCP stream (else a same-host unix one, see `local`).
    /// `rings`: the connector's side of a ring stream (`local::offer_rings`).
    fn register(&self, fd: OwnedFd, role: Role, connecting: bool, listener: Option<SocketAddr>, tcp: bool, rings: Option<Rings>) -> Result<Arc<TcpLink>> {
        let token = self.next_token.fetch_add(1, Ordering::SeqCst);
        let inbound = matches!(role, Role::Inbound);
        if tcp {
            setopt(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY, 1);
            // A peer whose host died (no FIN, no RST) fails the link once data has
            // waited this long for its TCP ACK, as an RC QP gives up after its retries.
            setopt(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, LINK_USER_TIMEOUT_MS);
        }
        let link = Arc::new(TcpLink {
            fd,
            token,
            epfd: self.epfd.clone(),
            shared: self.shared.clone(),
            role,
            tx: Mutex::new(Tx::new(connecting)),
            rx: Mutex::new(Rx { buf: Vec::new(), start: 0, direct: None, bulk: 0 }),
            dead: AtomicBool::new(false),
            reported: AtomicBool::new(false),
            peer_qpn: std::sync::atomic::AtomicU32::new(NO_PEER),
            hello_qp: std::sync::OnceLock::new(),
            listener,
            pause: AtomicU8::new(0),
            unix: !tcp,
            window: std::sync::OnceLock::new(),
            offer_pending: AtomicBool::new(!tcp && inbound),
            ring: std::sync::OnceLock::new(),
            ring_blocked: AtomicBool::new(false),
            datagrams: std::sync::OnceLock::new(),
        });
        if let Some(r) = rings {
            let _ = link.ring.set(r);
            self.shared.add_ring(&link);
        }
        lock(&self.conns).insert(token, link.clone());
        let ev = lock(&link.tx).mask;
        if let Err(e) = epoll_add(self.epfd.as_raw_fd(), link.fd.as_raw_fd(), ev, token) {
            lock(&self.conns).remove(&token);
            return Err(e);
        }
        Ok(link)
    }

    fn run(self: &Arc<Self>, ctx: &Weak<Context>) {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 64];
        while !self.stopping.load(Ordering::SeqCst) {
            self.shared.flush_held();
            let ticking = ctx.upgrade().map(|c| c.rnr_timers.load(Ordering::SeqCst) > 0).unwrap_or(false);
            // Ring links: ask their peers for a bell while we block (and do not block if
            // something came meanwhile).
            let rings = self.shared.rings();
            self.shared.blocked.store(true, Ordering::SeqCst);
            let waiting = rings.iter().fold(false, |any, l| l.ring.get().is_some_and(|r| r.sleep(true)) | any);
            let timeout = if waiting { 0 } else if ticking { 5 } else { -1 };
            let polls_before = self.polls.load(Ordering::SeqCst);
            let ep_before = self.ep_polls();
            // SAFETY: events is a live buffer of 64 entries.
            let n = unsafe { libc::epoll_wait(self.epfd.as_raw_fd(), events.as_mut_ptr(), 64, timeout) };
            self.shared.blocked.store(false, Ordering::SeqCst);
            for l in rings.iter() {
                if let Some(r) = l.ring.get() {
                    r.sleep(false);
                }
            }
            if n < 0 {
                if Errno::last().0 == libc::EINTR {
                    continue;
                }
                break;
            }
            let Some(c) = ctx.upgrade() else { break };
            let any = self.handle(&c, &events[..n as usize], true) | self.serve_rings(&c, true);
            self.resume_links(&c);
            if ticking {
                responder::tick(&c);
            }
            let polled = self.polls.load(Ordering::SeqCst).wrapping_sub(polls_before);
            let ep_polled = self.ep_polls().wrapping_sub(ep_before);
            if polled.max(ep_polled) >= PARK_POLLS || (!any && polled.max(ep_polled) > 0) {
                self.park_while_polled(&c, &mut events);
            }
        }
    }

    /// Polls of the RoCEv2 endpoint shared with the process's other contexts.
    fn ep_polls(&self) -> u64 {
        self.roce.as_ref().map_or(0, |r| r.polls.load(Ordering::SeqCst))
    }

    /// An application thread is busy-polling (it made progress passes meanwhile, or took
    /// this wake-up's work): it drives the progress itself. Staying in `epoll_wait` would
    /// only make the scheduler run this thread (preempting a poller, contending for its
    /// locks) on every arrival, so sleep in 1 ms steps for as long as polls keep coming
    /// (≥ `PARK_POLLS` per step), then go back to `epoll_wait`. `kick` (arming a CQ for
    /// events, stop) ends the sleep at once.
    ///
    /// The RoCEv2 endpoint's sockets are in every context's epoll set (a program may poll
    /// any of its contexts), so a thread polling another context (perftest polls the one
    /// rdma_cm opened, not its own) keeps this engine asleep too: else every packet would
    /// wake it to contend with that poller. Its own sockets and links it then serves in a
    /// non-blocking pass per step.
    fn park_while_polled(&self, c: &Arc<Context>, events: &mut [libc::epoll_event]) {
        self.shared.parked.store(true, Ordering::SeqCst);
        while !self.stopping.load(Ordering::SeqCst) && !self.kicked.swap(false, Ordering::SeqCst) {
            let seen = self.polls.load(Ordering::SeqCst);
            let ep_seen = self.ep_polls();
            std::thread::park_timeout(std::time::Duration::from_millis(1));
            self.shared.flush_held();
            self.resume_links(c);
            if c.rnr_timers.load(Ordering::SeqCst) > 0 {
                responder::tick(c);
            }
            if self.polls.load(Ordering::SeqCst).wrapping_sub(seen) >= PARK_POLLS {
                continue;
            }
            if self.ep_polls().wrapping_sub(ep_seen) < PARK_POLLS {
                break;
            }
            // SAFETY: events is a live buffer; timeout 0 never blocks.
            let n = unsafe { libc::epoll_wait(self.epfd.as_raw_fd(), events.as_mut_ptr(), events.len() as i32, 0) };
            if n > 0 {
                self.handle(c, &events[..n as usize], true);
            }
            self.serve_rings(c, true);
        }
        self.shared.parked.store(false, Ordering::SeqCst);
        self.shared.flush_held();
    }

    /// Reads what waits in the ring links and writes what waited for room there (no
    /// events come for them: their peers write memory, and ring only a sleeper).
    fn serve_rings(&self, c: &Arc<Context>, engine: bool) -> bool {
        let mut any = false;
        for l in self.shared.rings().iter() {
            if l.dead.load(Ordering::SeqCst) {
                self.shared.remove_ring(l.token);
                continue;
            }
            let Some(r) = l.ring.get() else { continue };
            let mut flags = 0;
            if r.readable() {
                flags |= libc::EPOLLIN as u32;
            }
            if l.ring_blocked.load(Ordering::SeqCst) && r.has_room() {
                flags |= libc::EPOLLOUT as u32;
            }
            if flags != 0 {
                any |= self.on_conn_event(c, l, flags, engine);
            }
        }
        any
    }

    /// Links that were paused (see `TcpLink::rearm`) go on: the responder runs the requests
    /// it held back while the link was congested, and what the link buffered meanwhile is
    /// dispatched (the peer may have nothing more to send, so no `EPOLLIN` would come for
    /// it). Only the progress thread does this, waiting for each link's receive lock, so no
    /// resumed link is skipped because another thread was finishing its read pass.
    fn resume_links(&self, c: &Arc<Context>) {
        if !self.shared.resume_pending.swap(false, Ordering::SeqCst) {
            return;
        }
        let tokens = std::mem::take(&mut *lock(&self.shared.resumed));
        for t in tokens {
            let link = lock(&self.conns).get(&t).cloned();
            if let Some(l) = link {
                if let Some(qp) = l.local_qp() {
                    responder::resume(&qp);
                }
                self.on_conn_event(c, &l, libc::EPOLLIN as u32, true);
            }
        }
    }

    /// Handles ready events. `engine`: called by the progress thread (may wait for a lock);
    /// otherwise by a polling application thread, which skips what another thread is
    /// already handling. Returns true if anything was handled.
    fn handle(&self, c: &Arc<Context>, events: &[libc::epoll_event], engine: bool) -> bool {
        let mut any = false;
        for ev in events {
            let (flags, token) = (ev.events, ev.u64);
            match token {
                T_WAKE => {
                    if engine {
                        let mut v = 0u64;
                        // SAFETY: reads 8 bytes into a live u64 from our nonblocking eventfd.
                        unsafe { libc::read(self.shared.wake.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
                    }
                }
                T_LISTEN => {
                    self.accept_all(false);
                    any = true;
                }
                T_LISTEN_LOCAL => {
                    self.accept_all(true);
                    any = true;
                }
                T_UDP => {
                    let g = if engine { Some(lock(&self.udp_rx)) } else { try_lock(&self.udp_rx) };
                    if let Some(mut rx) = g {
                        any |= self.recv_datagrams(c, &mut rx, engine);
                    }
                }
                T_ROCE_TIMER => {
                    if let Some(r) = &self.roce {
                        r.on_timer();
                        any = true;
                    }
                }
                t if (T_ROCE_SOCK..T_ROCE_GROUPS).contains(&t) => {
                    if let Some(r) = &self.roce {
                        any |= r.on_readable((t - T_ROCE_SOCK) as usize, engine);
                    }
                }
                T_ROCE_GROUPS => {
                    if let Some(r) = &self.roce {
                        any |= r.mcast.on_readable(engine, &r.dropped);
                    }
                }
                t => {
                    let link = lock(&self.conns).get(&t).cloned();
                    if let Some(l) = link {
                        any |= self.on_conn_event(c, &l, flags, engine);
                    }
                }
            }
        }
        any
    }

    /// Accepts what waits on the TCP listener, or (`same_host`) on the unix one.
    fn accept_all(&self, same_host: bool) {
        let l = if same_host {
            match &self.local_listener {
                Some(l) => l.as_raw_fd(),
                None => return,
            }
        } else {
            self.listener.as_raw_fd()
        };
        loop {
            // SAFETY: accept4 on our listener; peer address not needed.
            let fd = unsafe { libc::accept4(l, std::ptr::null_mut(), std::ptr::null_mut(), libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) };
            let Ok(fd) = owned(fd) else { return };
            let me = if same_host { Some(local::endpoint(self.port)) } else { local_addr(fd.as_raw_fd()) };
            let _ = self.register(fd, Role::Inbound, false, me, !same_host, None);
        }
    }

    /// Receives waiting datagrams: the progress thread until the socket is drained (a
    /// bounded number of batches, like a link's read pass), a polling thread one batch.
    fn recv_datagrams(&self, ctx: &Arc<Context>, rx: &mut Batch, engine: bool) -> bool {
        let mut any = false;
        for _ in 0..if engine { 8 * MAX_READS } else { 1 } {
            let n = rx.recv(self.udp.as_raw_fd());
            for i in 0..n {
                self.on_datagram(ctx, rx.get(i));
            }
            any |= n > 0;
            if n < SLOTS {
                break;
            }
        }
        any
    }

    fn on_datagram(&self, ctx: &Arc<Context>, d: Datagram) {
        if d.whole && d.data.starts_with(&crate::roce::share::FWD_MAGIC) {
            // RoCEv2 handed on by the process owning UDP 4791 here (roce/share.rs).
            match (&self.roce, d.from) {
                (Some(r), Some(a)) if a.ip().is_loopback() => return r.on_forward(d.data),
                _ => {}
            }
        } else if d.whole {
            if let Ok((h, total)) = decode(d.data) {
                if total == d.data.len() && h.op == Op::UdSend {
                    return ud::on_datagram(ctx, &h, &d.data[HDR_LEN..total], d.from);
                }
            }
        }
        self.malformed.fetch_add(1, Ordering::Relaxed);
    }

    fn on_conn_event(&self, ctx: &Arc<Context>, link: &Arc<TcpLink>, flags: u32, engine: bool) -> bool {
        // A bell on a ring link may also mean room for what waits to be written.
        let flags = if link.ring_blocked.load(Ordering::SeqCst) { flags | libc::EPOLLOUT as u32 } else { flags };
        let mut down = false;
        let mut any = false;
        if flags & libc::EPOLLOUT as u32 != 0 {
            match link.on_writable(engine) {
                Ok(drained) => {
                    any |= drained;
                    if drained {
                        // An accepted stream may carry its local QP's requests too.
                        if let Some(qp) = link.local_qp() {
                            let as_dyn: Arc<dyn Link> = link.clone();
                            requester::on_drained(&qp, &as_dyn);
                        }
                        link.settle();
                    }
                }
                Err(()) => down = true,
            }
        }
        if !down && link.paused() && flags & (libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0 {
            // Reported whatever the interest (level-triggered: again on every wait), and the
            // stream is broken (reset, or we shut it down): what it buffered cannot be
            // answered anyway.
            down = true;
        }
        if !down && flags & (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLRDHUP) as u32 != 0 {
            match link.read_frames(ctx, engine) {
                Ok(did) => any |= did,
                Err(malformed) => {
                    if malformed {
                        self.malformed.fetch_add(1, Ordering::Relaxed);
                    }
                    down = true;
                }
            }
        }
        if down {
            self.link_down(link);
            any = true;
        }
        any
    }

    fn link_down(&self, link: &Arc<TcpLink>) {
        if link.reported.swap(true, Ordering::SeqCst) {
            return;
        }
        lock(&self.conns).remove(&link.token);
        self.shared.remove_ring(link.token);
        // SAFETY: deregistering our own fd; a null event is allowed for DEL.
        unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_DEL, link.fd.as_raw_fd(), std::ptr::null_mut()) };
        link.dead.store(true, Ordering::SeqCst);
        let as_dyn: Arc<dyn Link> = link.clone();
        // A link may carry requests and responses both ways (see `Link::peer_qpn`).
        if let Some(qp) = link.local_qp() {
            requester::on_link_down(&qp, &as_dyn);
            responder::on_link_down(&qp, &as_dyn);
        }
    }
}

impl Transport for Engine {
    fn port(&self) -> u16 {
        self.port
    }

    fn connect(&self, addr: SocketAddr, owner: Weak<Qp>) -> Result<Arc<dyn Link>> {
        if let Some(fd) = local::connect(&addr) {
            if let Ok(rings) = local::offer_rings(&fd) {
                if let Ok(link) = self.register(fd, Role::Outbound(owner.clone()), false, Some(local::endpoint(addr.port())), false, rings) {
                    return Ok(link);
                }
            }
        }
        let fam = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
        // SAFETY: plain socket syscall; checked by `owned`.
        let fd = owned(unsafe { libc::socket(fam, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) })?;
        let (ss, len) = to_storage(&addr, fam == libc::AF_INET6).ok_or(Errno::EAFNOSUPPORT)?;
        // SAFETY: ss holds a valid sockaddr of len bytes.
        let r = unsafe { libc::connect(fd.as_raw_fd(), &ss as *const _ as *const libc::sockaddr, len) };
        if r < 0 && Errno::last().0 != libc::EINPROGRESS {
            return Err(Errno::last());
        }
        let link = self.register(fd, Role::Outbound(owner), true, Some(addr), true, None)?;
        Ok(link)
    }

    fn send_datagram(&self, addr: SocketAddr, frame: &[u8]) -> Result<()> {
        if self.send_by_ring(addr, frame) {
            return Ok(());
        }
        let (ss, len) = to_storage(&addr, self.v6).ok_or(Errno::EAFNOSUPPORT)?;
        // SAFETY: frame is a live slice; ss holds a valid sockaddr of len bytes.
        let n = unsafe {
            libc::sendto(self.udp.as_raw_fd(), frame.as_ptr().cast(), frame.len(), libc::MSG_NOSIGNAL, &ss as *const _ as *const libc::sockaddr, len)
        };
        if n < 0 {
            return Err(Errno::last());
        }
        Ok(())
    }

    fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.shared.wake();
        let h = lock(&self.thread).take();
        if let Some(h) = h {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
        // What a polling thread held back leaves before the links close (see Qp::release_held).
        self.shared.flush_held();
        lock(&self.shared.resumed).clear();
        *lock(&self.shared.rings) = Arc::new(Vec::new());
        let links: Vec<Arc<TcpLink>> = lock(&self.conns).drain().map(|(_, l)| l).collect();
        for l in links {
            l.dead.store(true, Ordering::SeqCst);
            // SAFETY: shutting down our own socket.
            unsafe { libc::shutdown(l.fd.as_raw_fd(), libc::SHUT_RDWR) };
        }
    }

    fn malformed(&self) -> u64 {
        self.malformed.load(Ordering::Relaxed)
    }

    fn progress(&self, ctx: &Arc<Context>) -> bool {
        if self.stopping.load(Ordering::Relaxed) {
            return false;
        }
        self.polls.fetch_add(1, Ordering::SeqCst);
        if let Some(r) = &self.roce {
            r.polls.fetch_add(1, Ordering::SeqCst);
        }
        self.shared.flush_held();
        // Ring links first; while they keep bringing frames, the epoll pass (a system
        // call) is made only every 8th time.
        let served = self.serve_rings(ctx, false);
        if served && !self.polls.load(Ordering::Relaxed).is_multiple_of(8) {
            return true;
        }
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 16];
        // SAFETY: events is a live buffer of 16 entries; timeout 0 never blocks.
        let n = unsafe { libc::epoll_wait(self.epfd.as_raw_fd(), events.as_mut_ptr(), 16, 0) };
        if n <= 0 {
            return served;
        }
        self.handle(ctx, &events[..n as usize], false) | served
    }

    fn flush_held(&self) {
        self.shared.flush_held_aged();
    }

    fn drain(&self, ctx: &Arc<Context>) {
        if self.stopping.load(Ordering::Relaxed) {
            return;
        }
        let links: Vec<Arc<TcpLink>> = lock(&self.conns).values().cloned().collect();
        for l in links {
            // As the progress thread: wait for the link's receive lock, so a frame another
            // thread is handling right now has been delivered too.
            self.on_conn_event(ctx, &l, libc::EPOLLIN as u32, true);
        }
    }

    fn roce(&self) -> Option<&Arc<crate::roce::endpoint::Endpoint>> {
        self.roce.as_ref()
    }

    fn kick(&self) {
        self.shared.flush_held();
        // Also when not parked yet: the progress thread may be about to park (it decided to
        // after its last wake-up), and would then sleep a whole step while the application
        // waits for it. A kick left over only shortens the next park.
        self.kicked.store(true, Ordering::SeqCst);
        if let Some(t) = self.shared.thread.get() {
            t.unpark();
        }
    }
}

/// What the engine shares with its links.
struct Shared {
    /// The progress thread sleeps outside `epoll_wait` because applications poll.
    parked: AtomicBool,
    /// `held` is non-empty.
    pending: AtomicBool,
    /// `ibv_poll_cq` calls since responses were last held.
    age: std::sync::atomic::AtomicU32,
    /// Links whose responses a polling thread held back at the end of its read pass:
    /// the application usually answers at once (ping-pong), and its request then leaves
    /// in the same `sendmsg` as our ACK. Flushed by the next verbs poll/arm, progress pass,
    /// or the parked progress thread (≤ 1 ms).
    held: Mutex<Vec<Arc<TcpLink>>>,
    /// Tokens of links whose reading resumed (`Engine::resume_links`); `resume_pending`:
    /// not empty.
    resumed: Mutex<Vec<u64>>,
    resume_pending: AtomicBool,
    /// Wakes the progress thread out of `epoll_wait`.
    wake: OwnedFd,
    /// The progress thread (unparked out of `park_while_polled`).
    thread: std::sync::OnceLock<std::thread::Thread>,
    /// Links whose frames travel through shared-memory rings (`ring`): polled by every
    /// progress pass, told before the progress thread blocks. A snapshot, replaced on
    /// change, so that a pass reads it without holding a lock.
    rings: Mutex<Arc<Vec<Arc<TcpLink>>>>,
    /// The progress thread is (about to be) blocked in `epoll_wait`, relying on the ring
    /// links' bells: a thread that reads a bell meant for it raises `sleeping` again.
    blocked: AtomicBool,
}

thread_local! {
    /// The engine this thread last held responses on.
    static HOLDER: std::cell::RefCell<Option<Weak<Shared>>> = const { std::cell::RefCell::new(None) };
}

impl Shared {
    fn rings(&self) -> Arc<Vec<Arc<TcpLink>>> {
        lock(&self.rings).clone()
    }

    fn add_ring(&self, l: &Arc<TcpLink>) {
        // The progress thread may be blocked with an older snapshot: until it looks at
        // this link, the peer must ring.
        if let Some(r) = l.ring.get() {
            r.sleep(true);
        }
        let mut g = lock(&self.rings);
        let mut v: Vec<_> = g.iter().cloned().collect();
        v.push(l.clone());
        *g = Arc::new(v);
    }

    fn remove_ring(&self, token: u64) {
        let mut g = lock(&self.rings);
        if g.iter().any(|l| l.token == token) {
            *g = Arc::new(g.iter().filter(|l| l.token != token).cloned().collect());
        }
    }

    /// Gets the progress thread going, wherever it sleeps.
    fn wake(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Link `token` may be read again: the progress thread dispatches what it buffered.
    fn resume(&self, token: u64) {
        lock(&self.resumed).push(token);
        self.resume_pending.store(true, Ordering::SeqCst);
        self.wake();
    }

    /// From `ibv_poll_cq`: held responses may wait while the application takes the
    /// completions of the pass that held them (typically: send completion, then the
    /// receive it answers by posting) but not longer. A thread that moves on to another
    /// context's CQ (e.g. both ends of a connection in one thread) releases what it held.
    fn flush_held_aged(self: &Arc<Self>) {
        let other = HOLDER.with(|h| {
            let mut h = h.borrow_mut();
            match h.as_ref() {
                Some(w) if !std::ptr::eq(w.as_ptr(), Arc::as_ptr(self)) => h.take().and_then(|w| w.upgrade()),
                _ => None,
            }
        });
        if let Some(o) = other {
            o.flush_held();
        }
        if self.pending.load(Ordering::SeqCst) && self.age.fetch_add(1, Ordering::SeqCst) >= HOLD_POLLS {
            self.flush_held();
        }
    }

    fn flush_held(&self) {
        if !self.pending.load(Ordering::SeqCst) || !self.pending.swap(false, Ordering::SeqCst) {
            return;
        }
        let links = std::mem::take(&mut *lock(&self.held));
        for l in links {
            let mut tx = lock(&l.tx);
            if !tx.held {
                continue;
            }
            tx.held = false;
            if !tx.connecting && !tx.corked && l.flush(&mut tx).is_err() {
                // SAFETY: shutting down our own socket; the engine reports it down.
                unsafe { libc::shutdown(l.fd.as_raw_fd(), libc::SHUT_RDWR) };
            }
            l.rearm(&mut tx);
        }
    }
}

enum Role {
    /// We connected: our QP's requests go out, responses come back.
    Outbound(Weak<Qp>),
    /// We accepted: requests come in for the QP named by the `Hello`.
    Inbound,
}

struct Tx {
    /// Bytes the socket did not take yet, in order (`off` into the front one).
    q: VecDeque<Queued>,
    off: usize,
    connecting: bool,
    /// EPOLLOUT is registered (the socket was full, or still connecting).
    want_out: bool,
    /// During a read pass, responses queue here and leave together in one `sendmsg` at
    /// the end of the pass.
    corked: bool,
    /// Queued responses held back after a polling thread's read pass (see `Shared`).
    held: bool,
    /// Response frames in `q`, and how many of them answer a READ or an atomic.
    resps: usize,
    rd_resps: usize,
    /// Requests of the peer parked at the local QP's responder (`Link::parked`): how many,
    /// and their payload bytes.
    parked: usize,
    parked_bytes: usize,
    /// Reading is paused because of `resps`/`rd_resps` (see `OUT_RD_HIGH`).
    out_paused: bool,
    /// The epoll interest registered for the socket.
    mask: u32,
}

/// One frame the socket did not take (all of it, or the rest).
struct Queued {
    bytes: Vec<u8>,
    class: Class,
}

/// What a queued frame is, for `Tx::resps` and `Tx::rd_resps`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Request,
    Response,
    /// A READ or atomic response.
    RdResponse,
}

impl Class {
    /// The class of an encoded frame (or of its header).
    fn of(frame: &[u8]) -> Class {
        match op_of(frame) {
            Some(Op::ReadResp | Op::AtomicResp) => Class::RdResponse,
            Some(Op::Ack) => Class::Response,
            _ => Class::Request,
        }
    }
}

const IN_EVENTS: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;

impl Tx {
    fn new(connecting: bool) -> Tx {
        Tx {
            q: VecDeque::new(),
            off: 0,
            connecting,
            want_out: connecting,
            corked: false,
            held: false,
            resps: 0,
            rd_resps: 0,
            parked: 0,
            parked_bytes: 0,
            out_paused: false,
            mask: IN_EVENTS | if connecting { libc::EPOLLOUT as u32 } else { 0 },
        }
    }

    fn push(&mut self, bytes: Vec<u8>, class: Class) {
        self.count(class, true);
        self.q.push_back(Queued { bytes, class });
    }

    fn pop(&mut self) {
        if let Some(f) = self.q.pop_front() {
            self.count(f.class, false);
        }
        self.off = 0;
    }

    fn clear(&mut self) {
        self.q.clear();
        self.off = 0;
        self.resps = 0;
        self.rd_resps = 0;
    }

    fn count(&mut self, class: Class, add: bool) {
        let step = |n: usize| if add { n + 1 } else { n.saturating_sub(1) };
        if class != Class::Request {
            self.resps = step(self.resps);
        }
        if class == Class::RdResponse {
            self.rd_resps = step(self.rd_resps);
        }
    }

    /// Too many of the peer's requests wait at the responder (see `PARK_MAX_BYTES`).
    fn parked_over(&self) -> bool {
        self.parked_bytes > PARK_MAX_BYTES || self.parked > PARK_MAX_REQS
    }

    /// The peer leaves more responses unread than a requester honouring its limits can
    /// have outstanding (see `OUT_RD_HIGH`); once paused, until half of them left.
    fn out_over(&self) -> bool {
        let (rd, all) =
            if self.out_paused { (OUT_RD_HIGH / 2, OUT_RESP_HIGH / 2) } else { (OUT_RD_HIGH, OUT_RESP_HIGH) };
        self.rd_resps > rd || self.resps > all
    }
}

/// Receive staging size (the least free space asked of each `recv`). Large WRITE
/// payloads bypass it (direct placement); a buffered frame larger than this grows the
/// buffer for its duration only.
const RX_CHUNK: usize = 64 << 10;
/// WRITE payloads at least this long go straight from the socket into the MR.
const DIRECT_MIN: u32 = 8 << 10;
/// Frames read one at a time after a direct one (see `Rx::bulk`).
const BULK_FRAMES: u8 = 8;
/// What such a read takes beyond the current frame: a few small frames (ACKs, credit
/// messages) come in one `recv`, and at most this much of a large WRITE's payload is staged.
const BULK_READ: usize = 4 * HDR_LEN;
/// Most queued response bytes a polling thread holds back (a few ACKs).
const HOLD_MAX: usize = 1024;
/// `ibv_poll_cq` calls held responses may wait through.
const HOLD_POLLS: u32 = 2;
/// Most `recv`s of one read pass of a link.
const MAX_READS: u32 = 16;
/// Most queued frames one `writev` takes.
const MAX_IOV: usize = 64;

// Back-pressure. Over TCP nothing is retransmitted, so the responder may neither drop a
// request (as an RNIC does, leaving the retry to the requester) nor buffer a peer's
// requests or responses without limit: beyond these bounds it stops reading the link
// (`TcpLink::rearm`), TCP's flow control then stops the peer, and reading resumes once the
// condition clears. A link carries our requests' responses too, which then wait as well,
// so the bounds lie beyond what a peer that honours its own limits can cause: a benign
// program never pauses a link.

/// Payload bytes of one link's requests parked at the responder (before RTR, or waiting
/// for a receive: RNR) beyond which the link pauses. Any single message (≤ `MAX_MSG`) may
/// park whole; well-behaved applications post their receives (or use credits, as
/// rsockets does) long before this much waits.
const PARK_MAX_BYTES: usize = MAX_MSG as usize;
/// Parked requests of one link beyond which it pauses (the per-request cost is about
/// 200 bytes): a requester has at most its send queue (≤ `MAX_QP_WR`) in flight.
const PARK_MAX_REQS: usize = MAX_QP_WR as usize;
/// READ/atomic responses waiting in one link's queue beyond which it pauses and is
/// congested (`Link::congested`: its parked requests do not run either) until half of them
/// left. Our requesters keep at most `RD_IN_FLIGHT` READs/atomics outstanding (whatever
/// their `max_rd_atomic`), so never more responses wait here, however slowly they read;
/// a peer that has more asks for data it does not take (READ amplification). A byte bound
/// would stop links that honour that: 16 outstanding 64 MiB READs each way of a QP pair
/// queue 1 GiB on both sides, and two sides that both stopped reading until their queues
/// drained would wait for each other for ever. The memory is bounded all the same:
/// ≤ `RD_IN_FLIGHT` + 1 READ responses of ≤ `MAX_MSG`, less what the socket took.
const OUT_RD_HIGH: usize = RD_IN_FLIGHT as usize;
/// Responses of any kind (ACKs, ~100 bytes each) waiting in one link's queue beyond which
/// it pauses and is congested (until half left): one per request in flight, ≤ the
/// requester's send queue.
const OUT_RESP_HIGH: usize = MAX_QP_WR as usize;

struct Rx {
    /// Received bytes; frames start at `start`.
    buf: Vec<u8>,
    start: usize,
    /// A WRITE whose payload is being received straight into the responder's MR.
    direct: Option<Direct>,
    /// Frames still to read one at a time since the last direct one: at a frame boundary
    /// read just the next header, and then only the rest of that frame, so a following
    /// large WRITE's payload is not staged (and copied) either. It lasts a few frames, as
    /// the small ones in between (ACKs, credit messages) would otherwise pull the next
    /// large one into the staging buffer.
    bulk: u8,
}

struct Direct {
    qp: Arc<Qp>,
    h: Header,
    /// Payload bytes placed (or discarded) so far.
    done: usize,
    /// False once an access check failed mid-way: the rest is read and discarded, then
    /// NAKed.
    ok: bool,
}

pub struct TcpLink {
    fd: OwnedFd,
    token: u64,
    epfd: Arc<OwnedFd>,
    shared: Arc<Shared>,
    role: Role,
    tx: Mutex<Tx>,
    rx: Mutex<Rx>,
    dead: AtomicBool,
    /// Reported down once (by whichever thread saw it first).
    reported: AtomicBool,
    /// Inbound: the QPN the `Hello` named as its source (`NO_PEER` before it).
    peer_qpn: std::sync::atomic::AtomicU32,
    /// Inbound: the local QP its `Hello` named (set once).
    hello_qp: std::sync::OnceLock<Weak<Qp>>,
    /// The listening endpoint the stream was opened to (`Link::listener`).
    listener: Option<SocketAddr>,
    /// Why reading is paused (`PAUSE_*`; written under the tx lock by `rearm`, read
    /// without it).
    pause: AtomicU8,
    /// A same-host unix stream.
    unix: bool,
    /// The peer's shared window, looked up at first use (`Link::window`).
    window: std::sync::OnceLock<Option<Arc<crate::core::window::Peer>>>,
    /// An accepted unix stream whose first byte (`local::take_offer`) is still to come.
    offer_pending: AtomicBool,
    /// Frames travel through these rings; the socket carries bells and EOF.
    ring: std::sync::OnceLock<Rings>,
    /// Bytes wait in `tx` for room in the outgoing ring.
    ring_blocked: AtomicBool,
    /// Inbound: its Hello opened a datagram link (`ud_links`) from the context at this
    /// address; only UD frames follow.
    datagrams: std::sync::OnceLock<SocketAddr>,
}

/// Too many of the peer's requests are parked (`Tx::parked_over`).
const PAUSE_PARKED: u8 = 1;
/// Too many responses wait for the peer to read them (`Tx::out_over`).
const PAUSE_OUT: u8 = 2;

const NO_PEER: u32 = u32::MAX;

impl TcpLink {
    /// The local QP of this link: the one that opened it, or (accepted) the one
    /// its Hello named.
    fn local_qp(&self) -> Option<Arc<Qp>> {
        match &self.role {
            Role::Outbound(q) => q.upgrade(),
            Role::Inbound => self.hello_qp.get()?.upgrade(),
        }
    }

    /// Reading is paused (see `PARK_MAX_BYTES`): frames stay in the receive buffer and
    /// the socket, and a read pass dispatches nothing.
    fn paused(&self) -> bool {
        self.pause.load(Ordering::SeqCst) != 0
    }

    /// Registers EPOLLOUT exactly while bytes wait (or the connect is pending), and
    /// EPOLLIN unless reading is paused. Every change of what decides a pause (queued
    /// responses, parked requests) comes here under the tx lock, so the interest always
    /// follows the latest state. A link leaving a pause goes to the progress thread
    /// (`Engine::resume_links`).
    fn rearm(&self, tx: &mut Tx) {
        tx.out_paused = tx.out_over();
        let pause = (if tx.parked_over() { PAUSE_PARKED } else { 0 }) | (if tx.out_paused { PAUSE_OUT } else { 0 });
        let was = self.pause.load(Ordering::SeqCst);
        if was != pause {
            self.pause.store(pause, Ordering::SeqCst);
        }
        // A ring link is always writable: room comes with a bell (`ring_blocked`).
        let want = (tx.connecting || (!tx.q.is_empty() && !tx.corked && !tx.held)) && self.ring.get().is_none();
        tx.want_out = want;
        let mask = (if pause != 0 { 0 } else { IN_EVENTS }) | (if want { libc::EPOLLOUT as u32 } else { 0 });
        if mask != tx.mask {
            tx.mask = mask;
            epoll_mod(self.epfd.as_raw_fd(), self.fd.as_raw_fd(), mask, self.token);
        }
        // Any cause that cleared, even with another still there: requests held back while
        // congested must run, or the parked ones that keep the link paused never drain.
        if was & !pause != 0 && !self.is_dead() {
            self.shared.resume(self.token);
        }
    }

    /// One `sendmsg` of the queued bytes followed by `extra`. Returns how many bytes of
    /// `extra` the socket took (the queue is consumed first) and whether it took all it was
    /// offered; Err on a broken socket.
    fn write_out(&self, tx: &mut Tx, extra: &[&[u8]]) -> std::result::Result<(usize, bool), ()> {
        let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 2 * MAX_IOV];
        let mut cnt = 0usize;
        let mut offered = 0usize;
        for (i, f) in tx.q.iter().take(MAX_IOV).enumerate() {
            let s = if i == 0 { &f.bytes[tx.off..] } else { &f.bytes[..] };
            offered += s.len();
            iov[cnt] = libc::iovec { iov_base: s.as_ptr() as *mut libc::c_void, iov_len: s.len() };
            cnt += 1;
        }
        // `extra` (header + at most 32 SGEs) goes along when the whole queue fits.
        let all_queue = tx.q.len() <= MAX_IOV && extra.len() <= MAX_IOV;
        if all_queue {
            for s in extra.iter().filter(|s| !s.is_empty()) {
                offered += s.len();
                iov[cnt] = libc::iovec { iov_base: s.as_ptr() as *mut libc::c_void, iov_len: s.len() };
                cnt += 1;
            }
        }
        if cnt == 0 {
            return Ok((0, true));
        }
        let n = if let Some(r) = self.ring.get() {
            // SAFETY: every iovec was made above from a live slice that outlives the call.
            let parts: Vec<&[u8]> = iov[..cnt].iter().map(|v| unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len) }).collect();
            let (n, bell) = r.write(&parts);
            if bell {
                local::ring_bell(&self.fd);
            }
            self.ring_blocked.store(n < offered, Ordering::SeqCst);
            if n == 0 {
                return Ok((0, false));
            }
            n as isize
        } else {
            // SAFETY: msghdr is plain data.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = iov.as_mut_ptr();
            msg.msg_iovlen = cnt as _;
            // SAFETY: every iovec points into a live slice (queue entries or `extra`) that
            // outlives the call; MSG_NOSIGNAL avoids SIGPIPE.
            unsafe { libc::sendmsg(self.fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) }
        };
        if n < 0 {
            let e = Errno::last().0;
            if e == libc::EAGAIN || e == libc::EINTR {
                return Ok((0, false));
            }
            tx.clear();
            return Err(());
        }
        let complete = n as usize == offered;
        let mut n = n as usize;
        while n > 0 {
            let Some(front) = tx.q.front() else { break };
            let rest = front.bytes.len() - tx.off;
            if n >= rest {
                n -= rest;
                tx.pop();
            } else {
                tx.off += n;
                n = 0;
            }
        }
        Ok((if all_queue { n } else { 0 }, complete))
    }

    /// Writes queued bytes until the socket is full. Err on a broken socket.
    fn flush(&self, tx: &mut Tx) -> std::result::Result<(), ()> {
        while !tx.q.is_empty() {
            let (_, complete) = self.write_out(tx, &[])?;
            if !complete {
                // The socket is full.
                break;
            }
        }
        Ok(())
    }

    /// The socket is writable (or the connect finished). `Ok(drained)`: the queue just
    /// emptied, so an outbound link's owner may transmit more.
    fn on_writable(&self, engine: bool) -> std::result::Result<bool, ()> {
        let mut tx = if engine {
            lock(&self.tx)
        } else {
            match try_lock(&self.tx) {
                Some(g) => g,
                None => return Ok(false),
            }
        };
        if tx.connecting {
            let mut err: i32 = 0;
            let mut len = 4 as libc::socklen_t;
            // SAFETY: err/len are live and sized.
            unsafe { libc::getsockopt(self.fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_ERROR, (&mut err as *mut i32).cast(), &mut len) };
            if err != 0 {
                return Err(());
            }
            tx.connecting = false;
        }
        if tx.corked {
            return Ok(false);
        }
        self.flush(&mut tx)?;
        let drained = tx.q.is_empty();
        if !drained || matches!(self.role, Role::Inbound) {
            self.rearm(&mut tx);
        }
        // Drained outbound: EPOLLOUT stays registered until `settle`, after the owner had
        // its chance to transmit more (usually refilling the socket at once).
        Ok(drained)
    }

    /// Brings the EPOLLOUT registration up to date.
    fn settle(&self) {
        let mut tx = lock(&self.tx);
        self.rearm(&mut tx);
    }

    /// Starts or ends a read pass's cork. Ending it with `hold`: leave small queued
    /// responses for the next write on this link or `Shared::flush_held`.
    fn set_cork(self: &Arc<Self>, on: bool, hold: bool) -> std::result::Result<(), ()> {
        let mut tx = lock(&self.tx);
        tx.corked = on;
        if on || tx.connecting || tx.q.is_empty() {
            return Ok(());
        }
        if hold && !tx.want_out && tx.q.iter().map(|f| f.bytes.len()).sum::<usize>() <= HOLD_MAX {
            if !tx.held {
                tx.held = true;
                lock(&self.shared.held).push(self.clone());
            }
            self.shared.age.store(0, Ordering::SeqCst);
            self.shared.pending.store(true, Ordering::SeqCst);
            drop(tx);
            let prev = HOLDER.with(|h| h.borrow_mut().replace(Arc::downgrade(&self.shared)));
            if let Some(p) = prev.and_then(|w| w.upgrade()) {
                if !Arc::ptr_eq(&p, &self.shared) {
                    p.flush_held();
                }
            }
            // The progress thread may have stopped parking meanwhile (and flushed before
            // our push): then nobody else would.
            if !self.shared.parked.load(Ordering::SeqCst) {
                self.shared.flush_held();
            }
            return Ok(());
        }
        let r = self.flush(&mut tx);
        self.rearm(&mut tx);
        r
    }

    /// Reads what is available and dispatches every complete frame. `Ok(any)`;
    /// Err(malformed?) when the stream must be closed.
    fn read_frames(self: &Arc<Self>, ctx: &Arc<Context>, engine: bool) -> std::result::Result<bool, bool> {
        let mut rx = if engine {
            lock(&self.rx)
        } else {
            match try_lock(&self.rx) {
                Some(g) => g,
                None => return Ok(false),
            }
        };
        if self.set_cork(true, false).is_err() {
            return Err(false);
        }
        let r = self.read_pass(ctx, &mut rx);
        // A polling thread (the progress thread parked) may hold its ACKs back.
        // (Not on a ring link: a write there costs no system call to save.)
        let hold = !engine && self.shared.parked.load(Ordering::SeqCst) && self.ring.get().is_none();
        if self.set_cork(false, hold).is_err() {
            return Err(false);
        }
        r
    }

    fn read_pass(self: &Arc<Self>, ctx: &Arc<Context>, rx: &mut Rx) -> std::result::Result<bool, bool> {
        let mut got = false;
        let mut drained = false;
        let mut eof = false;
        let mut reads = 0;
        loop {
            if rx.direct.is_some() {
                if reads >= MAX_READS {
                    return Ok(got);
                }
                reads += 1;
                match self.recv_direct(rx) {
                    Err(()) => return Err(false),
                    Ok(None) => return Ok(got),
                    Ok(Some((complete, emptied))) => {
                        got = true;
                        if !complete {
                            // Short read: the socket is (nearly) empty.
                            return Ok(got);
                        }
                        // The frames that came along are handled; no `recv` just to learn
                        // the socket is empty.
                        drained |= emptied;
                        continue;
                    }
                }
            }
            // Dispatch every complete frame in the buffer.
            let mut pending = 0usize;
            loop {
                if self.paused() {
                    // The rest waits here (and in the socket) for `Engine::resume_links`.
                    return Ok(got);
                }
                let Rx { buf, start, direct, bulk } = &mut *rx;
                let avail = &buf[*start..];
                match decode(avail) {
                    Ok((h, total)) => {
                        *bulk = bulk.saturating_sub(1);
                        let ok = self.dispatch(ctx, &h, &avail[HDR_LEN..total]);
                        *start += total;
                        if !ok {
                            return Err(true);
                        }
                    }
                    Err(DecodeError::Incomplete(total)) => {
                        if avail.len() >= HDR_LEN {
                            if !self.may_buffer(avail) {
                                return Err(true);
                            }
                            if let Some(d) = self.try_direct(avail) {
                                // The payload bytes already here went to the MR.
                                *direct = Some(d);
                                *bulk = BULK_FRAMES;
                                buf.clear();
                                *start = 0;
                                break;
                            }
                        }
                        pending = total;
                        break;
                    }
                    Err(DecodeError::Malformed(_)) => return Err(true),
                }
            }
            if rx.direct.is_some() {
                continue;
            }
            if eof {
                return Err(false);
            }
            if drained || reads >= MAX_READS {
                // Level-triggered epoll reports the rest again: a busy stream cannot keep
                // a polling application (or the other links) waiting.
                return Ok(got);
            }
            reads += 1;
            // Make room and read more.
            if rx.start == rx.buf.len() {
                rx.buf.clear();
                rx.start = 0;
                if rx.buf.capacity() > 4 * RX_CHUNK {
                    rx.buf.shrink_to(RX_CHUNK);
                }
            } else if rx.start > 0 {
                let s = rx.start;
                rx.buf.copy_within(s.., 0);
                let l = rx.buf.len() - s;
                rx.buf.truncate(l);
                rx.start = 0;
            }
            let want = RX_CHUNK.max(pending.saturating_sub(rx.buf.len()));
            rx.buf.reserve(want);
            let len = rx.buf.len();
            let mut spare = rx.buf.capacity() - len;
            if rx.bulk > 0 {
                // The rest of the current header; or the rest of the current frame and
                // the next header(s).
                let need = if len < HDR_LEN { BULK_READ - len } else { pending.saturating_sub(len) + BULK_READ };
                spare = spare.min(need);
            }
            // SAFETY: the iovec names the vector's spare capacity of `spare` bytes.
            let n = self.pull(&mut [libc::iovec { iov_base: unsafe { rx.buf.as_mut_ptr().add(len).cast() }, iov_len: spare }]);
            if n == 0 {
                eof = true;
                continue;
            }
            if n < 0 {
                let e = Errno::last().0;
                if e == libc::EAGAIN || e == libc::EINTR {
                    return Ok(got);
                }
                return Err(false);
            }
            // SAFETY: recv initialised n bytes after len.
            unsafe { rx.buf.set_len(len + n as usize) };
            got = true;
            if (n as usize) < spare {
                drained = true;
            }
        }
    }

    /// Receives into `iov` as `recvmsg` would (bytes, 0 at EOF, -1 with errno set): from
    /// the socket, or from the incoming ring once the stream has one (the socket then
    /// holds only bells, read and dropped here, and tells EOF).
    fn pull(self: &Arc<Self>, iov: &mut [libc::iovec]) -> isize {
        if self.offer_pending.load(Ordering::SeqCst) {
            match local::take_offer(&self.fd) {
                local::Offer::Again => {
                    crate::sys::set_errno(Errno::EAGAIN);
                    return -1;
                }
                local::Offer::Gone => return 0,
                local::Offer::Socket => {}
                local::Offer::Rings(r) => {
                    if self.ring.set(r).is_ok() && !self.dead.load(Ordering::SeqCst) {
                        self.shared.add_ring(self);
                    }
                }
            }
            self.offer_pending.store(false, Ordering::SeqCst);
        }
        let Some(r) = self.ring.get() else {
            // SAFETY: msghdr is plain data; the iovecs name the caller's live buffers.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = iov.as_mut_ptr();
            msg.msg_iovlen = iov.len() as _;
            // SAFETY: as above.
            return unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
        };
        for attempt in 0..2 {
            let (n, bell) = r.read(iov);
            if bell {
                local::ring_bell(&self.fd);
            }
            if n > 0 {
                return n as isize;
            }
            if attempt == 1 {
                break;
            }
            let mut bells = [0u8; 256];
            // SAFETY: reads at most 256 bytes into a live buffer.
            let m = unsafe { libc::recv(self.fd.as_raw_fd(), bells.as_mut_ptr().cast(), bells.len(), libc::MSG_DONTWAIT) };
            if m <= 0 {
                return m; // EOF, or errno from recv (EAGAIN: nothing at all)
            }
            // The bell may have been for the progress thread, which then still sleeps: the
            // peer must ring again (the next read below sees what it wrote before).
            if self.shared.blocked.load(Ordering::SeqCst) {
                r.sleep(true);
            }
        }
        crate::sys::set_errno(Errno::EAGAIN);
        -1
    }

    /// Whether a frame of kind `op` may come now: an accepted connection
    /// starts with its Hello, and a Hello comes only there.
    fn admits(&self, op: Op) -> bool {
        if self.datagrams.get().is_some() {
            return op == Op::UdSend;
        }
        let awaiting_hello = matches!(self.role, Role::Inbound) && self.hello_qp.get().is_none();
        (op == Op::Hello) == awaiting_hello
    }

    /// Whether the frame whose header starts `avail` may be gathered: one the
    /// link does not admit is refused at its header, before its payload (up to
    /// the largest frame) is buffered.
    fn may_buffer(&self, avail: &[u8]) -> bool {
        super::frame::decode_header(avail).is_ok_and(|h| self.admits(h.op))
    }

    /// A WRITE frame whose header is here but whose payload is not (all) yet: if the
    /// responder may execute it right now, start placing its payload straight into the
    /// target memory (copying what `avail` already holds).
    fn try_direct(self: &Arc<Self>, avail: &[u8]) -> Option<Direct> {
        let h = super::frame::decode_header(avail).ok()?;
        if h.op != Op::Write || h.payload_len < DIRECT_MIN {
            return None;
        }
        let qp = self.local_qp()?;
        if qp.qpn != h.dst_qpn {
            return None;
        }
        let me: Arc<dyn Link> = self.clone();
        if !responder::begin_direct(&qp, &me, &h) {
            return None;
        }
        let have = &avail[HDR_LEN..];
        let ok = responder::place_direct(&qp, &h, 0, have);
        Some(Direct { qp, h, done: have.len(), ok })
    }

    /// Receives more of the direct WRITE. `Ok(None)`: nothing available;
    /// `Ok(Some((done, emptied)))`: `emptied` if the socket had nothing after the payload.
    fn recv_direct(self: &Arc<Self>, rx: &mut Rx) -> std::result::Result<Option<(bool, bool)>, ()> {
        let Rx { buf, direct, .. } = rx;
        let Some(d) = direct.as_mut() else { return Ok(Some((true, false))) };
        let len = d.h.payload_len as usize;
        let mut extra = 0;
        let n = if d.ok && !self.dead.load(Ordering::SeqCst) {
            let want = len - d.done;
            let (done, h) = (d.done, d.h);
            // The next frame's header (and a few small frames) come along into the (empty)
            // staging buffer: one `recv` fewer per frame.
            buf.clear();
            buf.reserve(BULK_READ);
            let tail = buf.as_mut_ptr();
            let r = responder::recv_direct(&d.qp, &h, done, want, &mut |dst: *mut u8, n: usize| {
                // dst..dst+n lies inside a checked MR while the key lock is held; tail has
                // BULK_READ bytes of spare capacity.
                self.pull(&mut [libc::iovec { iov_base: dst.cast(), iov_len: n }, libc::iovec { iov_base: tail.cast(), iov_len: BULK_READ }])
            });
            match r {
                Some(n) => {
                    if n > want as isize {
                        extra = n as usize - want;
                        n.min(want as isize)
                    } else {
                        n
                    }
                }
                None => {
                    d.ok = false;
                    return Ok(Some((false, false)));
                }
            }
        } else {
            // Discarding: read into the staging buffer and drop.
            buf.clear();
            buf.reserve(RX_CHUNK);
            let want = (len - d.done).min(buf.capacity());
            // At most `want` ≤ capacity bytes into the empty vector's buffer.
            self.pull(&mut [libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: want }])
        };
        if n == 0 {
            return Err(());
        }
        if n < 0 {
            let e = Errno::last().0;
            if e == libc::EAGAIN || e == libc::EINTR {
                return Ok(None);
            }
            return Err(());
        }
        let want = len - d.done;
        d.done += n as usize;
        if d.done < len {
            return Ok(Some(((n as usize) == want, false)));
        }
        // SAFETY: recvmsg initialised `extra` ≤ BULK_READ bytes at the start of the empty
        // buffer.
        unsafe { buf.set_len(extra) };
        let emptied = d.ok && extra < BULK_READ;
        let Some(d) = direct.take() else { return Ok(Some((true, emptied))) };
        let me: Arc<dyn Link> = self.clone();
        responder::finish_direct(&d.qp, &me, &d.h, d.ok);
        Ok(Some((true, emptied)))
    }

    fn dispatch(self: &Arc<Self>, ctx: &Arc<Context>, h: &Header, payload: &[u8]) -> bool {
        let me: Arc<dyn Link> = self.clone();
        if !self.admits(h.op) {
            return false;
        }
        if h.op == Op::Hello && h.flags & F_DATAGRAMS != 0 {
            // Only streams of this namespace become datagram links (`ud_links`).
            if !self.unix {
                return false;
            }
            let _ = self.datagrams.set(local::datagram_source(h.aux));
            let _ = self.hello_qp.set(Weak::new());
            return true;
        }
        if h.op == Op::UdSend {
            // Admitted only on a datagram link; its source is what UDP would show.
            ud::on_datagram(ctx, h, payload, self.datagrams.get().copied());
            return true;
        }
        if h.op == Op::Hello {
            let qp = ctx.find_qp(h.dst_qpn);
            self.peer_qpn.store(h.src_qpn, Ordering::SeqCst);
            let _ = self.hello_qp.set(qp.as_ref().map(Arc::downgrade).unwrap_or_default());
            if let Some(qp) = qp {
                responder::on_hello(&qp, &me, h);
            }
            return true;
        }
        // Requests go to the local QP's responder, responses to its requester (which
        // accepts them only on its own `out` link).
        let local = self.local_qp();
        if h.op.is_response() {
            if let Some(qp) = local {
                requester::on_response(&qp, &me, h, payload);
            }
            return true;
        }
        if !h.op.is_request() {
            return false;
        }
        match local {
            Some(qp) if qp.qpn == h.dst_qpn => responder::on_request(&qp, &me, h, payload),
            _ => responder::nak_no_qp(&me, h),
        }
        true
    }
}

impl Link for TcpLink {
    fn send(&self, frame: Vec<u8>) {
        if self.dead.load(Ordering::SeqCst) {
            return;
        }
        let mut tx = lock(&self.tx);
        // Write now unless earlier bytes wait for room (EPOLLOUT then sends these too).
        // (A ring link has no EPOLLOUT to wait for: it writes whenever not corked.)
        let writable = tx.q.is_empty() || tx.held || self.ring.get().is_some();
        let class = Class::of(&frame);
        tx.push(frame, class);
        if !tx.connecting && !tx.corked && writable {
            if self.flush(&mut tx).is_err() {
                // The engine sees the broken socket and reports the link down.
                // SAFETY: shutting down our own socket.
                unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_RDWR) };
                return;
            }
            tx.held = false;
        }
        self.rearm(&mut tx);
    }

    fn send_parts(&self, parts: &[&[u8]]) {
        if self.dead.load(Ordering::SeqCst) {
            return;
        }
        let mut tx = lock(&self.tx);
        let mut took = 0;
        if !tx.connecting {
            match self.write_out(&mut tx, parts) {
                Ok((n, _)) => {
                    took = n;
                    tx.held = false;
                }
                Err(()) => {
                    // SAFETY: shutting down our own socket.
                    unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_RDWR) };
                    return;
                }
            }
        }
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if took < total {
            // Keep what the socket did not take (one copy of the rest only).
            let mut rest = Vec::with_capacity(total - took);
            let mut skip = took;
            for p in parts {
                if skip >= p.len() {
                    skip -= p.len();
                    continue;
                }
                rest.extend_from_slice(&p[skip..]);
                skip = 0;
            }
            tx.push(rest, parts.first().map_or(Class::Request, |h| Class::of(h)));
        }
        self.rearm(&mut tx);
    }

    fn backlog(&self) -> bool {
        let tx = lock(&self.tx);
        // Corked or held bytes are small responses: the next write takes them along.
        !tx.connecting && !tx.corked && !tx.held && !tx.q.is_empty()
    }

    fn peer_qpn(&self) -> Option<u32> {
        match self.peer_qpn.load(Ordering::SeqCst) {
            NO_PEER => None,
            q => Some(q),
        }
    }

    fn close(&self) {
        // Responses queued by a read pass still corked (the ACK of the message whose
        // completion made the application disconnect) leave before the FIN.
        {
            let mut tx = lock(&self.tx);
            if !tx.connecting && !self.is_dead() {
                let _ = self.flush(&mut tx);
            }
        }
        self.dead.store(true, Ordering::SeqCst);
        // SAFETY: shutting down our own socket; the engine then reports EOF and cleans up.
        unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_RDWR) };
    }

    fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    fn window(&self) -> Option<Arc<crate::core::window::Peer>> {
        if !self.unix {
            return None;
        }
        let w = self.window.get_or_init(|| crate::core::window::Peer::open(local::peer_pid(&self.fd)?).map(Arc::new));
        w.as_ref().filter(|p| !p.refused()).cloned()
    }

    fn listener(&self) -> Option<SocketAddr> {
        self.listener
    }

    fn congested(&self) -> bool {
        self.pause.load(Ordering::SeqCst) & PAUSE_OUT != 0
    }

    fn parked(&self, bytes: usize, park: bool) {
        let mut tx = lock(&self.tx);
        if park {
            tx.parked += 1;
            tx.parked_bytes += bytes;
        } else {
            tx.parked = tx.parked.saturating_sub(1);
            tx.parked_bytes = tx.parked_bytes.saturating_sub(bytes);
        }
        self.rearm(&mut tx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(op: Op) -> Vec<u8> {
        Header::new(op).frame(&[])
    }

    #[test]
    fn queued_responses_pause_with_hysteresis() {
        let mut tx = Tx::new(false);
        tx.push(frame(Op::Send), Class::of(&frame(Op::Send)));
        for _ in 0..OUT_RD_HIGH {
            tx.push(frame(Op::ReadResp), Class::of(&frame(Op::ReadResp)));
        }
        // Our own request does not count; as many READ responses as a requester may have
        // outstanding do not pause.
        assert_eq!((tx.resps, tx.rd_resps), (OUT_RD_HIGH, OUT_RD_HIGH));
        assert!(!tx.out_over());
        tx.push(frame(Op::AtomicResp), Class::of(&frame(Op::AtomicResp)));
        assert!(tx.out_over());
        tx.out_paused = true;
        tx.pop(); // the request
        while tx.rd_resps > OUT_RD_HIGH / 2 {
            assert!(tx.out_over(), "resumed at {} READ responses", tx.rd_resps);
            tx.pop();
        }
        assert!(!tx.out_over());
        tx.clear();
        assert_eq!((tx.resps, tx.rd_resps), (0, 0));
    }

    #[test]
    fn acks_and_parked_requests_pause_beyond_what_a_send_queue_holds() {
        let mut tx = Tx::new(false);
        for _ in 0..OUT_RESP_HIGH {
            tx.push(Vec::new(), Class::of(&frame(Op::Ack)));
        }
        assert!(!tx.out_over());
        tx.push(Vec::new(), Class::of(&frame(Op::Ack)));
        assert!(tx.out_over());
        tx.parked = PARK_MAX_REQS;
        tx.parked_bytes = PARK_MAX_BYTES;
        assert!(!tx.parked_over(), "one whole maximum message, or a full send queue, may park");
        tx.parked_bytes += 1;
        assert!(tx.parked_over());
        tx.parked_bytes = 0;
        tx.parked += 1;
        assert!(tx.parked_over());
    }
}
