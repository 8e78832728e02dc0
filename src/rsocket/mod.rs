//! rsockets (rsocket(7)): the socket API over RDMA that upstream librdmacm
//! exports as r* functions, wire-compatible with upstream's (see
//! shared/reference/rsocket.md). Built on this library's own rdma_* calls
//! (through their C ABI) and on libibverbs.
//!
//! An rsocket's number is a real fd: a stream rsocket's is the fd of the
//! private event channel of its synchronous rdma_cm_id, a datagram rsocket's
//! is its UDP socket. `table` maps numbers to rsockets; unknown numbers are
//! ordinary fds (rpoll/rselect/repoll accept both).
//!
//! Files: `stream` (life cycle, waits) over `conn` (data path, credits) and
//! `wire` (formats); `listen` and `keepalive` (service threads);
//! `iomap`; `dgram` (datagrams over UD QPs plus a UDP side channel);
//! `poll` (rpoll/rselect), `epoll` (repoll_*); `opts`, `config` (tunables).

pub mod cm;
pub mod config;
pub mod conn;
pub mod dgram;
pub mod epoll;
pub mod iomap;
pub mod iov;
pub mod keepalive;
pub mod listen;
pub mod opts;
pub mod poll;
pub mod stream;
pub mod verbs;
pub mod wire;

use crate::sys::{Errno, Result};
use dgram::Dgram;
use iov::{Gather, Scatter, Segs};
use std::sync::{Arc, RwLock};
use stream::Stream;

/// One rsocket.
#[derive(Clone)]
pub enum Sock {
    Stream(Arc<Stream>),
    Dgram(Arc<Dgram>),
}

impl Sock {
    pub fn same(&self, o: &Sock) -> bool {
        match (self, o) {
            (Sock::Stream(a), Sock::Stream(b)) => Arc::ptr_eq(a, b),
            (Sock::Dgram(a), Sock::Dgram(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// The rsockets by number. A number is an fd the library holds open, so numbers are
/// small and dense: a slot per fd, looked up on every call without hashing.
struct Table {
    slots: Vec<Option<Sock>>,
    live: usize,
}

static TABLE: RwLock<Table> = RwLock::new(Table { slots: Vec::new(), live: 0 });

fn table() -> std::sync::RwLockReadGuard<'static, Table> {
    TABLE.read().unwrap_or_else(|e| e.into_inner())
}

fn table_mut() -> std::sync::RwLockWriteGuard<'static, Table> {
    TABLE.write().unwrap_or_else(|e| e.into_inner())
}

/// The rsocket behind a number, if it is one.
pub fn get(fd: i32) -> Option<Sock> {
    let i = usize::try_from(fd).ok()?;
    table().slots.get(i)?.clone()
}

fn sock(fd: i32) -> Result<Sock> {
    get(fd).ok_or(Errno::EBADF)
}

fn insert(fd: i32, s: Sock) {
    let Ok(i) = usize::try_from(fd) else { return };
    let mut t = table_mut();
    if t.slots.len() <= i {
        t.slots.resize_with(i + 1, || None);
    }
    if t.slots[i].replace(s).is_none() {
        t.live += 1;
    }
}

fn remove(fd: i32) -> Option<Sock> {
    let i = usize::try_from(fd).ok()?;
    let mut t = table_mut();
    let s = t.slots.get_mut(i)?.take();
    if s.is_some() {
        t.live -= 1;
    }
    s
}

/// Whether the table has any rsocket (rpoll's fast path skips lookups when not).
pub fn any() -> bool {
    table().live > 0
}

pub fn socket(domain: i32, ty: i32, protocol: i32) -> Result<i32> {
    let flags = ty & (libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
    let kind = ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return Err(Errno(libc::EAFNOSUPPORT));
    }
    let s = match kind {
        libc::SOCK_STREAM => {
            if protocol != 0 && protocol != libc::IPPROTO_TCP {
                return Err(Errno(libc::EPROTONOSUPPORT));
            }
            if !cm::have_device() {
                return Err(Errno::ENODEV);
            }
            Sock::Stream(Stream::new(domain)?)
        }
        libc::SOCK_DGRAM => {
            if protocol != 0 && protocol != libc::IPPROTO_UDP {
                return Err(Errno(libc::EPROTONOSUPPORT));
            }
            Sock::Dgram(Dgram::new(domain)?)
        }
        _ => return Err(Errno(libc::ESOCKTNOSUPPORT)),
    };
    let fd = match &s {
        Sock::Stream(x) => {
            x.with_st(|st| {
                st.nonblock = flags & libc::SOCK_NONBLOCK != 0;
                st.cloexec = flags & libc::SOCK_CLOEXEC != 0;
            });
            x.fd
        }
        Sock::Dgram(x) => {
            x.set_flags(flags & libc::SOCK_NONBLOCK != 0, flags & libc::SOCK_CLOEXEC != 0);
            x.fd
        }
    };
    insert(fd, s);
    Ok(fd)
}

/// Checks a socket address argument: long enough for its family.
pub fn addr_arg(addr: &[u8]) -> Result<()> {
    if addr.len() < 2 {
        return Err(Errno::EINVAL);
    }
    let fam = u16::from_ne_bytes([addr[0], addr[1]]) as i32;
    let need = match fam {
        libc::AF_INET => std::mem::size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => std::mem::size_of::<libc::sockaddr_in6>(),
        _ => return Err(Errno(libc::EAFNOSUPPORT)),
    };
    if addr.len() < need {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

pub fn bind(fd: i32, addr: &[u8]) -> Result<()> {
    addr_arg(addr)?;
    match sock(fd)? {
        Sock::Stream(s) => s.bind(addr),
        Sock::Dgram(d) => d.bind(addr),
    }
}

pub fn listen(fd: i32, backlog: i32) -> Result<()> {
    match sock(fd)? {
        Sock::Stream(s) => s.listen(backlog),
        Sock::Dgram(_) => Err(Errno(libc::EOPNOTSUPP)),
    }
}

/// raccept: the new rsocket's number and the peer's address.
pub fn accept(fd: i32) -> Result<(i32, Vec<u8>)> {
    match sock(fd)? {
        Sock::Stream(s) => {
            let n = s.accept(false)?;
            let peer = n.name(true).unwrap_or_default();
            let nfd = n.fd;
            insert(nfd, Sock::Stream(n));
            Ok((nfd, peer))
        }
        Sock::Dgram(_) => Err(Errno(libc::EOPNOTSUPP)),
    }
}

pub fn connect(fd: i32, addr: &[u8]) -> Result<()> {
    addr_arg(addr)?;
    match sock(fd)? {
        Sock::Stream(s) => s.connect(addr),
        Sock::Dgram(d) => d.connect(addr),
    }
}

pub fn shutdown(fd: i32, how: i32) -> Result<()> {
    match sock(fd)? {
        Sock::Stream(s) => s.shutdown(how),
        Sock::Dgram(d) => d.shutdown(how),
    }
}

pub fn close(fd: i32) -> Result<()> {
    match remove(fd).ok_or(Errno::EBADF)? {
        Sock::Stream(s) => s.close(),
        Sock::Dgram(d) => d.close(),
    }
    epoll::forget(fd);
    Ok(())
}

/// A stream rsocket's call that needs no wait (`Stream::send_now`, `recv_now`),
/// made while the table's read lock is held instead of on a counted reference.
/// None: not a stream rsocket, or `f` declined; the general path decides.
#[inline]
fn on_stream_now<R>(fd: i32, f: impl FnOnce(&Stream) -> Option<R>) -> Option<R> {
    let t = table();
    match t.slots.get(usize::try_from(fd).ok()?)? {
        Some(Sock::Stream(s)) => f(s),
        _ => None,
    }
}

/// rsend/rwrite of one buffer: the common case at once, else `send`.
///
/// # Safety
/// `buf` is NULL or readable for `len` bytes.
#[inline]
pub unsafe fn send_one(fd: i32, buf: *const u8, len: usize, flags: i32) -> Result<usize> {
    if !buf.is_null() {
        // SAFETY: forwarded.
        if let Some(r) = on_stream_now(fd, |s| unsafe { s.send_now(buf, len) }) {
            return r;
        }
    }
    send(fd, Segs::One([iov::Seg { ptr: buf as *mut u8, len }]), flags, None)
}

/// rrecv/rread of one buffer: the common case at once, else `recv`.
///
/// # Safety
/// `buf` is NULL or writable for `len` bytes.
#[inline]
pub unsafe fn recv_one(fd: i32, buf: *mut u8, len: usize, flags: i32) -> Result<usize> {
    if !buf.is_null() {
        // SAFETY: forwarded.
        if let Some(r) = on_stream_now(fd, |s| unsafe { s.recv_now(buf, len, flags) }) {
            return r;
        }
    }
    recv(fd, Segs::One([iov::Seg { ptr: buf, len }]), flags).map(|r| r.0)
}

/// rsend/rsendto/rsendmsg/rwrite/rwritev.
pub fn send(fd: i32, segs: Segs, flags: i32, dest: Option<&[u8]>) -> Result<usize> {
    let mut g = Gather::new(segs);
    match sock(fd)? {
        Sock::Stream(s) => s.send(&mut g, flags),
        Sock::Dgram(d) => d.send(&mut g, flags, dest),
    }
}

/// rrecv/rrecvfrom/rrecvmsg/rread/rreadv: bytes and, for datagrams, the source.
pub fn recv(fd: i32, segs: Segs, flags: i32) -> Result<(usize, Option<Vec<u8>>)> {
    let mut sc = Scatter::new(segs);
    match sock(fd)? {
        Sock::Stream(s) => Ok((s.recv(&mut sc, flags)?, None)),
        Sock::Dgram(d) => d.recv(&mut sc, flags),
    }
}

pub fn name(fd: i32, peer: bool) -> Result<Vec<u8>> {
    match sock(fd)? {
        Sock::Stream(s) => s.name(peer),
        Sock::Dgram(d) => d.name(peer),
    }
}

pub fn setsockopt(fd: i32, level: i32, optname: i32, val: &[u8]) -> Result<()> {
    match sock(fd)? {
        Sock::Stream(s) => {
            let ka = s.with_st(|st| {
                if st.phase == stream::Phase::Closed {
                    return Err(Errno::EBADF);
                }
                opts::set_stream(st, level, optname, val)
            })?;
            match ka {
                Some(true) => keepalive::register(&s),
                Some(false) => keepalive::unregister(&s),
                None => {}
            }
            Ok(())
        }
        Sock::Dgram(d) => d.setsockopt(level, optname, val),
    }
}

pub fn getsockopt(fd: i32, level: i32, optname: i32) -> Result<Vec<u8>> {
    match sock(fd)? {
        Sock::Stream(s) => {
            let domain = s.domain;
            s.with_st(|st| opts::get_stream(st, domain, level, optname))
        }
        Sock::Dgram(d) => d.getsockopt(level, optname),
    }
}

pub fn fcntl(fd: i32, cmd: i32, arg: i64) -> Result<i32> {
    match sock(fd)? {
        Sock::Stream(s) => s.with_st(|st| {
            let (mut nb, mut ce) = (st.nonblock, st.cloexec);
            let r = opts::fcntl(&mut nb, &mut ce, cmd, arg);
            st.nonblock = nb;
            st.cloexec = ce;
            r
        }),
        Sock::Dgram(d) => d.fcntl(cmd, arg),
    }
}

fn stream_of(fd: i32) -> Result<Arc<Stream>> {
    match sock(fd)? {
        Sock::Stream(s) => Ok(s),
        Sock::Dgram(_) => Err(Errno(libc::EOPNOTSUPP)),
    }
}

pub fn riomap(fd: i32, buf: *mut u8, len: usize, prot: i32, flags: i32, offset: i64) -> Result<i64> {
    stream_of(fd)?.riomap(buf, len, prot, flags, offset)
}

pub fn riounmap(fd: i32, buf: *mut u8, len: usize) -> Result<()> {
    stream_of(fd)?.riounmap(buf, len)
}

pub fn riowrite(fd: i32, segs: Segs, offset: i64, flags: i32) -> Result<usize> {
    let mut g = Gather::new(segs);
    stream_of(fd)?.riowrite(&mut g, offset, flags)
}
