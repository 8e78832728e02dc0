//! Socket glue both libraries need.

use crate::errno::{cerr, Errno, Result};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// The address `fd` is bound to, as getsockname(2) gives its bytes.
pub fn local_name(fd: i32) -> Result<Vec<u8>> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: ss is writable for len bytes; getsockname fills at most that.
    cerr(unsafe { libc::getsockname(fd, &mut ss as *mut _ as *mut libc::sockaddr, &mut len) })?;
    let n = (len as usize).min(std::mem::size_of::<libc::sockaddr_storage>());
    // SAFETY: the first n bytes of the storage, filled above.
    Ok(unsafe { std::slice::from_raw_parts(&ss as *const _ as *const u8, n) }.to_vec())
}

/// The address `fd` is bound to.
pub fn local_addr(fd: i32) -> Result<SocketAddr> {
    from_bytes(&local_name(fd)?)
}

/// Parses a C socket address (its bytes) into a `SocketAddr`: EINVAL when too
/// short, EAFNOSUPPORT for a family other than AF_INET/AF_INET6.
pub fn from_bytes(b: &[u8]) -> Result<SocketAddr> {
    if b.len() < 2 {
        return Err(Errno::EINVAL);
    }
    match u16::from_ne_bytes([b[0], b[1]]) as i32 {
        libc::AF_INET if b.len() >= 16 => {
            let port = u16::from_be_bytes([b[2], b[3]]);
            let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
            Ok(SocketAddr::V4(SocketAddrV4::new(ip, port)))
        }
        libc::AF_INET6 if b.len() >= 28 => {
            let port = u16::from_be_bytes([b[2], b[3]]);
            let flow = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
            let o: [u8; 16] = b[8..24].try_into().map_err(|_| Errno::EINVAL)?;
            let scope = u32::from_ne_bytes([b[24], b[25], b[26], b[27]]);
            Ok(SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(o), port, flow, scope)))
        }
        _ => Err(Errno(libc::EAFNOSUPPORT)),
    }
}
