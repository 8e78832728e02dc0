//! The kernel CM's port rules as the soft CM's calls answer them: ids made
//! and driven through the backend, as rdma_create_id, rdma_set_option,
//! rdma_bind_addr and rdma_listen would. Only wildcard addresses: a specific
//! one needs the soft device, which unit tests do not load. Each test gets
//! its port from the system (port 0) so that tests running beside it, here
//! or in other processes, cannot take it first. The expected errnos are what
//! Debian's library answered on rxe for the same calls.

use super::{soft_id, Soft};
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

#[test]
fn udp_and_ipoib_are_two_port_spaces() {
    let mut r = Rig::new();
    let udp = r.id(RDMA_PS_UDP, true);
    bind(&udp, "0.0.0.0:0").unwrap();
    let p = port(&udp);
    let ipoib = r.id(RDMA_PS_IPOIB, true);
    assert_eq!(bind(&ipoib, &format!("0.0.0.0:{p}")), Ok(()));
    assert_eq!(Soft.listen(&udp, 1), Ok(()), "the IPOIB id's hold on the port is in another space");
    assert_eq!(Soft.listen(&ipoib, 1), Ok(()));
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

#[test]
fn the_port_resolve_addr_binds_is_held() {
    let mut r = Rig::new();
    let (a, b, c) = (r.id(RDMA_PS_TCP, false), r.id(RDMA_PS_TCP, true), r.id(RDMA_PS_TCP, false));
    // rdma_resolve_addr's step once the route is known. A wildcard source
    // stands for the device's address, which would need the soft device.
    let dst: SocketAddr = "127.0.0.1:7".parse().unwrap();
    super::resolved(&soft_id(&a), dst, Ok(std::net::Ipv4Addr::UNSPECIFIED.into())).unwrap();
    let p = port(&a);
    assert_eq!(bind(&b, &format!("0.0.0.0:{p}")), NOTAVAIL, "an id with REUSEADDR: the holder has none");
    assert_eq!(bind(&c, &format!("0.0.0.0:{p}")), NOTAVAIL);
}

#[test]
fn reuseaddr_and_afonly_change_in_the_kernel_cms_states() {
    let mut r = Rig::new();
    let (a, b) = (r.id(RDMA_PS_TCP, false), r.id(RDMA_PS_TCP, false));
    assert_eq!(opt(&a, Opt::ReuseAddr(false)), Ok(()));
    bind(&a, "0.0.0.0:0").unwrap();
    assert_eq!(opt(&a, Opt::ReuseAddr(false)), Err(Errno::EINVAL), "a bound id cannot stop sharing");
    assert_eq!(opt(&a, Opt::ReuseAddr(true)), Ok(()));
    let dst: SocketAddr = "127.0.0.1:7".parse().unwrap();
    super::resolved(&soft_id(&b), dst, Ok(std::net::Ipv4Addr::UNSPECIFIED.into())).unwrap();
    assert_eq!(opt(&b, Opt::ReuseAddr(true)), Ok(()), "only a listener's port cannot be shared");
    assert_eq!(opt(&b, Opt::AfOnly(true)), Err(Errno::EINVAL));
    assert_eq!(b.state().options.afonly, None, "a refused value is not kept");
    assert_eq!(Soft.listen(&a, 1), Ok(()));
    assert_eq!(opt(&a, Opt::ReuseAddr(true)), Err(Errno::EINVAL));
}
