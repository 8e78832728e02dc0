//! rdma_create_qp(3), rdma_create_qp_ex, rdma_destroy_qp(3),
//! rdma_create_srq(3), rdma_create_srq_ex, rdma_destroy_srq(3),
//! rdma_create_ep(3), rdma_destroy_ep(3).

use super::args::{non_null, out};
use crate::backend;
use crate::cm::IdBox;
use crate::sys::Result;
use crate::verbs::{ibv_destroy_qp, ibv_destroy_srq};
use rdma_abi::cma::*;
use std::ffi::c_void;

entry! {
    fn rdma_create_qp(id: *mut rdma_cm_id, pd: *mut c_void, qp_init_attr: *mut c_void) -> i32 {
        IdBox::lookup(id)?;
        non_null(qp_init_attr)?;
        let _ = pd;
        backend::device().map(|_| 0)
    }
}

entry! {
    fn rdma_create_qp_ex(id: *mut rdma_cm_id, qp_init_attr: *mut c_void) -> i32 {
        IdBox::lookup(id)?;
        non_null(qp_init_attr)?;
        backend::device().map(|_| 0)
    }
}

/// Destroys the QP on an id, if there is one.
fn destroy_qp(id: *mut rdma_cm_id) -> Result<()> {
    let core = IdBox::lookup(id)?;
    let qp = core.with_public(|p| std::mem::replace(&mut p.qp, std::ptr::null_mut()))?;
    if !qp.is_null() {
        // SAFETY: a QP the id held; it is detached above so destroyed once.
        unsafe { ibv_destroy_qp(qp) };
    }
    Ok(())
}

entry! {
    fn rdma_destroy_qp(id: *mut rdma_cm_id) -> () {
        destroy_qp(id)
    }
}

entry! {
    fn rdma_create_srq(id: *mut rdma_cm_id, pd: *mut c_void, attr: *mut c_void) -> i32 {
        IdBox::lookup(id)?;
        non_null(attr)?;
        let _ = pd;
        backend::device().map(|_| 0)
    }
}

entry! {
    fn rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut c_void) -> i32 {
        IdBox::lookup(id)?;
        non_null(attr)?;
        backend::device().map(|_| 0)
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

entry! {
    fn rdma_create_ep(
        id: *mut *mut rdma_cm_id,
        res: *mut rdma_addrinfo,
        pd: *mut c_void,
        qp_init_attr: *mut c_void,
    ) -> i32 {
        non_null(id)?;
        non_null(res)?;
        // SAFETY: non-NULL; the caller passes an rdma_addrinfo (from rdma_getaddrinfo).
        let r = unsafe { &*res };
        let new = IdBox::create(std::ptr::null_mut(), std::ptr::null_mut(), r.ai_port_space as u32, Some(r.ai_qp_type as u32))?;
        let _ = (pd, qp_init_attr);
        if let Err(e) = backend::device() {
            IdBox::destroy(new)?;
            return Err(e);
        }
        // SAFETY: checked non-NULL above.
        unsafe { out(id, new) }.map(|()| 0)
    }
}

entry! {
    fn rdma_destroy_ep(id: *mut rdma_cm_id) -> () {
        destroy_qp(id)?;
        destroy_srq(id)?;
        IdBox::destroy(id)
    }
}
