//! The ports the process's ids are bound to. The kernel CM lets ids share a
//! port through REUSEADDR only while none of them listens: a listen on a
//! port another id holds (same port space, an overlapping address) fails
//! with EADDRINUSE. TCP is laxer (one of the sharers may listen), so the soft
//! CM keeps this account itself. Ids of other processes are not seen. Each
//! RDMA_PS is a port space of its own, as in the kernel CM, even where two
//! share a socket type (UDP and IPOIB both live on UDP ports here).

use crate::cm::registry::KeyMap;
use crate::sys::Errno;
use std::net::SocketAddr;
use std::sync::{LazyLock, Mutex};

/// (RDMA_PS, port) -> the bound address of each holder.
static HELD: LazyLock<Mutex<KeyMap<(u32, u16), Vec<SocketAddr>>>> = LazyLock::new(Default::default);

fn held() -> std::sync::MutexGuard<'static, KeyMap<(u32, u16), Vec<SocketAddr>>> {
    crate::cm::registry::lock(&HELD)
}

/// One id's hold on its bound port, released when dropped.
#[derive(Debug)]
pub struct PortClaim {
    ps: u32,
    addr: SocketAddr,
}

impl PortClaim {
    pub fn new(ps: u32, addr: SocketAddr) -> PortClaim {
        held().entry((ps, addr.port())).or_default().push(addr);
        PortClaim { ps, addr }
    }

    /// Why a listen must fail while another id holds the same port on an
    /// address that overlaps ours, as the kernel CM answers: EADDRNOTAVAIL
    /// when either is the wildcard, EADDRINUSE for the same address. The
    /// families stay apart (the soft CM's sockets are IPV6_V6ONLY).
    pub fn conflict(&self) -> Option<Errno> {
        let h = held();
        let mine = self.addr.ip();
        let mut others: Vec<&SocketAddr> = h.get(&(self.ps, self.addr.port()))?.iter().filter(|a| a.is_ipv4() == self.addr.is_ipv4()).collect();
        if let Some(i) = others.iter().position(|a| **a == self.addr) {
            others.swap_remove(i); // our own entry
        }
        if others.iter().any(|a| a.ip().is_unspecified() || mine.is_unspecified()) {
            Some(Errno(libc::EADDRNOTAVAIL))
        } else if others.iter().any(|a| a.ip() == mine) {
            Some(Errno(libc::EADDRINUSE))
        } else {
            None
        }
    }
}

impl Drop for PortClaim {
    fn drop(&mut self) {
        let mut h = held();
        let key = (self.ps, self.addr.port());
        if let Some(v) = h.get_mut(&key) {
            if let Some(i) = v.iter().position(|a| *a == self.addr) {
                v.swap_remove(i);
            }
            if v.is_empty() {
                h.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_abi::cma::{RDMA_PS_IPOIB, RDMA_PS_TCP, RDMA_PS_UDP};

    #[test]
    fn a_listen_conflicts_while_two_claims_overlap() {
        let a: SocketAddr = "127.0.0.1:61001".parse().unwrap();
        let other_ip: SocketAddr = "127.0.0.2:61001".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:61001".parse().unwrap();
        let any6: SocketAddr = "[::]:61001".parse().unwrap();
        let inuse = Some(Errno(libc::EADDRINUSE));
        let notavail = Some(Errno(libc::EADDRNOTAVAIL));
        let first = PortClaim::new(RDMA_PS_TCP, a);
        assert_eq!(first.conflict(), None);
        let udp = PortClaim::new(RDMA_PS_UDP, a);
        assert!(first.conflict().is_none() && udp.conflict().is_none(), "the port spaces are apart");
        let ipoib = PortClaim::new(RDMA_PS_IPOIB, a);
        assert!(udp.conflict().is_none() && ipoib.conflict().is_none(), "UDP and IPOIB are two port spaces, though both on UDP ports here");
        let elsewhere = PortClaim::new(RDMA_PS_TCP, other_ip);
        assert_eq!(first.conflict(), None, "another address on the same port does not overlap");
        let v6 = PortClaim::new(RDMA_PS_TCP, any6);
        assert!(first.conflict().is_none() && v6.conflict().is_none(), "the families are apart");
        let second = PortClaim::new(RDMA_PS_TCP, a);
        assert!(first.conflict() == inuse && second.conflict() == inuse);
        drop(second);
        assert_eq!(first.conflict(), None, "a dropped claim releases the port");
        let wildcard = PortClaim::new(RDMA_PS_TCP, any);
        assert!(first.conflict() == notavail && elsewhere.conflict() == notavail && wildcard.conflict() == notavail);
    }
}
