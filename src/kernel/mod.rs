//! The kernel backend: the CM of Linux (`/dev/infiniband/rdma_cm`, the ucma
//! write() ABI of kernel-abi.md), for RoCE, InfiniBand and iWARP devices.
//!
//! Design: as upstream, every event channel has its own rdma_cm file
//! (`source`); an id's kernel id is created on its channel's file with a
//! numeric `uid` cookie that `kid` maps back to the id (or multicast
//! membership). rdma_get_cm_event reads the file in the caller's thread,
//! does the library-side work upstream does there and hands the event over
//! through the core, which keeps channels, delivery, acks and destroy
//! accounting for every backend; the events the library makes itself (USER,
//! addrinfo) wait in the channel's queue, which the same fd reports.
//! rdma_migrate_id moves the kernel id with MIGRATE_ID. DESTROY_ID stops the
//! kernel's events for an id (the kernel drops its unread ones); the core
//! drops the queued ones and waits for acks.
//!
//! Files: `abi` (uapi mirrors + layout proof), `ucma` (the file and its
//! commands), `source` (a channel's file, read by rdma_get_cm_event), `kid` (per-id state, uid map, queries, QP transitions), `dev`
//! (devices by node GUID), `convert` (kernel → verbs structs), `events`,
//! `af_ib` (upstream's AF_IB probe). The QP's ECE is `crate::ece`'s.

pub mod abi;
pub mod af_ib;
pub mod bell;
pub mod convert;
pub mod dev;
pub mod events;
pub mod kid;
pub mod source;
pub mod ucma;

use crate::backend::{Backend, ConnParam};
use crate::cm::options::Opt;
use crate::cm::IdCore;
use crate::sys::{Errno, Result};
use abi::*;
use kid::{Gids, KSt};
use rdma_abi::cma::*;
use rdma_abi::verbs::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use crate::verbs::{ibv_modify_qp, verr};
use ucma::Ucma;

/// Whether libibverbs lists a device (a positive answer is kept; without
/// one the list is read again next time, a device may come). Asked when a
/// channel is made (its rdma_cm file), as upstream's ucma_init runs in
/// rdma_create_event_channel, and by every device call.
fn has_device() -> bool {
    static SEEN: AtomicBool = AtomicBool::new(false);
    if SEEN.load(Ordering::Relaxed) {
        return true;
    }
    let yes = dev::scan();
    SEEN.store(yes, Ordering::Relaxed);
    yes
}

/// A new channel's rdma_cm file. Without any verbs device the kernel CM is
/// of no use: no file, and the channel's ids get ENODEV, as upstream.
pub fn channel_source() -> Option<Box<dyn crate::cm::channel::Source>> {
    if !has_device() {
        return None;
    }
    af_ib::probe_once();
    // Looked up now, as the dynamic linker resolves upstream's at load.
    crate::ece::resolve();
    match source::KernelSource::open() {
        Ok(s) => Some(Box::new(s)),
        Err(e) => {
            crate::trace::emit(crate::trace::start(), || format!("  opening {} failed: errno {}", ucma::DEVICE, e.0));
            None
        }
    }
}

/// rdma_create_id: the kernel id is made now, as upstream does, and its
/// failure fails the call. A channel without an rdma_cm file (no device)
/// leaves ENODEV to the first device call.
pub fn created(id: &mut IdCore) -> Result<()> {
    match kid::create_unique(id) {
        Err(Errno::ENODEV) => Ok(()),
        r => r,
    }
}

/// rdma_destroy_id: the id's kernel side goes (if it has one).
pub fn destroy(id: &Arc<IdCore>) {
    kid::teardown(id);
}

/// rdma_migrate_id: an id with a kernel id takes it to the new channel's file.
pub fn migrate(id: &Arc<IdCore>, to: &crate::cm::Channel) -> Result<()> {
    kid::migrate(id, to)
}

pub struct Kernel;
static KERNEL: Kernel = Kernel;

pub fn backend() -> Result<&'static dyn Backend> {
    if !has_device() {
        return Err(Errno::ENODEV);
    }
    Ok(&KERNEL)
}

/// RTR and RTS for a connected id's QP (after re-applying INIT, as the kernel
/// may have new values), with the depths this side agreed to: INIT_QP_ATTR
/// for each state, applied to the QP under one hold of the id's lock (the QP
/// stays alive: rdma_destroy_qp takes it away under the same lock).
pub(crate) fn to_rts(u: &Ucma, k: &IdCore, h: u32, st: &mut KSt) -> Result<()> {
    let resp = st.responder_resources;
    let init = st.initiator_depth;
    let dev = st.dev;
    k.with_public(|p| {
        if p.qp.is_null() {
            return Err(Errno::EINVAL);
        }
        let ib_link = dev.map(|d| d.link_layer(p.port_num) == IBV_LINK_LAYER_INFINIBAND).unwrap_or(false);
        for state in [IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS] {
            let mut ka = ib_uverbs_qp_attr::default();
            u.init_qp_attr(h, state, &mut ka)?;
            // SAFETY: all-zero is a valid ibv_qp_attr.
            let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
            let mut mask = convert::qp_attr(&ka, &mut a);
            if state == IBV_QPS_RTR {
                if ib_link {
                    // Bits 21-23 (RoCE-only attributes) confuse IB providers on old kernels.
                    mask &= !0xE0_0000;
                }
                if resp != RDMA_MAX_RESP_RES {
                    a.max_dest_rd_atomic = resp;
                }
            } else if state == IBV_QPS_RTS && init != RDMA_MAX_INIT_DEPTH {
                a.max_rd_atomic = init;
            }
            // SAFETY: the id's live QP (guarded by the id's lock) and a filled attribute block.
            verr(unsafe { ibv_modify_qp(p.qp, &mut a, mask) })?;
        }
        Ok(())
    })?
}

/// Fills the kernel's conn_param for CONNECT/ACCEPT (all zero before): the
/// QP's number (or the application's), this side's depths, the caller's
/// retry counts (7/7 without a conn_param) and private data.
fn kernel_conn(c: &mut rdma_ucm_conn_param, qp_num: u32, srq: bool, st: &KSt, p: Option<&ConnParam>) -> Result<()> {
    c.qp_num = qp_num;
    c.srq = srq as u8;
    c.responder_resources = st.responder_resources;
    c.initiator_depth = st.initiator_depth;
    c.valid = 1;
    match p {
        Some(p) => {
            c.flow_control = p.flow_control;
            c.retry_count = p.retry_count;
            c.rnr_retry_count = p.rnr_retry_count;
            if p.private_data.len() > 256 {
                return Err(Errno::EINVAL);
            }
            c.private_data[..p.private_data.len()].copy_from_slice(&p.private_data);
            c.private_data_len = p.private_data.len() as u8;
        }
        None => {
            c.retry_count = 7;
            c.rnr_retry_count = 7;
        }
    }
    Ok(())
}

/// The QP number and SRQ flag of the id's QP (None without a QP) and the
/// ECE a REQ (`rep` false) or REP carries: the peer's vendor in a REP, our
/// options; under one hold of the id's lock.
fn qp_and_ece(core: &IdCore, rep: bool) -> Result<(Option<(u32, bool)>, rdma_ucm_ece)> {
    core.with_state_public(|st, p| {
        let qp = if p.qp.is_null() {
            None
        } else {
            // SAFETY: the id's live QP (read under the id's lock).
            Some(unsafe { ((*p.qp).qp_num, !(*p.qp).srq.is_null()) })
        };
        let (vendor_id, attr_mod) = crate::ece::carried(st, rep);
        (qp, rdma_ucm_ece { vendor_id, attr_mod })
    })
}

/// Explicit depths must not exceed the device's (upstream checks PS_TCP only).
fn check_depths(ps: u32, st: &KSt, p: &ConnParam) -> Result<()> {
    let Some(d) = st.dev else { return Ok(()) };
    if ps != RDMA_PS_TCP {
        return Ok(());
    }
    if (p.responder_resources != RDMA_MAX_RESP_RES && p.responder_resources > d.max_responder_resources)
        || (p.initiator_depth != RDMA_MAX_INIT_DEPTH && p.initiator_depth > d.max_initiator_depth)
    {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

impl Backend for Kernel {
    fn af_ib(&self) -> bool {
        af_ib::supported()
    }

    fn bind(&self, id: &Arc<IdCore>, addr: &[u8]) -> Result<()> {
        kid::with_handle_or_create(id, |u, h, st| {
            u.bind(h, addr)?;
            kid::query_addr(id, u, h, st, Gids::Yes)
        })
    }

    fn resolve_addr(&self, id: &Arc<IdCore>, src: Option<&[u8]>, dst: &[u8], timeout_ms: i32) -> Result<()> {
        kid::command(id, true, |u, h, _| u.resolve_addr(h, src, dst, timeout_ms as u32))?;
        id.with_public(|p| {
            // SAFETY: the storage member of the address union (plain bytes); dst ≤ 128 bytes.
            let d = unsafe { std::slice::from_raw_parts_mut(std::ptr::addr_of_mut!(p.route.addr.dst.storage) as *mut u8, 128) };
            let n = dst.len().min(128);
            d[..n].copy_from_slice(&dst[..n]);
        })?;
        if id.is_sync() {
            id.complete()?;
        }
        Ok(())
    }

    fn resolve_route(&self, id: &Arc<IdCore>, timeout_ms: i32) -> Result<()> {
        kid::command(id, true, |u, h, _| u.resolve_route(h, timeout_ms as u32))?;
        if id.is_sync() {
            id.complete()?;
        }
        Ok(())
    }

    fn listen(&self, id: &Arc<IdCore>, backlog: i32) -> Result<()> {
        kid::with_handle_or_create(id, |u, h, st| {
            u.listen(h, backlog)?;
            kid::query_addr(id, u, h, st, Gids::Yes)
        })
    }

    fn connect(&self, id: &Arc<IdCore>, p: ConnParam) -> Result<()> {
        let ps = id.ps();
        let (qp, ece) = qp_and_ece(id, false)?;
        kid::with_handle_or_create(id, |u, h, st| {
            let d = st.dev.ok_or(Errno::EINVAL)?;
            check_depths(ps, st, &p)?;
            st.initiator_depth = if p.initiator_depth != RDMA_MAX_INIT_DEPTH { p.initiator_depth } else { d.max_initiator_depth };
            st.responder_resources =
                if p.responder_resources != RDMA_MAX_RESP_RES { p.responder_resources } else { d.max_responder_resources };
            st.connect_error = false;
            let (qpn, srq) = qp.unwrap_or((p.qp_num, p.srq != 0));
            u.connect(h, |c| kernel_conn(c, qpn, srq, st, Some(&p)), ece)
        })?;
        if id.is_sync() {
            id.complete()?;
        }
        Ok(())
    }

    fn accept(&self, id: &Arc<IdCore>, p: Option<ConnParam>) -> Result<()> {
        let ps = id.ps();
        let ud = kid::is_ud(id);
        let (qp, ece) = qp_and_ece(id, true)?;
        if qp.is_none() && p.is_none() {
            return Err(Errno::EINVAL);
        }
        kid::with_handle_then(
            id,
            |u, h, st| {
                if let Some(p) = &p {
                    check_depths(ps, st, p)?;
                    if p.initiator_depth != RDMA_MAX_INIT_DEPTH {
                        st.initiator_depth = p.initiator_depth;
                    }
                    if p.responder_resources != RDMA_MAX_RESP_RES {
                        st.responder_resources = p.responder_resources;
                    }
                }
                if qp.is_some() && !ud {
                    to_rts(u, id, h, st)?;
                }
                let (qpn, srq) = qp.unwrap_or_else(|| p.as_ref().map_or((0, false), |p| (p.qp_num, p.srq != 0)));
                Ucma::accept_cmd(h, st.key, |c| kernel_conn(c, qpn, srq, st, p.as_ref()), ece)
            },
            |u, cmd| {
                u.send_accept(&cmd).inspect_err(|_| {
                    let _ = kid::qp_to(id, IBV_QPS_ERR);
                })
            },
        )?;
        if ud {
            // A datagram "connection" is done once the reply is sent.
            if id.is_sync() {
                id.ack_stored_event()?;
            }
            return Ok(());
        }
        if id.is_sync() {
            id.complete()?;
        }
        Ok(())
    }

    fn reject(&self, id: &Arc<IdCore>, data: &[u8], vendor_reason: bool) -> Result<()> {
        let reason = if vendor_reason { REJ_VENDOR_OPTION_NOT_SUPPORTED } else { 0 };
        kid::command(id, false, |u, h, _| u.reject(h, reason, data))
    }

    fn establish(&self, id: &Arc<IdCore>) -> Result<()> {
        kid::command(id, false, |u, h, _| u.rtu(h))
    }

    fn notify(&self, id: &Arc<IdCore>, event: u32) -> Result<()> {
        kid::command(id, false, |u, h, _| u.notify(h, event))
    }

    fn disconnect(&self, id: &Arc<IdCore>) -> Result<()> {
        kid::command(id, false, |u, h, dev| {
            // Outstanding work flushes (IB/RoCE) or drains (iWARP) first.
            let d = dev.ok_or(Errno::EINVAL)?;
            kid::qp_to(id, if d.is_iwarp() { IBV_QPS_SQD } else { IBV_QPS_ERR })?;
            u.disconnect(h)
        })?;
        if id.is_sync() {
            id.complete()?;
        }
        Ok(())
    }

    fn init_qp_attr(&self, id: &Arc<IdCore>, attr: &mut ibv_qp_attr, mask: &mut i32) -> Result<()> {
        let ud = kid::is_ud(id);
        let ka = kid::command(id, false, |u, h, _| {
            if ud {
                // UD QPs go straight to RTS: the kernel's answer is for INIT only.
                match attr.qp_state {
                    IBV_QPS_RTR => return Ok(None),
                    IBV_QPS_RTS => return Ok(None),
                    _ => {}
                }
            }
            let mut ka = ib_uverbs_qp_attr::default();
            u.init_qp_attr(h, attr.qp_state, &mut ka).map(|()| Some(ka))
        })?;
        *mask = match ka {
            Some(ka) => convert::qp_attr(&ka, attr),
            None if attr.qp_state == IBV_QPS_RTS => {
                attr.sq_psn = 0;
                (IBV_QP_STATE | IBV_QP_SQ_PSN) as i32
            }
            None => IBV_QP_STATE as i32,
        };
        Ok(())
    }

    fn join_multicast(&self, id: &Arc<IdCore>, addr: &[u8], join_flags: u32, context: usize) -> Result<()> {
        let mc = kid::add_mc(id, addr, context, join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER);
        match kid::command(id, true, |u, h, _| u.join_mcast(h, mc.key, addr, join_flags)) {
            Ok(handle) => mc.handle.store(handle, std::sync::atomic::Ordering::Relaxed),
            Err(e) => {
                kid::take_mc(id, addr);
                return Err(e);
            }
        }
        if id.is_sync() {
            id.complete()?;
        }
        Ok(())
    }

    fn leave_multicast(&self, id: &Arc<IdCore>, addr: &[u8]) -> Result<()> {
        let mc = kid::take_mc(id, addr).ok_or(Errno(libc::EADDRNOTAVAIL))?;
        kid::detach(id, &mc);
        id.drop_queued_mc(mc.context);
        let handle = mc.handle.load(std::sync::atomic::Ordering::Relaxed);
        if handle != u32::MAX {
            // Written on the id's file, which owns the membership.
            kid::command(id, false, |u, _, _| u.leave_mcast(handle))?;
        }
        Ok(())
    }

    fn set_option(&self, id: &Arc<IdCore>, opt: &Opt) -> Result<()> {
        let (level, name, val): (i32, i32, Vec<u8>) = match opt {
            Opt::Tos(v) => (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, vec![*v]),
            Opt::ReuseAddr(v) => (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, (*v as i32).to_ne_bytes().to_vec()),
            Opt::AfOnly(v) => (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, (*v as i32).to_ne_bytes().to_vec()),
            Opt::AckTimeout(v) => (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, vec![*v]),
            Opt::IbPath(v) => (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, v.clone()),
        };
        kid::command(id, true, |u, h, _| u.set_option(h, level as u32, name as u32, &val))?;
        // The kernel itself reports ROUTE_RESOLVED for a path given this way.
        if matches!(opt, Opt::IbPath(_)) && id.is_sync() {
            id.complete()?;
        }
        Ok(())
    }

    fn destroy(&self, id: &Arc<IdCore>) {
        destroy(id)
    }
}
