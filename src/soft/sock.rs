//! Raw socket steps std does not offer: bind without listen (an RDMA port is
//! reserved at bind time, listening starts later), listen on such a socket,
//! and the families a socket hears.

use crate::sys::{cerr, Errno, Result};
use std::net::{Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A TCP or UDP socket bound to `addr` (port 0 picks one), SO_REUSEADDR set:
/// the RDMA port space has no TIME_WAIT, so a restarted server must rebind.
/// Which ids may share a port is the CM's rule, not the socket's: the caller
/// claims the port first (ports.rs).
///
/// `afonly` is the id's RDMA_OPTION_ID_AFONLY (or its default). The kernel
/// CM hands a wildcard listener without it requests of both families
/// (cma_match_private_data), so the socket must hear both: an IPv6 socket's
/// IPV6_V6ONLY is `afonly`, and an IPv4 wildcard without it is bound as a
/// dual-stack [::] (`local_addr_for` gives its address back as IPv4).
pub fn bind(addr: &SocketAddr, udp: bool, afonly: bool) -> Result<OwnedFd> {
    #[cfg(test)]
    let addr = &forced_pick(*addr);
    let both = !afonly && addr.is_ipv4() && addr.ip().is_unspecified();
    if both {
        match bind_at(&SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), addr.port()), udp, false) {
            // A host without IPv6 has no IPv6 request to hear either.
            Err(e) if e.0 == libc::EAFNOSUPPORT => {}
            r => return r,
        }
    }
    bind_at(addr, udp, afonly)
}

#[cfg(test)]
thread_local! {
    /// Ports this thread's next binds to port 0 get instead of the system's
    /// pick, last first: the system cannot be made to pick a port that
    /// collides, which is what the tests of a collision need.
    static FORCED: std::cell::RefCell<Vec<u16>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The ports the next binds to port 0 on this thread get, in order (tests only).
#[cfg(test)]
pub fn force_picks(ports: &[u16]) {
    FORCED.with(|f| *f.borrow_mut() = ports.iter().rev().copied().collect());
}

#[cfg(test)]
fn forced_pick(addr: SocketAddr) -> SocketAddr {
    match FORCED.with(|f| if addr.port() == 0 { f.borrow_mut().pop() } else { None }) {
        Some(p) => SocketAddr::new(addr.ip(), p),
        None => addr,
    }
}

fn bind_at(addr: &SocketAddr, udp: bool, v6only: bool) -> Result<OwnedFd> {
    let fam = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    let ty = if udp { libc::SOCK_DGRAM } else { libc::SOCK_STREAM };
    // SAFETY: plain syscall; checked.
    let fd = cerr(unsafe { libc::socket(fam, ty | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: a new fd owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    set_int(&fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    if addr.is_ipv6() {
        // Set either way: the system's default (net.ipv6.bindv6only) is
        // already in `v6only` when the id did not choose.
        set_int(&fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, v6only as libc::c_int)?;
    }
    let mut st = [0u8; 128];
    super::net::to_storage(addr, &mut st);
    let len = if addr.is_ipv4() { 16 } else { 28 };
    // SAFETY: st holds a sockaddr of `len` bytes.
    cerr(unsafe { libc::bind(fd.as_raw_fd(), st.as_ptr().cast(), len) })?;
    Ok(fd)
}

fn set_int(fd: &OwnedFd, level: i32, name: i32, v: libc::c_int) -> Result<()> {
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: setsockopt with a live int of the given length on a socket we own.
    cerr(unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, (&v as *const libc::c_int).cast(), len) }).map(drop)
}

/// Whether a socket hears both families: IPv6 with IPV6_V6ONLY off.
pub fn hears_both(fd: &impl AsRawFd) -> bool {
    if !common::sock::local_addr(fd.as_raw_fd()).is_ok_and(|a| a.is_ipv6()) {
        return false;
    }
    let mut v: libc::c_int = 1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt into a live int of `len` bytes.
    let r = unsafe { libc::getsockopt(fd.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, (&mut v as *mut libc::c_int).cast(), &mut len) };
    r == 0 && v == 0
}

/// Whether a socket `bind` made for `addr` hears what `afonly` says now.
/// Only a wildcard can hear the other family: a given address is one
/// family's (an IPv4-mapped IPv6 address is not looked at).
pub fn fits(fd: &OwnedFd, addr: &SocketAddr, afonly: bool) -> bool {
    !addr.ip().is_unspecified() || hears_both(fd) != afonly
}

/// The address a socket is bound to.
pub fn local_addr(fd: &OwnedFd) -> Result<SocketAddr> {
    common::sock::local_addr(fd.as_raw_fd())
}

/// The address a socket `bind` made for `asked` holds, in `asked`'s family
/// (a dual-stack socket made for an IPv4 wildcard is bound to [::]).
pub fn local_addr_for(fd: &OwnedFd, asked: &SocketAddr) -> Result<SocketAddr> {
    let a = local_addr(fd)?;
    Ok(if a.is_ipv4() == asked.is_ipv4() { a } else { SocketAddr::new(asked.ip(), a.port()) })
}

/// Starts listening on a bound stream socket; borrowed, so a failure leaves
/// the id its socket (and Bound, as it was).
pub fn listen(fd: &OwnedFd, backlog: i32) -> Result<()> {
    // The RDMA backlog counts CM requests, not TCP handshakes: never let the
    // kernel drop SYNs of a burst of connects (cmtime), whatever the app asked.
    let _ = backlog;
    // SAFETY: listen on a bound stream socket we own.
    cerr(unsafe { libc::listen(fd.as_raw_fd(), libc::SOMAXCONN) }).map(drop)
}

pub fn udp(fd: OwnedFd) -> std::net::UdpSocket {
    std::net::UdpSocket::from(fd)
}

pub fn unavailable() -> Errno {
    Errno(libc::EADDRNOTAVAIL)
}
