//! rdma_create_id(3), rdma_destroy_id(3), rdma_migrate_id(3),
//! rdma_set_option(3), rdma_get_src_port(3), rdma_get_dst_port(3),
//! rdma_write_cm_event, rdma_set_local_ece(3), rdma_get_remote_ece(3).

use super::args::{non_null, out};
use crate::cm::{options, IdBox};
use crate::sys::{Errno, Result};
use rdma_abi::cma::*;
use rdma_abi::verbs::ibv_ece;
use std::ffi::c_void;

entry! {
    fn rdma_create_id(
        channel: *mut rdma_event_channel,
        id: *mut *mut rdma_cm_id,
        context: *mut c_void,
        ps: rdma_port_space,
    ) -> i32 {
        non_null(id)?;
        let new = IdBox::create_with(channel, context, ps, crate::backend::created)?;
        // SAFETY: checked non-NULL; the caller gives a writable slot.
        unsafe { out(id, new) }?;
        Ok(0)
    }
}

entry! {
    fn rdma_destroy_id(id: *mut rdma_cm_id) -> i32 {
        IdBox::destroy(id).map(|()| 0)
    }
}

entry! {
    fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> i32 {
        IdBox::migrate(id, channel).map(|()| 0)
    }
}

entry! {
    fn rdma_set_option(id: *mut rdma_cm_id, level: i32, optname: i32, optval: *mut c_void, optlen: usize) -> i32 {
        let core = IdBox::lookup(id)?;
        non_null(optval)?;
        if optlen > 64 * 1024 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: the caller promises optlen readable bytes at optval.
        let val = unsafe { std::slice::from_raw_parts(optval as *const u8, optlen) };
        let opt = options::parse(level, optname, val)?;
        crate::backend::set_option(crate::backend::device().ok(), &core, opt)?;
        Ok(0)
    }
}

/// The port of one side of `route.addr`, in network byte order.
fn port_of(sa: &rdma_sockaddr) -> u16 {
    // SAFETY: reading the family, then the member that family selects.
    unsafe {
        match sa.addr.sa_family as i32 {
            libc::AF_INET => sa.sin.sin_port,
            libc::AF_INET6 => sa.sin6.sin6_port,
            AF_IB => {
                let sib = &*(sa as *const rdma_sockaddr as *const sockaddr_ib);
                ((u64::from_be(sib.sib_sid) & 0xffff) as u16).to_be()
            }
            _ => 0,
        }
    }
}

fn port(id: *mut rdma_cm_id, dst: bool) -> Result<u16> {
    IdBox::lookup(id)?.with_public(|p| port_of(if dst { &p.route.addr.dst } else { &p.route.addr.src }))
}

entry! {
    fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
        port(id, false)
    }
}

entry! {
    fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
        port(id, true)
    }
}

entry! {
    fn rdma_write_cm_event(id: *mut rdma_cm_id, event: rdma_cm_event_type, status: i32, arg: u64) -> i32 {
        IdBox::write_user_event(id, event, status, arg).map(|()| 0)
    }
}

entry! {
    fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> i32 {
        let core = IdBox::lookup(id)?;
        non_null(ece)?;
        // SAFETY: non-NULL; the caller gives a readable ibv_ece.
        let e = unsafe { *ece };
        if core.with_public(|p| !p.qp.is_null())? || e.vendor_id == 0 || e.comp_mask != 0 {
            return Err(Errno::EINVAL);
        }
        core.state().set_local_ece(e);
        Ok(0)
    }
}

entry! {
    fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> i32 {
        let core = IdBox::lookup(id)?;
        non_null(ece)?;
        if core.with_public(|p| !p.qp.is_null())? {
            return Err(Errno::EINVAL);
        }
        let mut e = core.state().remote_ece();
        e.comp_mask = 0;
        // SAFETY: non-NULL; the caller gives a writable ibv_ece.
        unsafe { out(ece, e) }?;
        Ok(0)
    }
}
