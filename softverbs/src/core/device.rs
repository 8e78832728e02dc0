//! The one device, `soft0`, and its GID table (the host's IP addresses).

use rdma_abi::verbs::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::LazyLock;

pub const DEVICE_NAME: &str = "soft0";
pub const VENDOR_ID: u32 = 0;
pub const VENDOR_PART_ID: u32 = 0;

/// `struct ibv_device` for soft0: static for the life of the process, so it stays valid
/// after `ibv_free_device_list` and across any number of contexts.
static DEVICE: LazyLock<ibv_device> = LazyLock::new(|| {
    // SAFETY: ibv_device is plain data (arrays, integers, optional fn pointers): all-zero
    // bytes are a valid value.
    let mut d: ibv_device = unsafe { std::mem::zeroed() };
    d.node_type = IBV_NODE_CA;
    d.transport_type = IBV_TRANSPORT_IB;
    put(&mut d.name, DEVICE_NAME);
    put(&mut d.dev_name, "uverbs-soft0");
    put(&mut d.dev_path, "/sys/class/infiniband_verbs/uverbs-soft0");
    put(&mut d.ibdev_path, "/sys/class/infiniband/soft0");
    d
});

fn put(dst: &mut [libc::c_char], s: &str) {
    for (i, b) in s.bytes().take(dst.len() - 1).enumerate() {
        dst[i] = b as libc::c_char;
    }
}

pub fn device_ptr() -> *mut ibv_device {
    &*DEVICE as *const ibv_device as *mut ibv_device
}

/// Node GUID (host byte order value; callers store it big-endian). Stable per host.
pub fn node_guid() -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let name = hostname();
    for b in name.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    // Locally administered EUI-64 style: 02:xx:xx:ff:fe:xx:xx:xx.
    0x0200_00ff_fe00_0000u64 | ((h >> 24) & 0xffff) << 40 | (h & 0x00ff_ffff)
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into the live buffer.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return String::from("localhost");
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// One GID table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidEntry {
    pub gid: [u8; 16],
    pub ifindex: u32,
}

/// GID bytes of an IP address (IPv4 as IPv4-mapped `::ffff:a.b.c.d`).
pub fn ip_to_gid(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The IP address a GID stands for (IPv4-mapped GIDs give IPv4).
pub fn gid_to_ip(gid: &[u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(*gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// An IPv6 multicast GID, or (RoCE v2, as the kernel CM makes them for IPv4
/// groups) an IPv4-mapped multicast address.
pub fn is_mcast_gid(gid: &[u8; 16]) -> bool {
    gid[0] == 0xff || matches!(gid_to_ip(gid), IpAddr::V4(v) if v.is_multicast())
}

/// The host's addresses as GIDs, best first: IPv4 (non-loopback, then 127.0.0.1), then
/// IPv6 (global, loopback, link-local). Never empty (falls back to 127.0.0.1).
pub fn host_gids() -> Vec<GidEntry> {
    let mut v4 = Vec::new();
    let mut v4lo = Vec::new();
    let mut v6 = Vec::new();
    let mut v6lo = Vec::new();
    let mut v6ll = Vec::new();
    let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills ifap with a list we free below.
    if unsafe { libc::getifaddrs(&mut ifap) } == 0 {
        let mut p = ifap;
        while !p.is_null() {
            // SAFETY: p is a node of the list getifaddrs returned (not yet freed).
            let ifa = unsafe { &*p };
            p = ifa.ifa_next;
            if ifa.ifa_addr.is_null() || ifa.ifa_flags & libc::IFF_UP as u32 == 0 {
                continue;
            }
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let ifindex = unsafe { libc::if_nametoindex(ifa.ifa_name) };
            // SAFETY: ifa_addr points to a sockaddr whose family says its real type.
            let fam = unsafe { (*ifa.ifa_addr).sa_family } as i32;
            if fam == libc::AF_INET {
                // SAFETY: family AF_INET means the sockaddr is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                let e = GidEntry { gid: ip_to_gid(IpAddr::V4(ip)), ifindex };
                if ip.is_loopback() { v4lo.push(e) } else { v4.push(e) }
            } else if fam == libc::AF_INET6 {
                // SAFETY: family AF_INET6 means the sockaddr is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                let e = GidEntry { gid: ip.octets(), ifindex };
                if ip.is_loopback() {
                    v6lo.push(e)
                } else if ip.segments()[0] & 0xffc0 == 0xfe80 {
                    v6ll.push(e)
                } else {
                    v6.push(e)
                }
            }
        }
        // SAFETY: ifap came from getifaddrs and is freed once.
        unsafe { libc::freeifaddrs(ifap) };
    }
    let mut all: Vec<GidEntry> = Vec::new();
    for e in v4.into_iter().chain(v4lo).chain(v6).chain(v6lo).chain(v6ll) {
        if !all.iter().any(|x| x.gid == e.gid) {
            all.push(e);
        }
    }
    if all.is_empty() {
        all.push(GidEntry { gid: ip_to_gid(IpAddr::V4(Ipv4Addr::LOCALHOST)), ifindex: 1 });
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multicast_gids_ipv6_and_ipv4_mapped() {
        let g = |s: &str| ip_to_gid(s.parse().unwrap());
        assert!(is_mcast_gid(&g("239.1.2.3")), "RoCE v2: an IPv4 group's mapped address");
        assert!(is_mcast_gid(&g("ff0e::ffff:ef01:0203")));
        assert!(!is_mcast_gid(&g("10.0.0.1")));
        assert!(!is_mcast_gid(&g("::1")));
    }
}
