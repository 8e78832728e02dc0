//! rdma_create_qp(3), rdma_create_qp_ex, rdma_destroy_qp(3),
//! rdma_create_srq(3), rdma_create_srq_ex, rdma_destroy_srq(3),
//! rdma_create_ep(3), rdma_destroy_ep(3).

use super::args::{non_null, out};
use crate::backend;
use crate::cm::IdBox;
use crate::qp::{self, EpAttr};
use crate::sys::{Errno, Result};
use crate::verbs::ibv_destroy_srq;
use rdma_abi::cma::*;
use rdma_abi::verbs::*;

entry! {
    fn rdma_create_qp(id: *mut rdma_cm_id, pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> i32 {
        let core = IdBox::lookup(id)?;
        non_null(qp_init_attr)?;
        // SAFETY: non-NULL; the caller's attribute block (caps are written back).
        qp::create(&core, pd, unsafe { &mut *qp_init_attr }).map(|()| 0)
    }
}

entry! {
    fn rdma_create_qp_ex(id: *mut rdma_cm_id, qp_init_attr: *mut ibv_qp_init_attr_ex) -> i32 {
        let core = IdBox::lookup(id)?;
        non_null(qp_init_attr)?;
        // SAFETY: non-NULL; the caller's attribute block.
        qp::create_ex(&core, unsafe { &mut *qp_init_attr }).map(|()| 0)
    }
}

entry! {
    fn rdma_destroy_qp(id: *mut rdma_cm_id) -> () {
        qp::destroy(id)
    }
}

entry! {
    fn rdma_create_srq(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> i32 {
        let core = IdBox::lookup(id)?;
        non_null(attr)?;
        // SAFETY: non-NULL; the caller's attribute block (comes back updated).
        qp::create_srq(&core, pd, unsafe { &mut *attr }).map(|()| 0)
    }
}

entry! {
    fn rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut ibv_srq_init_attr_ex) -> i32 {
        let core = IdBox::lookup(id)?;
        non_null(attr)?;
        // SAFETY: non-NULL; the caller's attribute block (the PD is written back).
        qp::create_srq_ex(&core, unsafe { &mut *attr }).map(|()| 0)
    }
}

fn destroy_srq(id: *mut rdma_cm_id) -> Result<()> {
    let core = IdBox::lookup(id)?;
    let srq = core.with_public(|p| std::mem::replace(&mut p.srq, std::ptr::null_mut()))?;
    if !srq.is_null() {
        // SAFETY: an SRQ the id held; detached above so destroyed once.
        unsafe { ibv_destroy_srq(srq) };
    }
    Ok(())
}

entry! {
    fn rdma_destroy_srq(id: *mut rdma_cm_id) -> () {
        destroy_srq(id)
    }
}

/// Copies one socket address out of an rdma_addrinfo.
///
/// # Safety
/// `p` is NULL or valid for `len` bytes.
unsafe fn addr_bytes(p: *const libc::sockaddr, len: u32) -> Option<Vec<u8>> {
    // SAFETY: per the contract.
    (!p.is_null() && len > 0).then(|| unsafe { std::slice::from_raw_parts(p as *const u8, len as usize) }.to_vec())
}

/// The body of rdma_create_ep once the synchronous id exists.
fn setup_ep(new: *mut rdma_cm_id, r: &rdma_addrinfo, pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> Result<()> {
    let b = backend::device()?;
    let core = IdBox::lookup(new)?;
    // SAFETY: addresses of an rdma_addrinfo, valid for their lengths.
    let (src, dst) = unsafe { (addr_bytes(r.ai_src_addr, r.ai_src_len), addr_bytes(r.ai_dst_addr, r.ai_dst_len)) };
    if r.ai_flags & RAI_PASSIVE != 0 {
        b.bind(&core, src.as_deref().ok_or(Errno::EINVAL)?)?;
        if !attr.is_null() {
            // SAFETY: non-NULL; the caller's attribute block, copied.
            let mut a = unsafe { *attr };
            a.qp_type = r.ai_qp_type as u32;
            core.state().extra_mut().ep = Some(EpAttr { pd, attr: a });
        }
        return Ok(());
    }
    b.resolve_addr(&core, src.as_deref(), dst.as_deref().ok_or(Errno::EINVAL)?, 2000)?;
    b.resolve_route(&core, 2000)?;
    if !attr.is_null() {
        // SAFETY: non-NULL; the caller's attribute block (caps are written back).
        let a = unsafe { &mut *attr };
        a.qp_type = r.ai_qp_type as u32;
        qp::create(&core, pd, a)?;
    }
    Ok(())
}

entry! {
    fn rdma_create_ep(
        id: *mut *mut rdma_cm_id,
        res: *mut rdma_addrinfo,
        pd: *mut ibv_pd,
        qp_init_attr: *mut ibv_qp_init_attr,
    ) -> i32 {
        non_null(id)?;
        non_null(res)?;
        // SAFETY: non-NULL; the caller passes an rdma_addrinfo (from rdma_getaddrinfo).
        let r = unsafe { &*res };
        let new = IdBox::create(std::ptr::null_mut(), std::ptr::null_mut(), r.ai_port_space as u32, Some(r.ai_qp_type as u32))?;
        if let Err(e) = setup_ep(new, r, pd, qp_init_attr) {
            let _ = qp::destroy(new);
            IdBox::destroy(new)?;
            return Err(e);
        }
        // SAFETY: checked non-NULL above.
        unsafe { out(id, new) }.map(|()| 0)
    }
}

entry! {
    fn rdma_destroy_ep(id: *mut rdma_cm_id) -> () {
        qp::destroy(id)?;
        destroy_srq(id)?;
        IdBox::destroy(id)
    }
}
