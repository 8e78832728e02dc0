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
//! type (TCP and IB on TCP ports, UDP and IPOIB on UDP ports here), except
//! where the sockets cannot keep two spaces apart: a TCP port has one
//! listener, and UDP hands a datagram to one of the sockets sharing a port
//! (Linux, through SO_REUSEADDR), so a listener's port is its alone in the
//! other space of its socket type too (`sibling`). Ids of other processes
//! are not seen.

use crate::cm::registry::KeyMap;
use crate::sys::{Errno, Result};
use rdma_abi::cma::{RDMA_PS_IB, RDMA_PS_IPOIB, RDMA_PS_TCP, RDMA_PS_UDP};
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
    /// The id listens: its socket must be the only one on its port and
    /// address that takes requests (see `sibling`).
    listening: bool,
}

/// (RDMA_PS, port) -> its holders, oldest first.
type Held = KeyMap<(u32, u16), Vec<Holder>>;
static HELD: LazyLock<Mutex<Held>> = LazyLock::new(Default::default);
static SERIAL: AtomicU64 = AtomicU64::new(0);

fn held() -> std::sync::MutexGuard<'static, Held> {
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
    check_among(holders, me, reuse, |_| true)
}

/// `check` among the holders `which` picks.
fn check_among(holders: &[Holder], me: &Holder, reuse: bool, which: impl Fn(&Holder) -> bool) -> Result<()> {
    match holders.iter().rev().filter(|h| h.serial != me.serial && which(h)).find_map(|h| clash(me, h, reuse)) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The port space whose ids use the same kind of socket as `ps`'s, which
/// the sockets cannot tell from `ps` on a port both hold: a TCP port takes
/// one listener, so a second listen or a bind of a listener's port fails
/// there; a datagram goes to one of the UDP sockets bound to its port and
/// address, so a UD listener whose port a socket of the other UD space
/// also holds would miss requests, and the SIDR handler drops a request
/// of the other port space. Refused where the kernel CM, keeping the
/// spaces apart, would succeed; with its errnos for a busy port.
fn sibling(ps: u32) -> Option<u32> {
    match ps {
        RDMA_PS_TCP => Some(RDMA_PS_IB),
        RDMA_PS_IB => Some(RDMA_PS_TCP),
        RDMA_PS_UDP => Some(RDMA_PS_IPOIB),
        RDMA_PS_IPOIB => Some(RDMA_PS_UDP),
        _ => None,
    }
}

/// Whether `ps` lives on UDP ports.
fn is_ud(ps: u32) -> bool {
    matches!(ps, RDMA_PS_UDP | RDMA_PS_IPOIB)
}

/// `me`'s clash with the holders of its port in the sibling space that
/// `which` picks (as with a listen: every overlap clashes).
fn check_sibling(
    h: &KeyMap<(u32, u16), Vec<Holder>>,
    ps: u32,
    port: u16,
    me: &Holder,
    which: impl Fn(&Holder) -> bool,
) -> Result<()> {
    match sibling(ps).and_then(|sib| h.get(&(sib, port))) {
        Some(holders) => check_among(holders, me, false, which),
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
    /// A listener of the sibling space refuses it too (`sibling`).
    pub fn take(ps: u32, addr: SocketAddr, reuse: bool, afonly: bool) -> Result<PortClaim> {
        Self::add(ps, addr, reuse, afonly, |h, me| {
            check(h.get(&(ps, addr.port())).map_or(&[][..], |v| v), me, reuse)?;
            check_sibling(h, ps, addr.port(), me, |x| x.listening)
        })
    }

    /// The claim of a port the system picked for a bind to port 0: refused
    /// (EADDRNOTAVAIL) while any other id holds it on an overlapping
    /// address, REUSEADDR or not, as the kernel CM's cma_alloc_any_port
    /// gives such a bind only a port nobody holds there. The system's pick
    /// is no such promise (UDP hands out a port our SO_REUSEADDR sockets
    /// hold), so the caller picks again. Holders of the sibling space count
    /// too, so that a listen on the port later is not refused for them.
    pub fn pick(ps: u32, addr: SocketAddr, reuse: bool, afonly: bool) -> Result<PortClaim> {
        Self::add(ps, addr, reuse, afonly, |h, me| {
            check(h.get(&(ps, addr.port())).map_or(&[][..], |v| v), me, false)
                .and_then(|()| check_sibling(h, ps, addr.port(), me, |_| true))
                .map_err(|_| Errno(libc::EADDRNOTAVAIL))
        })
    }

    /// Adds a holder for `addr` unless `rule` refuses it beside the holders.
    fn add(
        ps: u32,
        addr: SocketAddr,
        reuse: bool,
        afonly: bool,
        rule: impl FnOnce(&KeyMap<(u32, u16), Vec<Holder>>, &Holder) -> Result<()>,
    ) -> Result<PortClaim> {
        let me = Holder { serial: SERIAL.fetch_add(1, Ordering::Relaxed), addr, reuse, afonly, listening: false };
        let mut h = held();
        rule(&h, &me)?;
        let claim = PortClaim { ps, port: addr.port(), serial: me.serial };
        h.entry((ps, addr.port())).or_default().push(me);
        Ok(claim)
    }

    /// rdma_listen's check: the port must be ours alone on our address;
    /// from then on it is (REUSEADDR no longer shares it). The kernel CM
    /// looks only if the id has REUSEADDR: without it, its bind found the
    /// port free and refuses later binds. (A holder can still have come in
    /// another family while both were AFONLY, and meet the id since one
    /// stopped being: the kernel CM lets the listen be, and so does TCP.
    /// Not on UDP ports: the other's socket would take some of the
    /// listener's datagrams.) In the sibling space, another listener
    /// refuses it, and on UDP ports any holder. Returns whether the id had
    /// REUSEADDR, for `unlisten` to restore if the listen fails further on.
    pub fn listen(&self) -> Result<bool> {
        let mut h = held();
        let key = (self.ps, self.port);
        let holders = h.get(&key).expect("a live claim has its entry");
        let me = holders.iter().find(|x| x.serial == self.serial).expect("a live claim has its entry");
        let ud = is_ud(self.ps);
        if me.reuse || ud {
            check(holders, me, false)?;
        }
        check_sibling(&h, self.ps, self.port, me, |x| ud || x.listening)?;
        let mine = h.get_mut(&key).and_then(|v| v.iter_mut().find(|x| x.serial == self.serial));
        let mine = mine.expect("a live claim has its entry");
        mine.listening = true;
        Ok(std::mem::replace(&mut mine.reuse, false))
    }

    /// A listen that failed after `listen`: the id is bound again, with
    /// the REUSEADDR `listen` returned.
    pub fn unlisten(&self, reuse: bool) {
        self.with_mine(|holders, i| {
            holders[i].listening = false;
            holders[i].reuse = reuse;
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
        assert_eq!(udp.listen(), Ok(true), "the TCP holders are in other port spaces");
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
    fn a_listeners_port_is_its_own_in_the_other_space_of_its_socket_type() {
        let (a, other_ip, any, any6) = (sa("127.0.0.1:61005"), sa("127.0.0.2:61005"), sa("0.0.0.0:61005"), sa("[::]:61005"));
        // UDP ports: a datagram goes to one socket, so a UD listener's port is held by nobody else.
        let udp = PortClaim::take(RDMA_PS_UDP, a, false, true).unwrap();
        let ipoib = PortClaim::take(RDMA_PS_IPOIB, a, false, true).unwrap();
        assert_eq!(udp.listen().map(drop), INUSE, "a holder of the other UD space");
        drop(ipoib);
        let v6 = PortClaim::take(RDMA_PS_IPOIB, any6, false, true).unwrap();
        assert_eq!(udp.listen(), Ok(false), "not another family when both are AFONLY");
        assert_eq!(PortClaim::take(RDMA_PS_IPOIB, a, true, true).map(drop), INUSE, "a bind of the UD listener's port");
        assert_eq!(PortClaim::take(RDMA_PS_IPOIB, any, true, true).map(drop), NOTAVAIL);
        let elsewhere = PortClaim::take(RDMA_PS_IPOIB, other_ip, false, true).unwrap();
        assert_eq!(elsewhere.listen(), Ok(false), "another address");
        assert_eq!(v6.listen(), Ok(false));
        // TCP ports: one listener, but a bound socket beside it takes no connection.
        let tcp = PortClaim::take(RDMA_PS_TCP, a, false, true).unwrap();
        let ib = PortClaim::take(RDMA_PS_IB, any, false, true).unwrap();
        assert_eq!(tcp.listen(), Ok(false), "a bound id of the other TCP space does not stop a listen");
        assert_eq!(ib.listen().map(drop), NOTAVAIL, "a listener does");
        drop(ib);
        assert_eq!(PortClaim::take(RDMA_PS_IB, a, false, true).map(drop), INUSE, "and a bind of its port");
        let ib = PortClaim::take(RDMA_PS_IB, other_ip, false, true).unwrap();
        assert_eq!(ib.listen(), Ok(false), "another address");
        ib.unlisten(false);
        // A pick passes over a port held in the other space, which would refuse a later listen.
        assert_eq!(PortClaim::pick(RDMA_PS_TCP, other_ip, false, true).map(drop), NOTAVAIL);
        assert_eq!(PortClaim::pick(RDMA_PS_UDP, other_ip, true, true).map(drop), NOTAVAIL);
        drop((udp, v6, elsewhere, tcp, ib));
        assert!(PortClaim::pick(RDMA_PS_UDP, a, false, true).is_ok());
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
        second.unlisten(true);
        assert!(PortClaim::take(RDMA_PS_TCP, a, true, true).is_ok(), "unlisten undoes a listen that failed further on");
    }
}
