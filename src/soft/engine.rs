//! The soft CM's progress thread: one epoll loop per process over every CM
//! socket (listeners, connections, SIDR datagram sockets), plus timers. It is
//! started on first use, and idles in epoll_wait when nothing happens.

use super::wire::{self, Msg};
use super::SoftId;
use crate::cm::registry::lock;
use crate::sys::{cerr, Result};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// Who handles what arrives on a connection.
#[derive(Clone)]
pub enum Owner {
    /// Accepted by a listener; the first message (a REQ) makes a new id.
    Listener(Weak<SoftId>),
    Id(Weak<SoftId>),
    Closed,
}

/// One CM connection (TCP, blocking writes of small frames).
pub struct Conn {
    pub token: u64,
    pub sock: TcpStream,
    rbuf: Mutex<Vec<u8>>,
    pub owner: Mutex<Owner>,
}

impl Conn {
    pub fn send(&self, m: &Msg) -> Result<()> {
        (&self.sock).write_all(&wire::encode(m))?;
        Ok(())
    }
    pub fn set_owner(&self, o: Owner) {
        *lock(&self.owner) = o;
    }
    pub fn peer(&self) -> Option<SocketAddr> {
        self.sock.peer_addr().ok()
    }
}

#[derive(Clone)]
enum Src {
    Listener(Arc<TcpListener>, Weak<SoftId>),
    Conn(Arc<Conn>),
    Udp(Arc<UdpSocket>, Weak<SoftId>),
    /// softverbs' MAD queue (ibcm): readable while MADs wait.
    Mad(i32),
}

type TimerFn = Box<dyn FnOnce() + Send>;

pub struct Engine {
    ep: crate::sys::Epoll,
    next: AtomicU64,
    srcs: Mutex<HashMap<u64, Src>>,
    timers: Mutex<Vec<(Instant, TimerFn)>>,
    wake: crate::sys::Flag,
}

static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();

/// The engine, started on first use.
pub fn get() -> &'static Arc<Engine> {
    ENGINE.get_or_init(|| {
        let e = Arc::new(Engine {
            ep: crate::sys::Epoll::new().expect("epoll_create1"),
            next: AtomicU64::new(1),
            srcs: Mutex::new(HashMap::new()),
            timers: Mutex::new(Vec::new()),
            wake: crate::sys::Flag::new().expect("eventfd"),
        });
        e.add_fd(e.wake.raw(), 0);
        let run = e.clone();
        common::thread::spawn("rdmacm-soft", move || run.run()).expect("spawn rdmacm-soft thread");
        e
    })
}

impl Engine {
    fn add_fd(&self, fd: i32, token: u64) {
        let _ = self.ep.ctl(libc::EPOLL_CTL_ADD, fd, token);
    }

    fn token(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    pub fn add_listener(&self, l: TcpListener, owner: &Arc<SoftId>) -> u64 {
        let t = self.token();
        let fd = l.as_raw_fd();
        lock(&self.srcs).insert(t, Src::Listener(Arc::new(l), Arc::downgrade(owner)));
        self.add_fd(fd, t);
        t
    }

    pub fn add_udp(&self, u: UdpSocket, owner: &Arc<SoftId>) -> (u64, Arc<UdpSocket>) {
        let t = self.token();
        let u = Arc::new(u);
        lock(&self.srcs).insert(t, Src::Udp(u.clone(), Arc::downgrade(owner)));
        self.add_fd(u.as_raw_fd(), t);
        (t, u)
    }

    pub fn add_conn(&self, sock: TcpStream, owner: Owner) -> Arc<Conn> {
        let _ = sock.set_nodelay(true);
        keepalive(&sock);
        let t = self.token();
        let c = Arc::new(Conn { token: t, sock, rbuf: Mutex::new(Vec::new()), owner: Mutex::new(owner) });
        lock(&self.srcs).insert(t, Src::Conn(c.clone()));
        self.add_fd(c.sock.as_raw_fd(), t);
        c
    }

    /// Watches softverbs' MAD queue (its fd stays softverbs').
    pub fn add_mad_fd(&self, fd: i32) {
        let t = self.token();
        lock(&self.srcs).insert(t, Src::Mad(fd));
        self.add_fd(fd, t);
    }

    /// Every id with a TCP listener or a UDP socket (an IB CM REQ or SIDR REQ looks its
    /// listener up here).
    pub fn listeners(&self) -> Vec<Weak<SoftId>> {
        lock(&self.srcs)
            .values()
            .filter_map(|s| match s {
                Src::Listener(_, w) | Src::Udp(_, w) => Some(w.clone()),
                _ => None,
            })
            .collect()
    }

    /// Stops watching a source and closes it (its last reference goes).
    pub fn remove(&self, token: u64) {
        if let Some(s) = lock(&self.srcs).remove(&token) {
            let fd = match &s {
                Src::Listener(l, _) => l.as_raw_fd(),
                Src::Conn(c) => {
                    c.set_owner(Owner::Closed);
                    let _ = c.sock.shutdown(std::net::Shutdown::Both);
                    c.sock.as_raw_fd()
                }
                Src::Udp(u, _) => u.as_raw_fd(),
                Src::Mad(fd) => *fd,
            };
            let _ = self.ep.ctl(libc::EPOLL_CTL_DEL, fd, 0);
        }
    }

    pub fn after(&self, d: Duration, f: impl FnOnce() + Send + 'static) {
        lock(&self.timers).push((Instant::now() + d, Box::new(f)));
        self.wake.raise();
    }

    fn next_timeout(&self) -> i32 {
        let t = lock(&self.timers);
        match t.iter().map(|(at, _)| *at).min() {
            None => -1,
            Some(at) => at.saturating_duration_since(Instant::now()).as_millis().min(60_000) as i32 + 1,
        }
    }

    fn run_timers(&self) {
        let now = Instant::now();
        let due: Vec<TimerFn> = {
            let mut t = lock(&self.timers);
            let (due, keep): (Vec<_>, Vec<_>) = t.drain(..).partition(|(at, _)| *at <= now);
            *t = keep;
            due.into_iter().map(|(_, f)| f).collect()
        };
        for f in due {
            f();
        }
    }

    fn run(self: Arc<Self>) {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
        loop {
            let timeout = self.next_timeout();
            // SAFETY: evs has room for 64 events.
            let n = unsafe { libc::epoll_wait(self.ep.raw(), evs.as_mut_ptr(), 64, timeout) };
            if cerr(n).is_err() {
                continue; // EINTR
            }
            for ev in &evs[..n as usize] {
                let token = ev.u64;
                if token == 0 {
                    self.wake.lower();
                    continue;
                }
                let src = lock(&self.srcs).get(&token).cloned();
                // A handler must never take the engine down with it.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match src {
                    Some(Src::Listener(l, owner)) => self.on_accept(&l, &owner),
                    Some(Src::Conn(c)) => self.on_readable(&c),
                    Some(Src::Udp(u, owner)) => self.on_datagram(&u, &owner),
                    Some(Src::Mad(_)) => super::ibcm::on_mads(),
                    None => {}
                }));
            }
            self.run_timers();
        }
    }

    fn on_accept(&self, l: &TcpListener, owner: &Weak<SoftId>) {
        if let Ok((s, _)) = l.accept() {
            self.add_conn(s, Owner::Listener(owner.clone()));
        }
    }

    fn on_readable(&self, c: &Arc<Conn>) {
        let mut tmp = [0u8; 4096];
        let n = match (&c.sock).read(&mut tmp) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return,
            Err(_) => 0,
        };
        let owner = lock(&c.owner).clone();
        if n == 0 {
            self.remove(c.token);
            if let Owner::Id(w) = owner {
                if let Some(id) = w.upgrade() {
                    super::conn::on_eof(&id, c);
                }
            }
            return;
        }
        let (msgs, bad) = {
            let mut buf = lock(&c.rbuf);
            buf.extend_from_slice(&tmp[..n]);
            let mut msgs = Vec::new();
            let mut bad = false;
            loop {
                match wire::decode(&buf) {
                    Ok((m, used)) => {
                        buf.drain(..used);
                        msgs.push(m);
                    }
                    Err(wire::Error::Short) => break,
                    Err(wire::Error::Malformed(_)) => {
                        buf.clear();
                        bad = true;
                        break;
                    }
                }
            }
            (msgs, bad)
        };
        for m in msgs {
            let owner = lock(&c.owner).clone();
            match owner {
                Owner::Listener(w) => match w.upgrade() {
                    Some(l) => super::conn::on_request(&l, c, m),
                    // The listener is gone: nobody serves that port any more.
                    None => super::conn::reject_request(c, super::conn::REJ_INVALID_SERVICE_ID),
                },
                Owner::Id(w) => {
                    if let Some(id) = w.upgrade() {
                        super::conn::on_msg(&id, m);
                    }
                }
                Owner::Closed => {}
            }
        }
        if bad {
            // A peer that speaks garbage is treated as gone.
            let owner = lock(&c.owner).clone();
            self.remove(c.token);
            if let Owner::Id(w) = owner {
                if let Some(id) = w.upgrade() {
                    super::conn::on_eof(&id, c);
                }
            }
        }
    }

    fn on_datagram(&self, u: &UdpSocket, owner: &Weak<SoftId>) {
        let mut buf = [0u8; 2048];
        let (n, from) = match u.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e) => {
                if e.kind() == std::io::ErrorKind::ConnectionRefused {
                    if let Some(id) = owner.upgrade() {
                        super::sidr::on_refused(&id);
                    }
                }
                return;
            }
        };
        let Ok((m, used)) = wire::decode(&buf[..n]) else { return };
        if used != n {
            return;
        }
        if let Some(id) = owner.upgrade() {
            super::sidr::on_datagram(&id, u, m, from);
        }
    }
}

/// TCP keepalive on a CM connection: a peer whose host vanished (no FIN, no
/// RST: power off, a deleted namespace) is noticed as a closed connection
/// after about 25 s of silence, whatever the phase (a REQ nobody answers, an
/// idle connection), instead of never. Probes cost nothing while the peer lives.
fn keepalive(sock: &TcpStream) {
    let fd = sock.as_raw_fd();
    for (level, name, val) in [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 10),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 5),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3),
    ] {
        // SAFETY: setsockopt with a live int on a socket we own.
        unsafe { libc::setsockopt(fd, level, name, (&val as *const libc::c_int).cast(), std::mem::size_of::<libc::c_int>() as libc::socklen_t) };
    }
}
