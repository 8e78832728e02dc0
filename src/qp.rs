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

/// CQs and channels (cq, channel) the library made for an id's QP, send and
/// receive (destroyed with it); no allocation of their own.
#[derive(Default, Clone, Copy)]
pub struct LibCqs {
    pub list: [Option<(usize, usize)>; 2],
}

impl LibCqs {
    fn destroy(self) {
        for (cq, ch) in self.list.into_iter().flatten() {
            // SAFETY: CQs and channels made by `make_cq`, destroyed once.
            unsafe {
                ibv_destroy_cq(cq as *mut ibv_cq);
                ibv_destroy_comp_channel(ch as *mut ibv_comp_channel);
            }
        }
    }
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

/// A UD QP's RTR and RTS as upstream makes them: the state alone, then RTS
/// with send PSN 0 (programs see the same QP on every device).
///
/// # Safety
/// `qp` is a live QP in INIT.
unsafe fn ud_to_rts(qp: *mut ibv_qp) -> Result<()> {
    // SAFETY: all-zero is a valid ibv_qp_attr.
    let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
    attr.qp_state = IBV_QPS_RTR;
    // SAFETY: per the contract; the attributes name the state only.
    crate::verbs::verr(unsafe { ibv_modify_qp(qp, &mut attr, IBV_QP_STATE as i32) })?;
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn = 0;
    // SAFETY: as above, state and send PSN.
    crate::verbs::verr(unsafe { ibv_modify_qp(qp, &mut attr, (IBV_QP_STATE | IBV_QP_SQ_PSN) as i32) })
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

/// rdma_create_qp: the classic block goes through `create_ex` as an extended
/// one naming only its PD (as upstream's does), and comes back updated (caps,
/// CQs, SRQ).
pub fn create(core: &Arc<crate::cm::IdCore>, pd: *mut ibv_pd, attr: &mut ibv_qp_init_attr) -> Result<()> {
    // SAFETY: all-zero is a valid ibv_qp_init_attr_ex.
    let mut ax: ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
    *classic(&mut ax) = *attr;
    ax.comp_mask = IBV_QP_INIT_ATTR_PD;
    ax.pd = pd;
    let r = create_ex(core, &mut ax);
    *attr = *classic(&mut ax);
    r
}

/// The classic fields an extended QP attribute block begins with.
fn classic(ax: &mut ibv_qp_init_attr_ex) -> &mut ibv_qp_init_attr {
    // SAFETY: ibv_qp_init_attr_ex begins with exactly the ibv_qp_init_attr fields
    // (the layout tests prove both).
    unsafe { &mut *(ax as *mut ibv_qp_init_attr_ex as *mut ibv_qp_init_attr) }
}

/// rdma_create_qp_ex, with upstream's rules: one QP per id (EINVAL for a
/// second); no PD means the id's, written into `ax`; CQs the library makes
/// when none are given; the id's SRQ when the block names none. A block that
/// asks for more than a PD goes to the provider's extended create
/// (EOPNOTSUPP from a provider without one, as libibverbs answers); on
/// success the id's PD becomes the QP's. `core`: the caller looked the id up.
pub fn create_ex(core: &Arc<crate::cm::IdCore>, ax: &mut ibv_qp_init_attr_ex) -> Result<()> {
    let id = core.ptr().0;
    backend::device()?; // ENODEV without a device, before anything else
    let (verbs, id_pd, has_qp, id_srq) = core.with_public(|p| (p.verbs, p.pd, !p.qp.is_null(), p.srq))?;
    if has_qp {
        return Err(Errno::EINVAL);
    }
    if ax.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || ax.pd.is_null() {
        ax.comp_mask |= IBV_QP_INIT_ATTR_PD;
        ax.pd = id_pd;
    }
    // SAFETY: a non-NULL pd is a PD the application or the library allocated.
    if verbs.is_null() || ax.pd.is_null() || unsafe { (*ax.pd).context } != verbs {
        return Err(Errno::EINVAL);
    }
    if ax.qp_type == IBV_QPT_XRC_RECV && (ax.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0 || ax.xrcd.is_null()) {
        // Upstream opens an XRC domain of its own here; this library does not.
        return Err(Errno(libc::EOPNOTSUPP));
    }
    let mut made = LibCqs::default();
    let mut chans = (std::ptr::null_mut(), std::ptr::null_mut());
    if ax.send_cq.is_null() {
        let (ch, cq) = make_cq(verbs, id, ax.cap.max_send_wr)?;
        made.list[0] = Some((cq as usize, ch as usize));
        ax.send_cq = cq;
        chans.0 = ch;
    }
    if ax.recv_cq.is_null() {
        match make_cq(verbs, id, ax.cap.max_recv_wr) {
            Ok((ch, cq)) => {
                made.list[1] = Some((cq as usize, ch as usize));
                ax.recv_cq = cq;
                chans.1 = ch;
            }
            Err(e) => {
                made.destroy();
                return Err(e);
            }
        }
    }
    if ax.srq.is_null() {
        ax.srq = id_srq;
    }
    let qp = if ax.comp_mask == IBV_QP_INIT_ATTR_PD {
        // SAFETY: a PD of the id's device and a complete attribute block.
        unsafe { ibv_create_qp(ax.pd, classic(ax)) }
    } else {
        // SAFETY: the id's open device context.
        match unsafe { ctx_op!(verbs, create_qp_ex) } {
            // SAFETY: the provider's own operation, on its context and a complete block.
            Some(f) => unsafe { f(verbs, ax) },
            None => {
                crate::sys::set_errno(Errno(libc::EOPNOTSUPP));
                std::ptr::null_mut()
            }
        }
    };
    if qp.is_null() {
        let e = Errno::last();
        made.destroy();
        return Err(e);
    }
    let ud = ax.qp_type == IBV_QPT_UD;
    // SAFETY (all calls): the QP we just made.
    let r = unsafe { modify_to(core, qp, IBV_QPS_INIT) }
        .and_then(|()| if ud { unsafe { ud_to_rts(qp) } } else { Ok(()) })
        // Upstream's init_ece, whatever the backend: the QP's ECE is what REQ/REP carry.
        .and_then(|()| crate::ece::on_create_qp(core, qp));
    if let Err(e) = r {
        // SAFETY: the QP we just made.
        unsafe { ibv_destroy_qp(qp) };
        made.destroy();
        return Err(e);
    }
    let (send_cq, recv_cq) = (ax.send_cq, ax.recv_cq);
    core.with_state_public(|st, p| {
        p.qp = qp;
        // SAFETY: the QP we just made.
        p.pd = unsafe { (*qp).pd };
        if !chans.0.is_null() {
            p.send_cq_channel = chans.0;
            p.send_cq = send_cq;
        }
        if !chans.1.is_null() {
            p.recv_cq_channel = chans.1;
            p.recv_cq = recv_cq;
        }
        if p.send_cq.is_null() {
            p.send_cq = send_cq;
        }
        if p.recv_cq.is_null() {
            p.recv_cq = recv_cq;
        }
        if made.list.iter().any(Option::is_some) {
            st.extra_mut().lib_cqs = Some(made);
        }
    })
}

/// rdma_destroy_qp: the QP, then the CQs the library made for it. The id's
/// QP and CQ fields go in one hold of its lock: the CQ fields name the QP's
/// CQs (the library's or the application's), none once it is gone, as
/// upstream's are NULL then.
pub fn destroy(id: *mut rdma_cm_id) -> Result<()> {
    let core = IdBox::lookup(id)?;
    // Not while a backend thread modifies it (IdCore::lock_qp).
    let qp_guard = core.lock_qp();
    let (qp, made) = core.with_state_public(|st, p| {
        p.send_cq = std::ptr::null_mut();
        p.recv_cq = std::ptr::null_mut();
        p.send_cq_channel = std::ptr::null_mut();
        p.recv_cq_channel = std::ptr::null_mut();
        (std::mem::replace(&mut p.qp, std::ptr::null_mut()), st.take_extra(|x| x.lib_cqs.take()))
    })?;
    if !qp.is_null() {
        // SAFETY: a QP the id held; detached above so destroyed once.
        unsafe { ibv_destroy_qp(qp) };
    }
    drop(qp_guard);
    if let Some(made) = made {
        made.destroy();
    }
    Ok(())
}

/// rdma_create_srq: a basic SRQ through `create_srq_ex`, as upstream's
/// does; the block comes back updated.
pub fn create_srq(core: &Arc<crate::cm::IdCore>, pd: *mut ibv_pd, a: &mut ibv_srq_init_attr) -> Result<()> {
    // SAFETY: all-zero is a valid ibv_srq_init_attr_ex.
    let mut ax: ibv_srq_init_attr_ex = unsafe { std::mem::zeroed() };
    ax.srq_context = a.srq_context;
    ax.attr = a.attr;
    ax.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
    ax.srq_type = IBV_SRQT_BASIC;
    ax.pd = pd;
    let r = create_srq_ex(core, &mut ax);
    a.srq_context = ax.srq_context;
    a.attr = ax.attr;
    r
}

/// rdma_create_srq_ex, with upstream's rules: the block must name its type
/// (EINVAL); no PD means the id's, written into `ax`. A basic SRQ on just a
/// PD is the classic create (as libibverbs' `ibv_create_srq_ex` does), anything
/// else the provider's extended one (EOPNOTSUPP without it). An XRC SRQ must
/// bring its XRC domain and CQ: upstream opens a domain of its own there, this
/// library does not (EOPNOTSUPP). `core`: the caller looked the id up.
pub fn create_srq_ex(core: &Arc<crate::cm::IdCore>, ax: &mut ibv_srq_init_attr_ex) -> Result<()> {
    backend::device()?;
    if ax.comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 {
        return Err(Errno::EINVAL);
    }
    let (verbs, id_pd) = core.with_public(|p| (p.verbs, p.pd))?;
    if ax.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || ax.pd.is_null() {
        ax.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
        ax.pd = id_pd;
    }
    if ax.pd.is_null() {
        return Err(Errno::EINVAL);
    }
    let given = |bit: u32, p: bool| ax.comp_mask & bit != 0 && p;
    if ax.srq_type == IBV_SRQT_XRC
        && !(given(IBV_SRQ_INIT_ATTR_XRCD, !ax.xrcd.is_null()) && given(IBV_SRQ_INIT_ATTR_CQ, !ax.cq.is_null()))
    {
        return Err(Errno(libc::EOPNOTSUPP));
    }
    let classic = ax.comp_mask & !(IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE) == 0 && ax.srq_type == IBV_SRQT_BASIC;
    let srq = if classic {
        // SAFETY: ibv_srq_init_attr_ex begins with exactly the ibv_srq_init_attr
        // fields; a live PD.
        unsafe { ibv_create_srq(ax.pd, ax as *mut ibv_srq_init_attr_ex as *mut ibv_srq_init_attr) }
    } else {
        // SAFETY: the id's open device context (or NULL: no operation).
        match unsafe { ctx_op!(verbs, create_srq_ex) } {
            // SAFETY: the provider's own operation, on its context and a complete block.
            Some(f) => unsafe { f(verbs, ax) },
            None => {
                crate::sys::set_errno(Errno(libc::EOPNOTSUPP));
                std::ptr::null_mut()
            }
        }
    };
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
pub fn ep_child_qp(listener: &Arc<crate::cm::IdCore>, child: &Arc<crate::cm::IdCore>) -> Result<()> {
    let ep = listener.state().extra().and_then(|x| x.ep.as_ref()).map(|e| (e.pd, e.attr));
    if let Some((pd, mut attr)) = ep {
        create(child, pd, &mut attr)?;
    }
    Ok(())
}
