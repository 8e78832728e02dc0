//! QPs and SRQs made through the CM (rdma_create_qp(3), rdma_create_srq(3)):
//! library-created CQs when the application gives none (each with its own
//! completion channel and the id as CQ context, so the rdma_verbs.h helpers
//! work), and the first state transitions a backend dictates through
//! `init_qp_attr`.

use crate::backend;
use crate::cm::IdBox;
use crate::sys::{Errno, Result};
use crate::verbs::*;
use rdma_abi::cma::rdma_cm_id;
use rdma_abi::verbs::*;
use std::sync::Arc;

/// CQs and channels the library made for an id (destroyed with its QP).
#[derive(Default)]
pub struct LibCqs {
    pub list: Vec<(usize, usize)>,
}

fn make_cq(verbs: *mut ibv_context, id: *mut rdma_cm_id, depth: u32) -> Result<(*mut ibv_comp_channel, *mut ibv_cq)> {
    // SAFETY: verbs is the id's open device context.
    let ch = unsafe { ibv_create_comp_channel(verbs) };
    if ch.is_null() {
        return Err(Errno::last());
    }
    // SAFETY: as above; the id pointer is only stored as the CQ context.
    let cq = unsafe { ibv_create_cq(verbs, depth.max(1) as i32, id.cast(), ch, 0) };
    if cq.is_null() {
        let e = Errno::last();
        // SAFETY: the channel we just made, unused.
        unsafe { ibv_destroy_comp_channel(ch) };
        return Err(e);
    }
    Ok((ch, cq))
}

fn destroy_cqs(list: &[(usize, usize)]) {
    for &(cq, ch) in list {
        // SAFETY: CQs and channels made by `make_cq`, destroyed once.
        unsafe {
            ibv_destroy_cq(cq as *mut ibv_cq);
            ibv_destroy_comp_channel(ch as *mut ibv_comp_channel);
        }
    }
}

/// Moves `qp` to `state` with the attributes the backend gives for this id.
///
/// # Safety
/// `qp` is a live QP (of `id`).
pub unsafe fn modify_to(id: &Arc<crate::cm::IdCore>, qp: *mut ibv_qp, state: u32) -> Result<()> {
    let b = backend::device()?;
    // SAFETY: all-zero is a valid ibv_qp_attr.
    let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
    attr.qp_state = state;
    let mut mask = 0;
    b.init_qp_attr(id, &mut attr, &mut mask)?;
    // SAFETY: a QP of this id, a filled attribute struct.
    crate::verbs::verr(unsafe { ibv_modify_qp(qp, &mut attr, mask) })
}

/// Moves `qp` to the error state (flushing its work requests).
///
/// # Safety
/// `qp` is a live QP.
pub unsafe fn to_error(qp: *mut ibv_qp) {
    // SAFETY: all-zero is a valid ibv_qp_attr.
    let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
    attr.qp_state = IBV_QPS_ERR;
    // SAFETY: a live QP; the attribute names only the state.
    unsafe { ibv_modify_qp(qp, &mut attr, IBV_QP_STATE as i32) };
}

/// rdma_create_qp / rdma_create_qp_ex with a classic attribute block.
pub fn create(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: &mut ibv_qp_init_attr) -> Result<()> {
    let core = IdBox::lookup(id)?;
    let b = backend::device()?;
    let (verbs, id_pd) = core.with_public(|p| (p.verbs, p.pd))?;
    let pd = if pd.is_null() { id_pd } else { pd };
    if verbs.is_null() || pd.is_null() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: pd is a PD the application or the library allocated.
    if unsafe { (*pd).context } != verbs {
        return Err(Errno::EINVAL);
    }
    let mut made = Vec::new();
    let mut chans = (std::ptr::null_mut(), std::ptr::null_mut());
    if attr.send_cq.is_null() {
        let (ch, cq) = make_cq(verbs, id, attr.cap.max_send_wr)?;
        made.push((cq as usize, ch as usize));
        attr.send_cq = cq;
        chans.0 = ch;
    }
    if attr.recv_cq.is_null() {
        match make_cq(verbs, id, attr.cap.max_recv_wr) {
            Ok((ch, cq)) => {
                made.push((cq as usize, ch as usize));
                attr.recv_cq = cq;
                chans.1 = ch;
            }
            Err(e) => {
                destroy_cqs(&made);
                return Err(e);
            }
        }
    }
    // SAFETY: a PD of the id's device and a complete attribute block.
    let qp = unsafe { ibv_create_qp(pd, attr) };
    if qp.is_null() {
        let e = Errno::last();
        destroy_cqs(&made);
        return Err(e);
    }
    let ud = attr.qp_type == IBV_QPT_UD;
    let steps: &[u32] = if ud { &[IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS] } else { &[IBV_QPS_INIT] };
    // SAFETY (both calls): the QP we just made.
    let r = steps.iter().try_for_each(|&s| unsafe { modify_to(&core, qp, s) }).and_then(|()| unsafe { b.qp_created(&core, qp) });
    if let Err(e) = r {
        // SAFETY: the QP we just made.
        unsafe { ibv_destroy_qp(qp) };
        destroy_cqs(&made);
        return Err(e);
    }
    core.with_public(|p| {
        p.qp = qp;
        if p.pd.is_null() {
            p.pd = pd;
        }
        if !chans.0.is_null() {
            p.send_cq_channel = chans.0;
            p.send_cq = attr.send_cq;
        }
        if !chans.1.is_null() {
            p.recv_cq_channel = chans.1;
            p.recv_cq = attr.recv_cq;
        }
        if p.send_cq.is_null() {
            p.send_cq = attr.send_cq;
        }
        if p.recv_cq.is_null() {
            p.recv_cq = attr.recv_cq;
        }
    })?;
    core.state().lib_cqs.list.extend(made);
    Ok(())
}

/// rdma_destroy_qp: the QP, then the CQs the library made for it.
pub fn destroy(id: *mut rdma_cm_id) -> Result<()> {
    let core = IdBox::lookup(id)?;
    {
        // Not while a backend thread modifies it (IdCore::lock_qp).
        let _qp = core.lock_qp();
        let qp = core.with_public(|p| std::mem::replace(&mut p.qp, std::ptr::null_mut()))?;
        if !qp.is_null() {
            // SAFETY: a QP the id held; detached above so destroyed once.
            unsafe { ibv_destroy_qp(qp) };
        }
    }
    let made = std::mem::take(&mut core.state().lib_cqs.list);
    if !made.is_empty() {
        core.with_public(|p| {
            p.send_cq = std::ptr::null_mut();
            p.recv_cq = std::ptr::null_mut();
            p.send_cq_channel = std::ptr::null_mut();
            p.recv_cq_channel = std::ptr::null_mut();
        })?;
        destroy_cqs(&made);
    }
    Ok(())
}

/// rdma_create_qp_ex: the classic path when only a PD is given, the
/// provider's extended create otherwise.
pub fn create_ex(id: *mut rdma_cm_id, ax: &mut ibv_qp_init_attr_ex) -> Result<()> {
    if ax.comp_mask & !(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS) != 0 {
        return Err(Errno(libc::EOPNOTSUPP));
    }
    // SAFETY: ibv_qp_init_attr_ex begins with exactly the ibv_qp_init_attr fields.
    let classic = unsafe { &mut *(ax as *mut ibv_qp_init_attr_ex as *mut ibv_qp_init_attr) };
    let pd = if ax.comp_mask & IBV_QP_INIT_ATTR_PD != 0 { ax.pd } else { std::ptr::null_mut() };
    if ax.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && ax.create_flags != 0 {
        // Flags (e.g. BLOCK_SELF_MCAST_LB) need the provider's create_qp_ex; the
        // classic call cannot carry them. Not offered yet.
        return Err(Errno(libc::EOPNOTSUPP));
    }
    create(id, pd, classic)
}

/// rdma_create_srq: an SRQ on the id's (or the given) PD.
///
/// # Safety
/// `pd` is NULL or a live PD; `attr` points to a writable ibv_srq_init_attr.
pub unsafe fn create_srq(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> Result<()> {
    let core = IdBox::lookup(id)?;
    backend::device()?;
    let id_pd = core.with_public(|p| p.pd)?;
    let pd = if pd.is_null() { id_pd } else { pd };
    if pd.is_null() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: a PD and the caller's attribute block.
    let srq = unsafe { ibv_create_srq(pd, attr) };
    if srq.is_null() {
        return Err(Errno::last());
    }
    core.with_public(|p| p.srq = srq)
}

/// The QP attributes a passive rdma_create_ep remembers for its requests.
pub struct EpAttr {
    pub pd: *mut ibv_pd,
    pub attr: ibv_qp_init_attr,
}
// SAFETY: plain data handed back to verbs on the application's behalf.
unsafe impl Send for EpAttr {}

/// rdma_get_request on an rdma_create_ep listener: the new id gets its QP.
pub fn ep_child_qp(listener: &Arc<crate::cm::IdCore>, child: *mut rdma_cm_id) -> Result<()> {
    let ep = listener.state().ep.as_ref().map(|e| (e.pd, e.attr));
    if let Some((pd, mut attr)) = ep {
        create(child, pd, &mut attr)?;
    }
    Ok(())
}
