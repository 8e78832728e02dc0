//! Addresses for the soft fabric: the machine's own IP addresses are the
//! device's, GIDs are those addresses (IPv4-mapped for IPv4), and socket
//! addresses move between C bytes and `SocketAddr`.

use crate::sys::{Errno, Result};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};

pub use common::sock::from_bytes;

/// Writes `a` as a C `sockaddr_in`/`sockaddr_in6` into a 128-byte storage area.
pub fn to_storage(a: &SocketAddr, out: &mut [u8; 128]) {
    out.fill(0);
    match a {
        SocketAddr::V4(v) => {
            out[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            out[2..4].copy_from_slice(&v.port().to_be_bytes());
            out[4..8].copy_from_slice(&v.ip().octets());
        }
        SocketAddr::V6(v) => {
            out[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            out[2..4].copy_from_slice(&v.port().to_be_bytes());
            out[4..8].copy_from_slice(&v.flowinfo().to_be_bytes());
            out[8..24].copy_from_slice(&v.ip().octets());
            out[24..28].copy_from_slice(&v.scope_id().to_ne_bytes());
        }
    }
}

/// An address as the kernel CM reports a request's: an IPv4 peer reaching
/// a dual-stack socket shows as IPv4-mapped IPv6 ([::ffff:a.b.c.d]), and
/// the CM takes both ends from the request's header, where it is IPv4
/// (cma_save_ip4_info): AF_INET on the new id, whatever the listener's family.
pub fn unmapped(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

/// The 16-byte GID of an IP address (RoCE style: IPv4-mapped IPv6).
pub fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        IpAddr::V6(v) => v.octets(),
    }
}

/// Every IP address of this machine's interfaces (the soft device's GIDs).
pub fn local_ips() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below.
    if unsafe { libc::getifaddrs(&mut ifa) } != 0 {
        return vec![IpAddr::V4(Ipv4Addr::LOCALHOST)];
    }
    let mut p = ifa;
    while !p.is_null() {
        // SAFETY: p walks the list getifaddrs returned.
        let a = unsafe { (*p).ifa_addr };
        if !a.is_null() {
            // SAFETY: a points to a sockaddr of its family's size.
            let fam = unsafe { (*a).sa_family } as i32;
            let len = match fam {
                libc::AF_INET => 16,
                libc::AF_INET6 => 28,
                _ => 0,
            };
            if len > 0 {
                // SAFETY: len bytes are valid for this family.
                let b = unsafe { std::slice::from_raw_parts(a as *const u8, len) };
                if let Ok(sa) = from_bytes(b) {
                    out.push(sa.ip());
                }
            }
        }
        // SAFETY: as above.
        p = unsafe { (*p).ifa_next };
    }
    // SAFETY: the list from getifaddrs, freed once.
    unsafe { libc::freeifaddrs(ifa) };
    out
}

pub fn is_local(ip: IpAddr) -> bool {
    ip.is_unspecified() || local_ips().contains(&ip)
}

/// The source address the kernel would use to reach `dst` (its routing
/// decision), or the error that says it cannot.
pub fn route_source(dst: &SocketAddr) -> Result<IpAddr> {
    if is_local(dst.ip()) && !dst.ip().is_unspecified() {
        return Ok(dst.ip());
    }
    let bind: SocketAddr = match dst {
        SocketAddr::V4(_) => "0.0.0.0:0".parse().map_err(|_| Errno::EINVAL)?,
        SocketAddr::V6(_) => "[::]:0".parse().map_err(|_| Errno::EINVAL)?,
    };
    let s = UdpSocket::bind(bind)?;
    let target = SocketAddr::new(dst.ip(), if dst.port() == 0 { 9 } else { dst.port() });
    s.connect(target)?;
    Ok(s.local_addr()?.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip() {
        for s in ["127.0.0.1:7174", "[::1]:80"] {
            let a: SocketAddr = s.parse().unwrap();
            let mut st = [0u8; 128];
            to_storage(&a, &mut st);
            let len = if a.is_ipv4() { 16 } else { 28 };
            assert_eq!(from_bytes(&st[..len]).unwrap(), a);
        }
        assert!(local_ips().contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)));
        assert_eq!(route_source(&"127.0.0.1:1".parse().unwrap()).unwrap(), IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(gid_of("1.2.3.4".parse().unwrap())[10..], [0xff, 0xff, 1, 2, 3, 4]);
        assert_eq!(unmapped("[::ffff:127.0.0.1]:7".parse().unwrap()), "127.0.0.1:7".parse::<SocketAddr>().unwrap());
        assert_eq!(unmapped("[::1]:7".parse().unwrap()), "[::1]:7".parse::<SocketAddr>().unwrap());
    }
}
