//! rdma_listen(3), rdma_get_request(3), rdma_connect(3), rdma_accept(3),
//! rdma_reject(3), rdma_reject_ece, rdma_notify(3), rdma_disconnect(3),
//! rdma_establish(3), rdma_init_qp_attr(3).

use super::args::{non_null, out};
use crate::backend;
use crate::cm::IdBox;
use crate::sys::{Errno, Result};
use rdma_abi::cma::*;
use std::ffi::c_void;

/// The man pages' limit on private data, checked before any transport limit.
fn check_private(data: *const c_void, len: u8) -> Result<()> {
    if len > 0 && data.is_null() {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

entry! {
    fn rdma_listen(id: *mut rdma_cm_id, backlog: i32) -> i32 {
        IdBox::lookup(id)?;
        let _ = backlog;
        backend::device().map(|_| 0)
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
        IdBox::lookup(child)?.with_public(|c| c.event = ev)?;
        // SAFETY: checked non-NULL above.
        unsafe { out(id, child) }.map(|()| 0)
    }
}

entry! {
    fn rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> i32 {
        IdBox::lookup(id)?;
        if !conn_param.is_null() {
            // SAFETY: non-NULL; the caller gives a readable rdma_conn_param.
            let p = unsafe { &*conn_param };
            check_private(p.private_data, p.private_data_len)?;
        }
        backend::device().map(|_| 0)
    }
}

entry! {
    fn rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> i32 {
        IdBox::lookup(id)?;
        if !conn_param.is_null() {
            // SAFETY: non-NULL; the caller gives a readable rdma_conn_param.
            let p = unsafe { &*conn_param };
            check_private(p.private_data, p.private_data_len)?;
        }
        backend::device().map(|_| 0)
    }
}

entry! {
    fn rdma_reject(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> i32 {
        IdBox::lookup(id)?;
        check_private(private_data, private_data_len)?;
        backend::device().map(|_| 0)
    }
}

entry! {
    fn rdma_reject_ece(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> i32 {
        IdBox::lookup(id)?;
        check_private(private_data, private_data_len)?;
        backend::device().map(|_| 0)
    }
}

entry! {
    fn rdma_notify(id: *mut rdma_cm_id, event: u32) -> i32 {
        IdBox::lookup(id)?;
        let _ = event;
        backend::device().map(|_| 0)
    }
}

entry! {
    fn rdma_disconnect(id: *mut rdma_cm_id) -> i32 {
        IdBox::lookup(id)?;
        backend::device().map(|_| 0)
    }
}

entry! {
    fn rdma_establish(id: *mut rdma_cm_id) -> i32 {
        let core = IdBox::lookup(id)?;
        // Only for ids whose QP the application drives itself.
        if core.with_public(|p| !p.qp.is_null())? {
            return Err(Errno::EINVAL);
        }
        backend::device().map(|_| 0)
    }
}

entry! {
    fn rdma_init_qp_attr(id: *mut rdma_cm_id, qp_attr: *mut c_void, qp_attr_mask: *mut i32) -> i32 {
        IdBox::lookup(id)?;
        non_null(qp_attr)?;
        non_null(qp_attr_mask)?;
        backend::device().map(|_| 0)
    }
}
