//! rdma_listen(3), rdma_get_request(3), rdma_connect(3), rdma_accept(3),
//! rdma_reject(3), rdma_reject_ece, rdma_notify(3), rdma_disconnect(3),
//! rdma_establish(3), rdma_init_qp_attr(3).

use super::args::{non_null, out};
use crate::backend::{self, ConnParam};
use crate::cm::IdBox;
use crate::sys::{Errno, Result};
use rdma_abi::cma::*;
use rdma_abi::verbs::ibv_qp_attr;
use std::ffi::c_void;

/// Private data from C: NULL with a length is an error.
///
/// # Safety
/// `data` is NULL or valid for `len` bytes.
unsafe fn private(data: *const c_void, len: u8) -> Result<Vec<u8>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if data.is_null() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: per the contract.
    Ok(unsafe { std::slice::from_raw_parts(data as *const u8, len as usize) }.to_vec())
}

/// Reads an optional `rdma_conn_param`.
///
/// # Safety
/// `p` is NULL or a readable conn_param whose private data is valid.
unsafe fn conn_param(p: *const rdma_conn_param) -> Result<Option<ConnParam>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: per the contract.
    let p = unsafe { &*p };
    Ok(Some(ConnParam {
        // SAFETY: per the contract.
        private_data: unsafe { private(p.private_data, p.private_data_len) }?,
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        flow_control: p.flow_control,
        retry_count: p.retry_count,
        rnr_retry_count: p.rnr_retry_count,
        srq: p.srq,
        qp_num: p.qp_num,
    }))
}

entry! {
    fn rdma_listen(id: *mut rdma_cm_id, backlog: i32) -> i32 {
        let core = IdBox::lookup(id)?;
        backend::device()?.listen(&core, backlog).map(|()| 0)
    }
}

entry! {
    fn rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> i32 {
        let core = IdBox::lookup(listen)?;
        non_null(id)?;
        if !core.is_sync() {
            return Err(Errno::EINVAL);
        }
        core.complete()?;
        let ev = core.with_public(|p| p.event)?;
        // SAFETY: complete() stored a live event in listen->event.
        let (kind, child) = unsafe { ((*ev).event, (*ev).id) };
        if kind != RDMA_CM_EVENT_CONNECT_REQUEST {
            return Err(Errno::EINVAL);
        }
        // The request now belongs to the new id: its next call acks it.
        core.with_public(|p| p.event = std::ptr::null_mut())?;
        let child_core = IdBox::lookup(child)?;
        child_core.with_public(|c| c.event = ev)?;
        if let Err(e) = crate::qp::ep_child_qp(&core, &child_core) {
            // The new id is never handed out: it goes now, acking its request
            // (upstream leaves both behind, and the peer waits for its CM to
            // time out; the kernel rejects a request whose id is destroyed).
            drop(child_core);
            let _ = IdBox::destroy(child);
            return Err(e);
        }
        // SAFETY: checked non-NULL above.
        unsafe { out(id, child) }.map(|()| 0)
    }
}

entry! {
    fn rdma_connect(id: *mut rdma_cm_id, conn_param_: *mut rdma_conn_param) -> i32 {
        let core = IdBox::lookup(id)?;
        // SAFETY: the caller's optional conn_param.
        let p = unsafe { conn_param(conn_param_) }?.unwrap_or(ConnParam {
            responder_resources: RDMA_MAX_RESP_RES,
            initiator_depth: RDMA_MAX_INIT_DEPTH,
            retry_count: 7,
            rnr_retry_count: 7,
            ..Default::default()
        });
        backend::device()?.connect(&core, p).map(|()| 0)
    }
}

entry! {
    fn rdma_accept(id: *mut rdma_cm_id, conn_param_: *mut rdma_conn_param) -> i32 {
        let core = IdBox::lookup(id)?;
        // SAFETY: the caller's optional conn_param.
        let p = unsafe { conn_param(conn_param_) }?;
        backend::device()?.accept(&core, p).map(|()| 0)
    }
}

entry! {
    fn rdma_reject(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> i32 {
        let core = IdBox::lookup(id)?;
        // SAFETY: the caller's private data.
        let d = unsafe { private(private_data, private_data_len) }?;
        backend::device()?.reject(&core, &d, false).map(|()| 0)
    }
}

entry! {
    fn rdma_reject_ece(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> i32 {
        let core = IdBox::lookup(id)?;
        // SAFETY: the caller's private data.
        let d = unsafe { private(private_data, private_data_len) }?;
        backend::device()?.reject(&core, &d, true).map(|()| 0)
    }
}

entry! {
    fn rdma_notify(id: *mut rdma_cm_id, event: u32) -> i32 {
        let core = IdBox::lookup(id)?;
        backend::device()?.notify(&core, event).map(|()| 0)
    }
}

entry! {
    fn rdma_disconnect(id: *mut rdma_cm_id) -> i32 {
        let core = IdBox::lookup(id)?;
        backend::device()?.disconnect(&core).map(|()| 0)
    }
}

entry! {
    fn rdma_establish(id: *mut rdma_cm_id) -> i32 {
        let core = IdBox::lookup(id)?;
        // Only for ids whose QP the application drives itself.
        if core.with_public(|p| !p.qp.is_null())? {
            return Err(Errno::EINVAL);
        }
        backend::device()?.establish(&core).map(|()| 0)
    }
}

entry! {
    fn rdma_init_qp_attr(id: *mut rdma_cm_id, qp_attr: *mut ibv_qp_attr, qp_attr_mask: *mut i32) -> i32 {
        let core = IdBox::lookup(id)?;
        non_null(qp_attr)?;
        non_null(qp_attr_mask)?;
        let b = backend::device()?;
        // SAFETY: non-NULL; the caller's attribute block and mask.
        let (attr, mask) = unsafe { (&mut *qp_attr, &mut *qp_attr_mask) };
        b.init_qp_attr(&core, attr, mask).map(|()| 0)
    }
}
