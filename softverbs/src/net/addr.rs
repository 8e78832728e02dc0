//! `SocketAddr` ⇄ `sockaddr_storage`, with IPv4-mapped IPv6 normalised to IPv4.

use std::net::{IpAddr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Encodes `addr` for a socket of family `AF_INET6` (`v6 = true`, IPv4 becomes mapped) or
/// `AF_INET`. Returns None for IPv6 on an IPv4 socket.
pub fn to_storage(addr: &SocketAddr, v6: bool) -> Option<(libc::sockaddr_storage, libc::socklen_t)> {
    // SAFETY: sockaddr_storage is plain data; all-zero is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let addr6 = match (addr, v6) {
        (SocketAddr::V4(a), false) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from(*a.ip()).to_be() },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
            return Some((ss, std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t));
        }
        (SocketAddr::V6(_), false) => return None,
        (SocketAddr::V4(a), true) => SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0),
        (SocketAddr::V6(a), true) => *a,
    };
    let sin6 = libc::sockaddr_in6 {
        sin6_family: libc::AF_INET6 as libc::sa_family_t,
        sin6_port: addr6.port().to_be(),
        sin6_flowinfo: 0,
        sin6_addr: libc::in6_addr { s6_addr: addr6.ip().octets() },
        sin6_scope_id: addr6.scope_id(),
    };
    // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
    unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
    Some((ss, std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t))
}

/// Decodes a sockaddr of `len` bytes (IPv4-mapped IPv6 → IPv4).
///
/// # Safety
/// `sa` must point to at least `len` readable bytes.
pub unsafe fn from_raw(sa: *const libc::sockaddr, len: libc::socklen_t) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees len readable bytes.
    let b = unsafe { std::slice::from_raw_parts(sa.cast::<u8>(), len as usize) };
    common::sock::from_bytes(b).ok().map(unmapped)
}

/// An IPv4-mapped IPv6 address as IPv4 (the fabric names IPv4 peers so).
fn unmapped(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v) => match v.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::V4(SocketAddrV4::new(v4, v.port())),
            None => a,
        },
        v4 => v4,
    }
}

pub fn with_port(ip: IpAddr, port: u16, scope: u32) -> SocketAddr {
    match ip {
        IpAddr::V4(v4) => SocketAddr::V4(SocketAddrV4::new(v4, port)),
        IpAddr::V6(v6) => SocketAddr::V6(SocketAddrV6::new(v6, port, 0, scope)),
    }
}

/// The local address a socket is bound to (getsockname).
pub fn local_addr(fd: i32) -> Option<SocketAddr> {
    common::sock::local_addr(fd).ok().map(unmapped)
}
