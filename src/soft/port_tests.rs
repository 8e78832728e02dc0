//! The kernel CM's port rules as the soft CM's calls answer them: ids made
//! and driven through the backend, as rdma_create_id, rdma_set_option,
//! rdma_bind_addr and rdma_listen would. Only wildcard addresses: a specific
//! one needs the soft device, which unit tests do not load. Each test gets
//! its port from the system (port 0) so that tests running beside it, here
//! or in other processes, cannot take it first. The expected errnos are what
//! Debian's library answered on rxe for the same calls.

use super::{sock, soft_id, Soft};
use crate::backend::Backend;
use crate::cm::options::Opt;
use crate::cm::{ChannelBox, IdBox, IdCore};
use crate::sys::{Errno, Result};
use rdma_abi::cma::*;
use std::net::SocketAddr;
use std::sync::Arc;

const NOTAVAIL: Result<()> = Err(Errno(libc::EADDRNOTAVAIL));

/// A channel and the ids made on it, destroyed with it.
struct Rig {
    chp: *mut rdma_event_channel,
    ids: Vec<(*mut rdma_cm_id, Arc<IdCore>)>,
}

impl Rig {
    fn new() -> Rig {
        Rig { chp: ChannelBox::create().unwrap(), ids: Vec::new() }
    }

    /// A new id of port space `ps`, with REUSEADDR set when `reuse`.
    fn id(&mut self, ps: u32, reuse: bool) -> Arc<IdCore> {
        let (id, core) = IdBox::create_core(self.chp, std::ptr::null_mut(), ps, None).unwrap();
        self.ids.push((id, core.clone()));
        if reuse {
            opt(&core, Opt::ReuseAddr(true)).unwrap();
        }
        core
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        for (id, core) in self.ids.drain(..) {
            drop_id(id, &core);
        }
        let _ = ChannelBox::destroy(self.chp);
    }
}

fn drop_id(id: *mut rdma_cm_id, core: &Arc<IdCore>) {
    Soft.destroy(core);
    let _ = IdBox::destroy(id);
}

/// rdma_set_option as the application's call makes it.
fn opt(core: &Arc<IdCore>, o: Opt) -> Result<()> {
    crate::backend::set_option(Some(&Soft), core, o)
}

fn bind(core: &Arc<IdCore>, a: &str) -> Result<()> {
    let a: SocketAddr = a.parse().unwrap();
    let mut st = [0u8; 128];
    super::net::to_storage(&a, &mut st);
    Soft.bind(core, &st[..if a.is_ipv4() { 16 } else { 28 }])
}

fn port(core: &Arc<IdCore>) -> u16 {
    soft_id(core).st().src.unwrap().port()
}

/// UDP and IPOIB are two port spaces, as in the kernel CM: ids of both
/// hold one port without REUSEADDR. But both are UDP sockets here, and a
/// datagram goes to one of the sockets sharing its port, so a UD listener
/// must be alone on its port: its listen is refused while the other space
/// holds the port, and so is a bind of its port (the kernel CM would take
/// both; it used to, and one of the two listeners never heard a request).
#[test]
fn a_ud_listener_is_alone_on_its_port_in_both_ud_port_spaces() {
    let mut r = Rig::new();
    let (udp, ipoib) = (r.id(RDMA_PS_UDP, false), r.id(RDMA_PS_IPOIB, false));
    bind(&udp, "0.0.0.0:0").unwrap();
    let p = port(&udp);
    assert_eq!(bind(&ipoib, &format!("0.0.0.0:{p}")), Ok(()), "another port space");
    assert_eq!(Soft.listen(&udp, 1), NOTAVAIL);
    assert_eq!(Soft.listen(&ipoib, 1), NOTAVAIL);
    let (id, _) = r.ids.remove(1);
    drop_id(id, &ipoib);
    assert_eq!(Soft.listen(&udp, 1), Ok(()));
    let late = r.id(RDMA_PS_IPOIB, true);
    assert_eq!(bind(&late, &format!("0.0.0.0:{p}")), NOTAVAIL);
}

/// TCP and IB on one TCP port: a second listener, or a bind of a
/// listener's port, is refused with the kernel CM's errno for a busy port
/// (the kernel CM would take both; the socket used to refuse them with
/// EADDRINUSE). A bound id beside a listener is no bother to TCP.
#[test]
fn tcp_and_ib_share_a_port_but_not_a_listen() {
    let mut r = Rig::new();
    let (tcp, ib) = (r.id(RDMA_PS_TCP, false), r.id(RDMA_PS_IB, false));
    bind(&tcp, "0.0.0.0:0").unwrap();
    let p = port(&tcp);
    assert_eq!(bind(&ib, &format!("0.0.0.0:{p}")), Ok(()), "another port space");
    assert_eq!(Soft.listen(&tcp, 1), Ok(()));
    assert_eq!(Soft.listen(&ib, 1), NOTAVAIL);
    let late = r.id(RDMA_PS_IB, true);
    assert_eq!(bind(&late, &format!("0.0.0.0:{p}")), NOTAVAIL);
}

#[test]
fn ids_without_reuseaddr_do_not_share_a_port() {
    let mut r = Rig::new();
    let (a, b) = (r.id(RDMA_PS_TCP, false), r.id(RDMA_PS_TCP, false));
    bind(&a, "0.0.0.0:0").unwrap();
    let p = port(&a);
    assert_eq!(bind(&b, &format!("0.0.0.0:{p}")), NOTAVAIL);
    let c = r.id(RDMA_PS_TCP, true);
    assert_eq!(bind(&c, &format!("0.0.0.0:{p}")), NOTAVAIL, "REUSEADDR on one side only does not share");
    assert_eq!(bind(&b, "0.0.0.0:0"), Ok(()), "a refused bind leaves the id unbound");
}

#[test]
fn a_ud_listeners_port_is_its_own() {
    let mut r = Rig::new();
    let (a, b) = (r.id(RDMA_PS_UDP, true), r.id(RDMA_PS_UDP, true));
    bind(&a, "0.0.0.0:0").unwrap();
    let p = port(&a);
    assert_eq!(Soft.listen(&a, 1), Ok(()));
    assert_eq!(bind(&b, &format!("0.0.0.0:{p}")), NOTAVAIL);
}

#[test]
fn reuseaddr_set_after_bind_counts() {
    let mut r = Rig::new();
    let (a, b) = (r.id(RDMA_PS_TCP, false), r.id(RDMA_PS_TCP, true));
    bind(&a, "0.0.0.0:0").unwrap();
    let p = port(&a);
    assert_eq!(opt(&a, Opt::ReuseAddr(true)), Ok(()));
    assert_eq!(bind(&b, &format!("0.0.0.0:{p}")), Ok(()));
    assert_eq!(Soft.listen(&a, 1), NOTAVAIL, "another id holds the port");
    let (bid, _) = r.ids.pop().unwrap();
    drop_id(bid, &b);
    assert_eq!(Soft.listen(&a, 1), Ok(()));
}

#[test]
fn ipv4_and_ipv6_wildcards_meet_unless_both_are_afonly() {
    let mut r = Rig::new();
    let (a, b, c) = (r.id(RDMA_PS_TCP, false), r.id(RDMA_PS_TCP, false), r.id(RDMA_PS_TCP, false));
    bind(&a, "0.0.0.0:0").unwrap();
    let p = port(&a);
    // net.ipv6.bindv6only's default, set here so that the host's value does not matter.
    opt(&b, Opt::AfOnly(false)).unwrap();
    assert_eq!(bind(&b, &format!("[::]:{p}")), NOTAVAIL);
    opt(&c, Opt::AfOnly(true)).unwrap();
    assert_eq!(bind(&c, &format!("[::]:{p}")), Ok(()));
}

#[test]
fn sharers_of_two_families_cannot_listen_unless_both_are_afonly() {
    let mut r = Rig::new();
    let (a, b) = (r.id(RDMA_PS_TCP, true), r.id(RDMA_PS_TCP, true));
    bind(&a, "0.0.0.0:0").unwrap();
    let p = port(&a);
    opt(&b, Opt::AfOnly(false)).unwrap();
    assert_eq!(bind(&b, &format!("[::]:{p}")), Ok(()));
    assert_eq!(Soft.listen(&a, 1), NOTAVAIL);
    assert_eq!(Soft.listen(&b, 1), NOTAVAIL);
    assert_eq!(opt(&b, Opt::AfOnly(true)), Ok(()), "AFONLY may still change on a bound id");
    assert_eq!(Soft.listen(&a, 1), Ok(()));
    assert_eq!(Soft.listen(&b, 1), Ok(()));
}

/// The kernel CM checks a listener's port only if the id has REUSEADDR:
/// without it, the id's bind found the port free and later binds are
/// refused. An id of the other family can still be there, bound while both
/// were AFONLY, then the other turned AFONLY off: the kernel CM's
/// rdma_listen lets the listen be (we refused it, EADDRNOTAVAIL). Not on UDP ports,
/// where the other's socket would take some of the listener's datagrams.
#[test]
fn a_listen_without_reuseaddr_is_not_checked_again_on_tcp_ports() {
    let mut r = Rig::new();
    for ps in [RDMA_PS_TCP, RDMA_PS_UDP] {
        let (a, b) = (r.id(ps, false), r.id(ps, false));
        bind(&a, "0.0.0.0:0").unwrap();
        let p = port(&a);
        opt(&b, Opt::AfOnly(true)).unwrap();
        bind(&b, &format!("[::]:{p}")).unwrap();
        opt(&b, Opt::AfOnly(false)).unwrap();
        let expect = if ps == RDMA_PS_TCP { Ok(()) } else { NOTAVAIL };
        assert_eq!(Soft.listen(&a, 1), expect, "PS {ps:#x}");
    }
}

/// rdma_resolve_addr's steps, its start and its end once the route is
/// known, for 127.0.0.1. A wildcard source stands for the device's address,
/// which would need the soft device.
fn resolve(core: &Arc<IdCore>) -> Result<()> {
    let s = soft_id(core);
    let dst = "127.0.0.1:7".parse().unwrap();
    super::start_query(&s, None, &dst)?;
    super::resolved(&s, dst, Ok(std::net::Ipv4Addr::UNSPECIFIED.into()))
}

/// The system's pick for a bind to port 0 may be a port another id of ours
/// holds: UDP hands out a port that only SO_REUSEADDR sockets hold, and all
/// of ours set it. Such a pick (forced here: the system cannot be made to
/// make it) is passed over for another, as the kernel CM's port allocation
/// moves on; the bind used to fail with EADDRNOTAVAIL (or, with REUSEADDR,
/// to share a port the kernel CM would never hand out). So a process with
/// many datagram rsockets, each with a UD id bound to port 0, saw some of
/// them fail at random.
#[test]
fn a_picked_port_another_id_holds_is_passed_over() {
    let mut r = Rig::new();
    let holder = r.id(RDMA_PS_UDP, true);
    bind(&holder, "0.0.0.0:0").unwrap();
    let p = port(&holder);
    // IPv6 too: an IPv6 id is not AFONLY by default (set here, whatever
    // the host's net.ipv6.bindv6only), so it meets the IPv4 holder.
    for (reuse, a, afonly) in [(false, "0.0.0.0:0", None), (true, "0.0.0.0:0", None), (false, "[::]:0", Some(false))] {
        let b = r.id(RDMA_PS_UDP, reuse);
        if let Some(v) = afonly {
            opt(&b, Opt::AfOnly(v)).unwrap();
        }
        sock::force_picks(&[p]);
        assert_eq!(bind(&b, a), Ok(()), "{a} REUSEADDR={reuse}");
        assert_ne!(port(&b), p, "{a} REUSEADDR={reuse}");
    }
    let c = r.id(RDMA_PS_UDP, false);
    sock::force_picks(&[p]);
    assert_eq!(resolve(&c), Ok(()), "the port rdma_resolve_addr binds an unbound id to");
    assert_ne!(port(&c), p);
    // Bounded: a bind that only ever gets taken ports gives up as the kernel CM does.
    let d = r.id(RDMA_PS_UDP, false);
    sock::force_picks(&[p; super::PICKS]);
    assert_eq!(bind(&d, "0.0.0.0:0"), NOTAVAIL);
    assert_eq!(bind(&d, "0.0.0.0:0"), Ok(()), "the id is left unbound");
}

#[test]
fn the_port_resolve_addr_binds_is_held() {
    let mut r = Rig::new();
    let (a, b, c) = (r.id(RDMA_PS_TCP, false), r.id(RDMA_PS_TCP, true), r.id(RDMA_PS_TCP, false));
    resolve(&a).unwrap();
    let p = port(&a);
    assert_eq!(bind(&b, &format!("0.0.0.0:{p}")), NOTAVAIL, "an id with REUSEADDR: the holder has none");
    assert_eq!(bind(&c, &format!("0.0.0.0:{p}")), NOTAVAIL);
}

/// A socket address as the application passes it.
fn sockaddr(a: &str) -> Vec<u8> {
    let a: SocketAddr = a.parse().unwrap();
    let mut st = [0u8; 128];
    super::net::to_storage(&a, &mut st);
    st[..if a.is_ipv4() { 16 } else { 28 }].to_vec()
}

/// rdma_resolve_addr of a destination of another family than the address
/// the id is bound to fails with EINVAL and leaves the id bound, as the
/// kernel CM's resolve_prepare_src (after binding an idle id to the source
/// address it was given). It used to resolve, and the id's port claim
/// became IPv6 while its socket stayed IPv4, so another id could bind the
/// IPv4 wildcard on that port.
#[test]
fn a_destination_of_another_family_than_the_bound_source_is_refused() {
    let mut r = Rig::new();
    let (a, b, c) = (r.id(RDMA_PS_TCP, false), r.id(RDMA_PS_TCP, false), r.id(RDMA_PS_TCP, false));
    bind(&a, "0.0.0.0:0").unwrap();
    let p = port(&a);
    assert_eq!(Soft.resolve_addr(&a, None, &sockaddr("[::1]:7"), 100), Err(Errno::EINVAL));
    assert_eq!(soft_id(&a).phase(), super::Phase::Bound);
    assert_eq!(bind(&b, &format!("0.0.0.0:{p}")), NOTAVAIL, "the id still holds its IPv4 wildcard");
    let src = sockaddr("0.0.0.0:0");
    assert_eq!(Soft.resolve_addr(&c, Some(&src), &sockaddr("[::1]:7"), 100), Err(Errno::EINVAL));
    assert_eq!(soft_id(&c).phase(), super::Phase::Bound, "bound to the source address it was given");
    assert_eq!(bind(&c, "0.0.0.0:0"), Err(Errno::EINVAL));
}

/// rdma_resolve_addr binds an unbound id at its start, as the kernel CM
/// does, to the wildcard of the destination's family on a port of its own,
/// and the id keeps it when the resolution fails: after ADDR_ERROR it is
/// bound (rdma_bind_addr: EINVAL, as Debian's library says on rxe), holds
/// its port and may resolve again. It used to go back to unbound.
#[test]
fn an_unbound_id_stays_bound_after_addr_error() {
    let mut r = Rig::new();
    let (a, b) = (r.id(RDMA_PS_TCP, false), r.id(RDMA_PS_TCP, false));
    let s = soft_id(&a);
    let dst = "127.0.0.1:7".parse().unwrap();
    super::start_query(&s, None, &dst).unwrap();
    super::post_resolved(&s, Err(Errno(libc::ETIMEDOUT)));
    assert_eq!(s.phase(), super::Phase::Bound);
    let src = s.st().src.unwrap();
    assert!(src.is_ipv4() && src.ip().is_unspecified() && src.port() != 0, "{src}");
    assert_eq!(bind(&a, "0.0.0.0:0"), Err(Errno::EINVAL));
    assert_eq!(bind(&b, &format!("0.0.0.0:{}", src.port())), NOTAVAIL, "the port is held");
    assert_eq!(super::start_query(&s, None, &dst), Ok(()), "a new resolution may start");
    assert_eq!(s.st().src, Some(src), "from the same port");
}

#[test]
fn reuseaddr_and_afonly_change_in_the_kernel_cms_states() {
    let mut r = Rig::new();
    let (a, b) = (r.id(RDMA_PS_TCP, false), r.id(RDMA_PS_TCP, false));
    assert_eq!(opt(&a, Opt::ReuseAddr(false)), Ok(()));
    bind(&a, "0.0.0.0:0").unwrap();
    assert_eq!(opt(&a, Opt::ReuseAddr(false)), Err(Errno::EINVAL), "a bound id cannot stop sharing");
    assert_eq!(opt(&a, Opt::ReuseAddr(true)), Ok(()));
    resolve(&b).unwrap();
    assert_eq!(opt(&b, Opt::ReuseAddr(true)), Ok(()), "only a listener's port cannot be shared");
    assert_eq!(opt(&b, Opt::AfOnly(true)), Err(Errno::EINVAL));
    assert_eq!(b.state().options.afonly, None, "a refused value is not kept");
    assert_eq!(Soft.listen(&a, 1), Ok(()));
    assert_eq!(opt(&a, Opt::ReuseAddr(true)), Err(Errno::EINVAL));
}

/// Whether a TCP connect to `to` is answered (by the engine, which accepts
/// for a listener), as a client of that family would find it.
fn hears_tcp(to: &str) -> bool {
    std::net::TcpStream::connect(to).is_ok()
}

/// Whether a UDP port is bound for `to`'s family: a datagram to an unbound
/// one comes back as ICMP port unreachable, which the next receive reports.
fn hears_udp(to: &str) -> bool {
    let any = if to.starts_with('[') { "[::1]:0" } else { "127.0.0.1:0" };
    let u = std::net::UdpSocket::bind(any).unwrap();
    u.connect(to).unwrap();
    u.set_read_timeout(Some(std::time::Duration::from_millis(300))).unwrap();
    u.send(b"not a CM message").unwrap();
    !matches!(u.recv(&mut [0u8; 64]), Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused)
}

#[test]
fn an_ipv6_wildcard_listener_without_afonly_hears_ipv4_clients() {
    let mut r = Rig::new();
    for (ps, hears) in [(RDMA_PS_TCP, hears_tcp as fn(&str) -> bool), (RDMA_PS_UDP, hears_udp)] {
        let (both, v6) = (r.id(ps, false), r.id(ps, false));
        // Set, so that the host's net.ipv6.bindv6only does not matter.
        opt(&both, Opt::AfOnly(false)).unwrap();
        opt(&v6, Opt::AfOnly(true)).unwrap();
        bind(&both, "[::]:0").unwrap();
        bind(&v6, "[::]:0").unwrap();
        assert_eq!(Soft.listen(&both, 1), Ok(()));
        assert_eq!(Soft.listen(&v6, 1), Ok(()));
        let (p, q) = (port(&both), port(&v6));
        assert!(hears(&format!("127.0.0.1:{p}")), "PS {ps:#x}: an IPv4 client reaches the listener without AFONLY");
        assert!(hears(&format!("[::1]:{p}")));
        assert!(!hears(&format!("127.0.0.1:{q}")), "PS {ps:#x}: an AFONLY listener hears IPv6 only");
        assert!(hears(&format!("[::1]:{q}")));
    }
}

#[test]
fn an_ipv4_wildcard_listener_without_afonly_hears_ipv6_clients() {
    let mut r = Rig::new();
    let a = r.id(RDMA_PS_TCP, false);
    opt(&a, Opt::AfOnly(false)).unwrap();
    bind(&a, "0.0.0.0:0").unwrap();
    assert!(soft_id(&a).st().src.unwrap().is_ipv4(), "the id keeps its family");
    assert_eq!(Soft.listen(&a, 1), Ok(()));
    let p = port(&a);
    assert!(hears_tcp(&format!("[::1]:{p}")), "the kernel CM gives such a listener IPv6 requests too");
    assert!(hears_tcp(&format!("127.0.0.1:{p}")));
}

#[test]
fn afonly_set_on_a_bound_id_changes_what_its_socket_hears() {
    let mut r = Rig::new();
    let (a, b) = (r.id(RDMA_PS_TCP, false), r.id(RDMA_PS_TCP, false));
    opt(&a, Opt::AfOnly(true)).unwrap();
    opt(&b, Opt::AfOnly(false)).unwrap();
    bind(&a, "[::]:0").unwrap();
    bind(&b, "[::]:0").unwrap();
    opt(&a, Opt::AfOnly(false)).unwrap();
    opt(&b, Opt::AfOnly(true)).unwrap();
    assert_eq!(Soft.listen(&a, 1), Ok(()));
    assert_eq!(Soft.listen(&b, 1), Ok(()));
    let (p, q) = (port(&a), port(&b));
    assert!(hears_tcp(&format!("127.0.0.1:{p}")), "AFONLY turned off after bind");
    assert!(!hears_tcp(&format!("127.0.0.1:{q}")), "AFONLY turned on after bind");
    assert!(hears_tcp(&format!("[::1]:{q}")));
}

#[test]
fn a_listen_whose_socket_cannot_hear_both_families_is_refused() {
    let mut r = Rig::new();
    let a = r.id(RDMA_PS_TCP, false);
    opt(&a, Opt::AfOnly(true)).unwrap();
    bind(&a, "[::]:0").unwrap();
    let p = port(&a);
    // Another process's listener on the IPv4 side of the port, which our
    // own port claims do not know of.
    let other = std::net::TcpListener::bind(format!("0.0.0.0:{p}")).unwrap();
    assert_eq!(opt(&a, Opt::AfOnly(false)), Ok(()), "the kernel CM takes the option and refuses the listen");
    assert_eq!(Soft.listen(&a, 1), NOTAVAIL);
    drop(other);
    assert_eq!(Soft.listen(&a, 1), Ok(()), "a failed listen leaves the id bound");
    assert!(hears_tcp(&format!("127.0.0.1:{p}")));
}
