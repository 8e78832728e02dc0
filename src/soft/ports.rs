//! The ports the process's ids are bound to, and the kernel CM's rules for
//! sharing one (its bind list check), which TCP and UDP do not give us: the
//! soft CM's sockets always set SO_REUSEADDR (sock::bind), TCP lets one of
//! two sharers listen, UDP has no listen at all.
//!
//! An id may bind a port that others hold on an overlapping address only if
//! it and every such holder have REUSEADDR and none of them listens; a
//! listen makes the port the listener's alone, so it fails while another id
//! holds it and refuses every later bind. A refusal is EADDRNOTAVAIL when
//! either address is the wildcard, EADDRINUSE for the same address. IPv4
//! and IPv6 holders are apart only when both are AFONLY (an IPv4 id is,
//! unless told otherwise; an IPv6 id as net.ipv6.bindv6only says), and a
//! wildcard id's socket hears what its AFONLY says (sock::bind). Each RDMA_PS is a port
//! space of its own, as in the kernel CM, even where two share a socket
//! type (UDP and IPOIB both live on UDP ports here). Ids of other processes
//! are not seen.

use crate::cm::registry::KeyMap;
use crate::sys::{Errno, Result};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};

struct Holder {
    /// Tells a claim's own entry from another on the same address.
    serial: u64,
    addr: SocketAddr,
    /// REUSEADDR, as the id has it now; cleared by a listen.
    reuse: bool,
    afonly: bool,
}

/// (RDMA_PS, port) -> its holders, oldest first.
static HELD: LazyLock<Mutex<KeyMap<(u32, u16), Vec<Holder>>>> = LazyLock::new(Default::default);
static SERIAL: AtomicU64 = AtomicU64::new(0);

fn held() -> std::sync::MutexGuard<'static, KeyMap<(u32, u16), Vec<Holder>>> {
    crate::cm::registry::lock(&HELD)
}

/// AFONLY of an id that did not set it, as the kernel CM takes it at bind:
/// always for IPv4, net.ipv6.bindv6only (of our network namespace) for IPv6.
pub fn default_afonly(addr: &SocketAddr) -> bool {
    static V6ONLY: LazyLock<bool> = LazyLock::new(|| {
        std::fs::read_to_string("/proc/sys/net/ipv6/bindv6only").map(|v| v.trim() == "1").unwrap_or(false)
    });
    addr.is_ipv4() || *V6ONLY
}

/// Why `me` may not hold its port beside `other`; `reuse` is whether `me`
/// asks to share (a listen never does).
fn clash(me: &Holder, other: &Holder, reuse: bool) -> Option<Errno> {
    if reuse && other.reuse || me.afonly && other.afonly && me.addr.is_ipv4() != other.addr.is_ipv4() {
        None
    } else if me.addr.ip().is_unspecified() || other.addr.ip().is_unspecified() {
        Some(Errno(libc::EADDRNOTAVAIL))
    } else if me.addr.ip() == other.addr.ip() {
        Some(Errno(libc::EADDRINUSE))
    } else {
        None
    }
}

/// The first refusal among `holders` other than `me`, newest first, as the
/// kernel walks its list (it adds at the head).
fn check(holders: &[Holder], me: &Holder, reuse: bool) -> Result<()> {
    match holders.iter().rev().filter(|h| h.serial != me.serial).find_map(|h| clash(me, h, reuse)) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// One id's hold on its bound port, released when dropped.
#[derive(Debug)]
pub struct PortClaim {
    ps: u32,
    port: u16,
    serial: u64,
}

impl PortClaim {
    /// rdma_bind_addr's check: takes `addr`'s port in space `ps` unless
    /// another id's hold forbids it. `reuse`, `afonly`: the id's options
    /// (`afonly` from `default_afonly` unless the id set it).
    pub fn take(ps: u32, addr: SocketAddr, reuse: bool, afonly: bool) -> Result<PortClaim> {
        Self::add(ps, addr, reuse, afonly, |holders, me| check(holders, me, reuse))
    }

    /// The claim of a port the system picked for a bind to port 0: refused
    /// (EADDRNOTAVAIL) while any other id holds it on an overlapping
    /// address, REUSEADDR or not, as the kernel CM's cma_alloc_any_port
    /// gives such a bind only a port nobody holds there. The system's pick
    /// is no such promise (UDP hands out a port our SO_REUSEADDR sockets
    /// hold), so the caller picks again.
    pub fn pick(ps: u32, addr: SocketAddr, reuse: bool, afonly: bool) -> Result<PortClaim> {
        Self::add(ps, addr, reuse, afonly, |holders, me| check(holders, me, false).map_err(|_| Errno(libc::EADDRNOTAVAIL)))
    }

    /// Adds a holder for `addr` unless `rule` refuses it beside the port's holders.
    fn add(
        ps: u32,
        addr: SocketAddr,
        reuse: bool,
        afonly: bool,
        rule: impl FnOnce(&[Holder], &Holder) -> Result<()>,
    ) -> Result<PortClaim> {
        let me = Holder { serial: SERIAL.fetch_add(1, Ordering::Relaxed), addr, reuse, afonly };
        let mut h = held();
        let holders = h.entry((ps, addr.port())).or_default();
        rule(holders, &me)?;
        let claim = PortClaim { ps, port: addr.port(), serial: me.serial };
        holders.push(me);
        Ok(claim)
    }

    /// rdma_listen's check: the port must be ours alone on our address;
    /// from then on it is (REUSEADDR no longer shares it). Returns whether
    /// the id had REUSEADDR, for `set_reuse` to restore if the listen fails
    /// further on.
    pub fn listen(&self) -> Result<bool> {
        self.with_mine(|holders, i| {
            check(holders, &holders[i], false)?;
            Ok(std::mem::replace(&mut holders[i].reuse, false))
        })
    }

    /// REUSEADDR changed on the bound id: the kernel CM reads it live.
    pub fn set_reuse(&self, reuse: bool) {
        self.with_mine(|holders, i| holders[i].reuse = reuse)
    }

    /// AFONLY set on the bound id (read live, as REUSEADDR).
    pub fn set_afonly(&self, afonly: bool) {
        self.with_mine(|holders, i| holders[i].afonly = afonly)
    }

    /// The address resolution gave a wildcard-bound id (same port).
    pub fn set_addr(&self, addr: SocketAddr) {
        debug_assert_eq!(addr.port(), self.port);
        self.with_mine(|holders, i| holders[i].addr = addr)
    }

    fn with_mine<T>(&self, f: impl FnOnce(&mut Vec<Holder>, usize) -> T) -> T {
        let mut h = held();
        let holders = h.get_mut(&(self.ps, self.port)).expect("a live claim has its entry");
        let i = holders.iter().position(|x| x.serial == self.serial).expect("a live claim has its entry");
        f(holders, i)
    }
}

impl Drop for PortClaim {
    fn drop(&mut self) {
        let mut h = held();
        let key = (self.ps, self.port);
        if let Some(v) = h.get_mut(&key) {
            v.retain(|x| x.serial != self.serial);
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

    const INUSE: Result<()> = Err(Errno(libc::EADDRINUSE));
    const NOTAVAIL: Result<()> = Err(Errno(libc::EADDRNOTAVAIL));

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_listen_conflicts_while_two_claims_overlap() {
        let (a, other_ip, any, any6) = (sa("127.0.0.1:61001"), sa("127.0.0.2:61001"), sa("0.0.0.0:61001"), sa("[::]:61001"));
        let first = PortClaim::take(RDMA_PS_TCP, a, true, true).unwrap();
        let udp = PortClaim::take(RDMA_PS_UDP, a, true, true).unwrap();
        let ipoib = PortClaim::take(RDMA_PS_IPOIB, a, true, true).unwrap();
        let elsewhere = PortClaim::take(RDMA_PS_TCP, other_ip, true, true).unwrap();
        let v6 = PortClaim::take(RDMA_PS_TCP, any6, true, true).unwrap();
        let second = PortClaim::take(RDMA_PS_TCP, a, true, true).unwrap();
        assert_eq!(first.listen().map(drop), INUSE);
        assert_eq!(second.listen().map(drop), INUSE);
        drop(second);
        let wildcard = PortClaim::take(RDMA_PS_TCP, any, true, true).unwrap();
        assert_eq!(first.listen().map(drop), NOTAVAIL);
        assert_eq!(elsewhere.listen().map(drop), NOTAVAIL);
        assert_eq!(wildcard.listen().map(drop), NOTAVAIL);
        drop(wildcard);
        // Another address on the same port, another family, another port space: no overlap.
        assert_eq!(first.listen(), Ok(true), "a dropped claim releases the port");
        assert_eq!(elsewhere.listen(), Ok(true));
        assert_eq!(v6.listen(), Ok(true), "the families are apart when both are AFONLY");
        assert!(udp.listen().is_ok() && ipoib.listen().is_ok(), "UDP and IPOIB are two port spaces, though both on UDP ports here");
    }

    #[test]
    fn the_families_meet_unless_both_are_afonly() {
        let (a, any, any6) = (sa("127.0.0.1:61003"), sa("0.0.0.0:61003"), sa("[::]:61003"));
        let v4 = PortClaim::take(RDMA_PS_TCP, any, false, true).unwrap();
        assert_eq!(PortClaim::take(RDMA_PS_TCP, any6, false, false).map(drop), NOTAVAIL);
        let v6 = PortClaim::take(RDMA_PS_TCP, any6, false, true).unwrap();
        v4.set_afonly(false);
        assert_eq!(PortClaim::take(RDMA_PS_TCP, sa("[::]:61003"), false, true).map(drop), NOTAVAIL, "AFONLY counts as the holder has it now");
        drop((v4, v6));
        let v4 = PortClaim::take(RDMA_PS_TCP, a, false, true).unwrap();
        assert_eq!(PortClaim::take(RDMA_PS_TCP, any6, false, false).map(drop), NOTAVAIL, "a wildcard on either side");
        assert!(PortClaim::take(RDMA_PS_TCP, sa("[::1]:61003"), false, false).is_ok(), "two addresses of two families never are the same");
        drop(v4);
        assert!(default_afonly(&any), "IPv4 is AFONLY by default");
    }

    #[test]
    fn a_wildcard_holder_that_resolved_holds_the_route_source() {
        let (a, any) = (sa("127.0.0.1:61004"), sa("0.0.0.0:61004"));
        let first = PortClaim::take(RDMA_PS_TCP, any, false, true).unwrap();
        assert_eq!(PortClaim::take(RDMA_PS_TCP, a, false, true).map(drop), NOTAVAIL);
        first.set_addr(a);
        assert_eq!(PortClaim::take(RDMA_PS_TCP, a, false, true).map(drop), INUSE);
        assert!(PortClaim::take(RDMA_PS_TCP, sa("127.0.0.2:61004"), false, true).is_ok());
    }

    #[test]
    fn a_bind_shares_only_between_reuseaddr_ids_none_listening() {
        let (a, any) = (sa("127.0.0.1:61002"), sa("0.0.0.0:61002"));
        let first = PortClaim::take(RDMA_PS_TCP, a, false, true).unwrap();
        assert_eq!(PortClaim::take(RDMA_PS_TCP, a, false, true).map(drop), INUSE, "neither has REUSEADDR");
        assert_eq!(PortClaim::take(RDMA_PS_TCP, a, true, true).map(drop), INUSE, "the holder has no REUSEADDR");
        assert_eq!(PortClaim::take(RDMA_PS_TCP, any, true, true).map(drop), NOTAVAIL);
        assert!(PortClaim::take(RDMA_PS_TCP, sa("127.0.0.2:61002"), false, true).is_ok(), "another address does not overlap");
        first.set_reuse(true);
        let second = PortClaim::take(RDMA_PS_TCP, a, true, true).unwrap();
        assert_eq!(second.listen().map(drop), INUSE);
        drop(first);
        assert_eq!(second.listen(), Ok(true));
        assert_eq!(PortClaim::take(RDMA_PS_TCP, a, true, true).map(drop), INUSE, "a listener shares its port with nobody");
        assert_eq!(PortClaim::take(RDMA_PS_TCP, any, true, true).map(drop), NOTAVAIL);
        second.set_reuse(true);
        assert!(PortClaim::take(RDMA_PS_TCP, a, true, true).is_ok(), "set_reuse undoes a listen that failed further on");
    }
}
