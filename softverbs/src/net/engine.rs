//! The TCP/UDP transport: per context one TCP listener and one UDP socket on the same port
//! (dual-stack `[::]` when IPv6 exists, else `0.0.0.0`), and one progress thread that
//! waits in `epoll_wait` (no timeout while idle; 5 ms ticks only while an RC request waits
//! for a receive with a finite RNR budget).
//!
//! RC: each requester QP opens its own TCP connection to the responder's context
//! (lazily, on its first transmission) and sends `Hello` first; the responder answers each
//! request on that same connection. So every QP pair uses up to two connections, one per
//! direction of requests, and nobody has to agree on who connects. Writes never block:
//! what the socket does not take is queued and flushed on `EPOLLOUT`.
//!
//! Every received frame goes through `frame::decode` first; a malformed frame is counted
//! and dropped (and a stream that carried one is closed, since it cannot be re-synchronised).

use super::addr::{from_raw, to_storage};
use super::frame::{decode, DecodeError, Op, HDR_LEN};
use super::{Link, Transport};
use crate::core::context::Context;
use crate::core::registry::lock;
use crate::qp::{requester, responder, ud, Qp};
use crate::sys::{cerr, owned, Errno, Result};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

const T_WAKE: u64 = 1;
const T_LISTEN: u64 = 2;
const T_UDP: u64 = 3;
const T_FIRST_CONN: u64 = 16;

pub struct Engine {
    port: u16,
    epfd: Arc<OwnedFd>,
    wake: OwnedFd,
    listener: OwnedFd,
    udp: OwnedFd,
    v6: bool,
    conns: Mutex<HashMap<u64, Arc<TcpLink>>>,
    next_token: AtomicU64,
    stopping: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
    malformed: AtomicU64,
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
        // SAFETY: sockaddr_storage is plain data.
        let mut got: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut glen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: got/glen are live and sized.
        cerr(unsafe { libc::getsockname(tcp.as_raw_fd(), &mut got as *mut _ as *mut libc::sockaddr, &mut glen) })?;
        // SAFETY: getsockname filled glen bytes of got.
        let port = unsafe { from_raw(&got as *const _ as *const libc::sockaddr, glen) }.map(|a| a.port()).ok_or(Errno::EIO)?;
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
        let eng = Arc::new(Engine {
            port,
            epfd,
            wake,
            listener,
            udp,
            v6,
            conns: Mutex::new(HashMap::new()),
            next_token: AtomicU64::new(T_FIRST_CONN),
            stopping: AtomicBool::new(false),
            thread: Mutex::new(None),
            malformed: AtomicU64::new(0),
        });
        let weak_ctx = Arc::downgrade(ctx);
        let e2 = eng.clone();
        let h = std::thread::Builder::new()
            .name("softverbs".into())
            .spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| e2.run(&weak_ctx)));
                if r.is_err() {
                    eprintln!("libibverbs (softverbs): progress thread failed; the context stops moving data");
                }
            })
            .map_err(|_| Errno::ENOMEM)?;
        *lock(&eng.thread) = Some(h);
        Ok(eng)
    }

    fn register(&self, fd: OwnedFd, role: Role, connecting: bool) -> Result<Arc<TcpLink>> {
        let token = self.next_token.fetch_add(1, Ordering::SeqCst);
        setopt(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_NODELAY, 1);
        let link = Arc::new(TcpLink {
            fd,
            token,
            epfd: self.epfd.clone(),
            role,
            tx: Mutex::new(Tx { q: VecDeque::new(), off: 0, connecting, want_out: connecting }),
            rx: Mutex::new(Rx { buf: Vec::new(), start: 0, bound: None }),
            dead: AtomicBool::new(false),
        });
        lock(&self.conns).insert(token, link.clone());
        let mut ev = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
        if connecting {
            ev |= libc::EPOLLOUT as u32;
        }
        if let Err(e) = epoll_add(self.epfd.as_raw_fd(), link.fd.as_raw_fd(), ev, token) {
            lock(&self.conns).remove(&token);
            return Err(e);
        }
        Ok(link)
    }

    fn run(self: &Arc<Self>, ctx: &Weak<Context>) {
        let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 64];
        let mut dgram = vec![0u8; 65536];
        while !self.stopping.load(Ordering::SeqCst) {
            let ticking = ctx.upgrade().map(|c| c.rnr_timers.load(Ordering::SeqCst) > 0).unwrap_or(false);
            let timeout = if ticking { 5 } else { -1 };
            // SAFETY: events is a live buffer of 64 entries.
            let n = unsafe { libc::epoll_wait(self.epfd.as_raw_fd(), events.as_mut_ptr(), 64, timeout) };
            if n < 0 {
                if Errno::last().0 == libc::EINTR {
                    continue;
                }
                break;
            }
            let Some(c) = ctx.upgrade() else { break };
            for ev in events.iter().take(n as usize) {
                let (flags, token) = (ev.events, ev.u64);
                match token {
                    T_WAKE => {
                        let mut v = 0u64;
                        // SAFETY: reads 8 bytes into a live u64 from our nonblocking eventfd.
                        unsafe { libc::read(self.wake.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
                    }
                    T_LISTEN => self.accept_all(),
                    T_UDP => self.recv_datagrams(&c, &mut dgram),
                    t => {
                        let link = lock(&self.conns).get(&t).cloned();
                        if let Some(l) = link {
                            self.on_conn_event(&c, &l, flags);
                        }
                    }
                }
            }
            if ticking {
                responder::tick(&c);
            }
        }
    }

    fn accept_all(&self) {
        loop {
            // SAFETY: accept4 on our listener; peer address not needed.
            let fd = unsafe {
                libc::accept4(self.listener.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut(), libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
            };
            let Ok(fd) = owned(fd) else { return };
            let _ = self.register(fd, Role::Inbound, false);
        }
    }

    fn recv_datagrams(&self, ctx: &Arc<Context>, buf: &mut [u8]) {
        loop {
            // SAFETY: sockaddr_storage is plain data.
            let mut from: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            let mut flen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            // SAFETY: buf and from are live and sized as passed.
            let n = unsafe {
                libc::recvfrom(self.udp.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT, &mut from as *mut _ as *mut libc::sockaddr, &mut flen)
            };
            if n < 0 {
                return;
            }
            let data = &buf[..n as usize];
            match decode(data) {
                Ok((h, total)) if total == data.len() && h.op == Op::UdSend => {
                    // SAFETY: recvfrom filled flen bytes of from.
                    let src = unsafe { from_raw(&from as *const _ as *const libc::sockaddr, flen) };
                    ud::on_datagram(ctx, &h, &data[HDR_LEN..total], src);
                }
                _ => {
                    self.malformed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    fn on_conn_event(&self, ctx: &Arc<Context>, link: &Arc<TcpLink>, flags: u32) {
        let mut down = false;
        if flags & libc::EPOLLOUT as u32 != 0 && link.on_writable().is_err() {
            down = true;
        }
        if !down && flags & (libc::EPOLLIN | libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLRDHUP) as u32 != 0 {
            match link.read_frames(ctx) {
                Ok(()) => {}
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
        }
    }

    fn link_down(&self, link: &Arc<TcpLink>) {
        lock(&self.conns).remove(&link.token);
        // SAFETY: deregistering our own fd; a null event is allowed for DEL.
        unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_DEL, link.fd.as_raw_fd(), std::ptr::null_mut()) };
        link.dead.store(true, Ordering::SeqCst);
        let as_dyn: Arc<dyn Link> = link.clone();
        match &link.role {
            Role::Outbound(q) => {
                if let Some(qp) = q.upgrade() {
                    requester::on_link_down(&qp, &as_dyn);
                }
            }
            Role::Inbound => {
                let bound = lock(&link.rx).bound.clone();
                if let Some(qp) = bound.and_then(|w| w.upgrade()) {
                    responder::on_link_down(&qp, &as_dyn);
                }
            }
        }
    }
}

impl Transport for Engine {
    fn port(&self) -> u16 {
        self.port
    }

    fn connect(&self, addr: SocketAddr, owner: Weak<Qp>) -> Result<Arc<dyn Link>> {
        let fam = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
        // SAFETY: plain socket syscall; checked by `owned`.
        let fd = owned(unsafe { libc::socket(fam, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) })?;
        let (ss, len) = to_storage(&addr, fam == libc::AF_INET6).ok_or(Errno::EAFNOSUPPORT)?;
        // SAFETY: ss holds a valid sockaddr of len bytes.
        let r = unsafe { libc::connect(fd.as_raw_fd(), &ss as *const _ as *const libc::sockaddr, len) };
        if r < 0 && Errno::last().0 != libc::EINPROGRESS {
            return Err(Errno::last());
        }
        let link = self.register(fd, Role::Outbound(owner), true)?;
        Ok(link)
    }

    fn send_datagram(&self, addr: SocketAddr, frame: &[u8]) -> Result<()> {
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
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
        let h = lock(&self.thread).take();
        if let Some(h) = h {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
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
}

enum Role {
    /// We connected: our QP's requests go out, responses come back.
    Outbound(Weak<Qp>),
    /// We accepted: requests come in for the QP named by the `Hello`.
    Inbound,
}

struct Tx {
    q: VecDeque<Vec<u8>>,
    off: usize,
    connecting: bool,
    want_out: bool,
}

struct Rx {
    buf: Vec<u8>,
    start: usize,
    bound: Option<Weak<Qp>>,
}

pub struct TcpLink {
    fd: OwnedFd,
    token: u64,
    epfd: Arc<OwnedFd>,
    role: Role,
    tx: Mutex<Tx>,
    rx: Mutex<Rx>,
    dead: AtomicBool,
}

impl TcpLink {
    fn events(&self, out: bool) {
        let mut ev = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
        if out {
            ev |= libc::EPOLLOUT as u32;
        }
        epoll_mod(self.epfd.as_raw_fd(), self.fd.as_raw_fd(), ev, self.token);
    }

    /// Writes queued frames until the socket is full. Err on a broken socket.
    fn flush(&self, tx: &mut Tx) -> std::result::Result<(), ()> {
        while let Some(front) = tx.q.front() {
            let rest = &front[tx.off..];
            // SAFETY: rest is a live slice; MSG_NOSIGNAL avoids SIGPIPE.
            let n = unsafe { libc::send(self.fd.as_raw_fd(), rest.as_ptr().cast(), rest.len(), libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
            if n < 0 {
                let e = Errno::last().0;
                if e == libc::EAGAIN || e == libc::EINTR {
                    return Ok(());
                }
                tx.q.clear();
                tx.off = 0;
                return Err(());
            }
            tx.off += n as usize;
            if tx.off == front.len() {
                tx.q.pop_front();
                tx.off = 0;
            }
        }
        Ok(())
    }

    fn on_writable(&self) -> std::result::Result<(), ()> {
        let mut tx = lock(&self.tx);
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
        self.flush(&mut tx)?;
        if tx.q.is_empty() && tx.want_out {
            tx.want_out = false;
            self.events(false);
        }
        Ok(())
    }

    /// Reads what is available and dispatches every complete frame. Err(malformed?) when
    /// the stream must be closed.
    fn read_frames(self: &Arc<Self>, ctx: &Arc<Context>) -> std::result::Result<(), bool> {
        let mut rx = lock(&self.rx);
        let mut eof = false;
        loop {
            let mut chunk = [0u8; 65536];
            // SAFETY: chunk is a live buffer of its length.
            let n = unsafe { libc::recv(self.fd.as_raw_fd(), chunk.as_mut_ptr().cast(), chunk.len(), libc::MSG_DONTWAIT) };
            if n == 0 {
                eof = true;
                break;
            }
            if n < 0 {
                let e = Errno::last().0;
                if e == libc::EAGAIN || e == libc::EINTR {
                    break;
                }
                return Err(false);
            }
            rx.buf.extend_from_slice(&chunk[..n as usize]);
            if (n as usize) < chunk.len() {
                break;
            }
        }
        loop {
            let start = rx.start;
            match decode(&rx.buf[start..]) {
                Ok((h, total)) => {
                    let payload = rx.buf[start + HDR_LEN..start + total].to_vec();
                    rx.start += total;
                    if !self.dispatch(ctx, &mut rx, &h, payload) {
                        return Err(true);
                    }
                }
                Err(DecodeError::Incomplete(_)) => break,
                Err(DecodeError::Malformed(_)) => return Err(true),
            }
        }
        if rx.start > 0 {
            let s = rx.start;
            rx.buf.drain(..s);
            rx.start = 0;
        }
        if eof {
            return Err(false);
        }
        Ok(())
    }

    fn dispatch(self: &Arc<Self>, ctx: &Arc<Context>, rx: &mut Rx, h: &super::frame::Header, payload: Vec<u8>) -> bool {
        let me: Arc<dyn Link> = self.clone();
        match &self.role {
            Role::Outbound(q) => {
                if !h.op.is_response() {
                    return false;
                }
                if let Some(qp) = q.upgrade() {
                    requester::on_response(&qp, &me, h, payload);
                }
                true
            }
            Role::Inbound => {
                if h.op == Op::Hello {
                    if rx.bound.is_some() {
                        return false;
                    }
                    let qp = ctx.find_qp(h.dst_qpn);
                    rx.bound = Some(qp.as_ref().map(Arc::downgrade).unwrap_or_default());
                    if let Some(qp) = qp {
                        responder::on_hello(&qp, &me, h);
                    }
                    return true;
                }
                if !h.op.is_request() {
                    return false;
                }
                let Some(bound) = rx.bound.clone() else { return false };
                match bound.upgrade() {
                    Some(qp) if qp.qpn == h.dst_qpn => responder::on_request(&qp, &me, h, payload),
                    _ => responder::nak_no_qp(&me, h),
                }
                true
            }
        }
    }
}

impl Link for TcpLink {
    fn send(&self, frame: Vec<u8>) {
        if self.dead.load(Ordering::SeqCst) {
            return;
        }
        let mut tx = lock(&self.tx);
        tx.q.push_back(frame);
        if !tx.connecting && tx.q.len() == 1 && self.flush(&mut tx).is_err() {
            // The engine sees the broken socket and reports the link down.
            // SAFETY: shutting down our own socket.
            unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_RDWR) };
            return;
        }
        if !tx.q.is_empty() && !tx.want_out {
            tx.want_out = true;
            self.events(true);
        }
    }

    fn close(&self) {
        self.dead.store(true, Ordering::SeqCst);
        // SAFETY: shutting down our own socket; the engine then reports EOF and cleans up.
        unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_RDWR) };
    }

    fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }
}
