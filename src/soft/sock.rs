//! Raw socket steps std does not offer: bind without listen (an RDMA port is
//! reserved at bind time, listening starts later), listen on such a socket.

use crate::sys::{cerr, Errno, Result};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A TCP or UDP socket bound to `addr` (port 0 picks one), SO_REUSEADDR set:
/// the RDMA port space has no TIME_WAIT, so a restarted server must rebind.
/// Which ids may share a port is the CM's rule, not the socket's: the caller
/// claims the port first (ports.rs).
pub fn bind(addr: &SocketAddr, udp: bool) -> Result<OwnedFd> {
    let fam = if addr.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    let ty = if udp { libc::SOCK_DGRAM } else { libc::SOCK_STREAM };
    // SAFETY: plain syscall; checked.
    let fd = cerr(unsafe { libc::socket(fam, ty | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: a new fd owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    // SAFETY: setsockopt with a live int.
    unsafe {
        libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, (&one as *const libc::c_int).cast(), 4);
    }
    if addr.is_ipv6() {
        // SAFETY: as above; v6 sockets carry only v6 (the v4 space is separate).
        unsafe {
            libc::setsockopt(fd.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, (&one as *const libc::c_int).cast(), 4);
        }
    }
    let mut st = [0u8; 128];
    super::net::to_storage(addr, &mut st);
    let len = if addr.is_ipv4() { 16 } else { 28 };
    // SAFETY: st holds a sockaddr of `len` bytes.
    cerr(unsafe { libc::bind(fd.as_raw_fd(), st.as_ptr().cast(), len) })?;
    Ok(fd)
}

/// The address a socket is bound to.
pub fn local_addr(fd: &OwnedFd) -> Result<SocketAddr> {
    common::sock::local_addr(fd.as_raw_fd())
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
