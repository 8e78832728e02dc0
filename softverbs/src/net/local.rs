//! Same-host links: a stream to a context of this network namespace goes over an AF_UNIX
//! socket instead of loopback TCP. The frames are the same; the kernel's work per byte is
//! not: on the development VM a unix stream moves 64 KiB writes about three times as fast
//! as loopback TCP, and on loopback the sockets' work is most of what an RDMA transfer
//! costs.
//!
//! Each context binds, beside its TCP listener on port P, the abstract unix name
//! `softverbs.P`. Abstract names are scoped by network namespace, as TCP ports are, and P
//! is bound on the wildcard address, so whoever accepts TCP connections to a local
//! address on P in this namespace is the context holding that name. A context that cannot
//! bind the name (taken by someone else) still accepts TCP; a connect that finds no name,
//! a full backlog, or a name bound by another user (`same_user`) falls back to TCP.
//! `SOFTVERBS_LOCAL=0` turns the unix path off (both listening and connecting).

use super::ring::Rings;
use crate::sys::{cerr, owned};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::OnceLock;

/// The unix path is on (`SOFTVERBS_LOCAL` is not "0").
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("SOFTVERBS_LOCAL").map(|v| v.trim() != "0").unwrap_or(true))
}

/// The abstract address of the context on `port`.
fn name(port: u16) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: sockaddr_un is plain data.
    let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let text = format!("softverbs.{port}");
    // sun_path[0] stays 0: the abstract namespace.
    for (d, s) in sa.sun_path[1..].iter_mut().zip(text.bytes()) {
        *d = s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + text.len();
    (sa, len as libc::socklen_t)
}

fn stream_socket() -> Option<OwnedFd> {
    // SAFETY: plain socket syscall; checked by `owned`.
    owned(unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) }).ok()
}

/// The listener of the context on `port`, if the name is free.
pub fn listen(port: u16) -> Option<OwnedFd> {
    if !enabled() {
        return None;
    }
    let fd = stream_socket()?;
    let (sa, len) = name(port);
    // SAFETY: sa holds a valid sockaddr_un of len bytes.
    cerr(unsafe { libc::bind(fd.as_raw_fd(), &sa as *const _ as *const libc::sockaddr, len) }).ok()?;
    // SAFETY: listen on our own socket.
    cerr(unsafe { libc::listen(fd.as_raw_fd(), 128) }).ok()?;
    Some(fd)
}

/// `ip` is an address of this network namespace: loopback, or one a socket can bind.
pub fn is_local(ip: IpAddr) -> bool {
    let ip = ip.to_canonical();
    if ip.is_loopback() {
        return true;
    }
    let fam = if ip.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: plain socket syscall; checked by `owned`.
    let Ok(fd) = owned(unsafe { libc::socket(fam, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) }) else { return false };
    let Some((ss, len)) = super::addr::to_storage(&SocketAddr::new(ip, 0), !ip.is_ipv4()) else { return false };
    // SAFETY: ss holds a valid sockaddr of len bytes.
    unsafe { libc::bind(fd.as_raw_fd(), &ss as *const _ as *const libc::sockaddr, len) == 0 }
}

/// A connected (or connecting) unix stream to the context listening on `addr`, when that
/// is a context of this namespace that has the name.
pub fn connect(addr: &SocketAddr) -> Option<OwnedFd> {
    if !enabled() || !is_local(addr.ip()) {
        return None;
    }
    let fd = stream_socket()?;
    let (sa, len) = name(addr.port());
    // SAFETY: sa holds a valid sockaddr_un of len bytes.
    let r = unsafe { libc::connect(fd.as_raw_fd(), &sa as *const _ as *const libc::sockaddr, len) };
    // A unix connect completes at once or fails (EAGAIN: backlog full; ECONNREFUSED:
    // no such name): TCP then.
    (r == 0 && same_user(&fd)).then_some(fd)
}

/// The listener at the other end runs as our user. Anyone may bind an abstract name,
/// while only the context itself holds its TCP port: a name another user bound first
/// must not receive what we meant for that context (we use TCP then, which reaches it).
/// Our own user could read our memory anyway.
fn same_user(fd: &OwnedFd) -> bool {
    // SAFETY: geteuid has no preconditions.
    peer_cred(fd).is_some_and(|c| c.uid == unsafe { libc::geteuid() })
}

fn peer_cred(fd: &OwnedFd) -> Option<libc::ucred> {
    let mut cred = libc::ucred { pid: 0, uid: u32::MAX, gid: u32::MAX };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred/len are live and sized; SO_PEERCRED fills a ucred.
    let r = unsafe { libc::getsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, (&mut cred as *mut libc::ucred).cast(), &mut len) };
    (r == 0).then_some(cred)
}

/// The process at the other end of a unix stream, if it runs as our user (0 or None:
/// not visible from our PID namespace).
pub fn peer_pid(fd: &OwnedFd) -> Option<u32> {
    // SAFETY: geteuid has no preconditions.
    peer_cred(fd).filter(|c| c.uid == unsafe { libc::geteuid() } && c.pid > 0).map(|c| c.pid as u32)
}

/// The listening endpoint both ends of a unix stream record (`Link::listener`): the
/// accepting context's port. Ports of one namespace's contexts differ, so two QPs
/// comparing their streams' endpoints agree on the order, as with TCP.
pub fn endpoint(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port)
}

/// Where datagrams that came over a datagram link from the context on `port` would have
/// come from by UDP: that context's socket, as a reply would reach it. A port out of
/// range (the frame's 64-bit field) names nobody.
pub fn datagram_source(port: u64) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), u16::try_from(port).unwrap_or(0))
}

/// The connector's first byte on a unix stream: 1 with a memfd of byte rings
/// (`ring::Rings`) passed along, through which both sides then send their frames, or 0
/// (the frames follow on the socket). Returns our side of the rings.
pub fn offer_rings(fd: &OwnedFd) -> crate::sys::Result<Option<Rings>> {
    let made = if crate::core::window::enabled() { Rings::create() } else { None };
    let mode = [made.is_some() as u8];
    let mut iov = libc::iovec { iov_base: mode.as_ptr() as *mut libc::c_void, iov_len: 1 };
    let mut cbuf = [0u64; 4];
    // SAFETY: msghdr is plain data.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some((_, memfd)) = &made {
        // SAFETY: CMSG_SPACE/CMSG_FIRSTHDR/CMSG_DATA address the live, aligned control
        // buffer, which is large enough for one descriptor.
        unsafe {
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(4) as _;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(4) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<i32>(), memfd.as_raw_fd());
        }
    }
    // SAFETY: msg points at live buffers; a fresh unix stream takes one byte at once.
    if unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) } != 1 {
        return Err(crate::sys::Errno::last());
    }
    Ok(made.map(|(r, _)| r))
}

/// What the acceptor's first read of a unix stream found.
pub enum Offer {
    /// Frames follow on the socket.
    Socket,
    /// Frames come through these rings.
    Rings(Rings),
    /// Nothing yet.
    Again,
    /// EOF or a broken stream.
    Gone,
}

/// Reads the connector's first byte (and the memfd passed with it).
pub fn take_offer(fd: &OwnedFd) -> Offer {
    let mut mode = [0u8; 1];
    let mut iov = libc::iovec { iov_base: mode.as_mut_ptr().cast(), iov_len: 1 };
    let mut cbuf = [0u64; 8];
    // SAFETY: msghdr is plain data.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
    // SAFETY: msg points at live buffers of the sizes it names.
    let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        let e = crate::sys::Errno::last().0;
        return if e == libc::EAGAIN || e == libc::EINTR { Offer::Again } else { Offer::Gone };
    }
    if n == 0 {
        return Offer::Gone;
    }
    let mut got: Option<OwnedFd> = None;
    // SAFETY: walks the control messages recvmsg filled in, inside cbuf.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let raw = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<i32>());
                got = crate::sys::owned(raw).ok();
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    match (mode[0], got) {
        (0, None) => Offer::Socket,
        (1, Some(m)) => Rings::map(&m, 1).map_or(Offer::Gone, Offer::Rings),
        _ => Offer::Gone,
    }
}

/// Wakes the peer of a ring stream (or tells it the ring has room): one byte on the socket.
/// A full socket already holds bells enough.
pub fn ring_bell(fd: &OwnedFd) {
    let b = [0u8; 1];
    // SAFETY: sends one byte from a live buffer on our own socket.
    unsafe { libc::send(fd.as_raw_fd(), b.as_ptr().cast(), 1, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
}
