//! The ports the process's ids are bound to. The kernel CM lets ids share a
//! port through REUSEADDR only while none of them listens: a listen on a
//! port another id holds (same port space, an overlapping address) fails
//! with EADDRINUSE. TCP is laxer (one of the sharers may listen), so the soft
//! CM keeps this account itself. Ids of other processes are not seen.

use crate::cm::registry::KeyMap;
use std::net::SocketAddr;
use std::sync::{LazyLock, Mutex};

/// (datagram port space, port) -> the bound address of each holder.
static HELD: LazyLock<Mutex<KeyMap<(bool, u16), Vec<SocketAddr>>>> = LazyLock::new(Default::default);

fn held() -> std::sync::MutexGuard<'static, KeyMap<(bool, u16), Vec<SocketAddr>>> {
    crate::cm::registry::lock(&HELD)
}

/// One id's hold on its bound port, released when dropped.
#[derive(Debug)]
pub struct PortClaim {
    udp: bool,
    addr: SocketAddr,
}

impl PortClaim {
    pub fn new(udp: bool, addr: SocketAddr) -> PortClaim {
        held().entry((udp, addr.port())).or_default().push(addr);
        PortClaim { udp, addr }
    }

    /// Another id holds the same port on an address that overlaps ours (the
    /// same one, or either being the wildcard).
    pub fn shared(&self) -> bool {
        let h = held();
        let overlapping = |a: &&SocketAddr| a.ip() == self.addr.ip() || a.ip().is_unspecified() || self.addr.ip().is_unspecified();
        h.get(&(self.udp, self.addr.port())).is_some_and(|v| v.iter().filter(overlapping).count() > 1)
    }
}

impl Drop for PortClaim {
    fn drop(&mut self) {
        let mut h = held();
        let key = (self.udp, self.addr.port());
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

    #[test]
    fn a_port_is_shared_while_two_claims_overlap() {
        let a: SocketAddr = "127.0.0.1:61001".parse().unwrap();
        let other_ip: SocketAddr = "127.0.0.2:61001".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:61001".parse().unwrap();
        let first = PortClaim::new(false, a);
        assert!(!first.shared());
        let udp = PortClaim::new(true, a);
        assert!(!first.shared() && !udp.shared(), "the port spaces are apart");
        let elsewhere = PortClaim::new(false, other_ip);
        assert!(!first.shared(), "another address on the same port does not overlap");
        let second = PortClaim::new(false, a);
        assert!(first.shared() && second.shared());
        drop(second);
        assert!(!first.shared(), "a dropped claim releases the port");
        let wildcard = PortClaim::new(false, any);
        assert!(first.shared() && elsewhere.shared() && wildcard.shared());
    }
}
