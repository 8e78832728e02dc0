//! rdma_join_multicast(3), rdma_join_multicast_ex(3), rdma_leave_multicast(3).

use super::args::{non_null, sockaddr};
use crate::backend;
use crate::cm::IdBox;
use crate::sys::Errno;
use rdma_abi::cma::*;
use std::ffi::c_void;

entry! {
    fn rdma_join_multicast(id: *mut rdma_cm_id, addr: *mut libc::sockaddr, context: *mut c_void) -> i32 {
        let core = IdBox::lookup(id)?;
        // SAFETY: the caller passes a socket address as long as its family says.
        let b = backend::device()?;
        let a = unsafe { sockaddr(addr, b.af_ib()) }?;
        b.join_multicast(&core, a, RDMA_MC_JOIN_FLAG_FULLMEMBER, context as usize).map(|()| 0)
    }
}

entry! {
    fn rdma_join_multicast_ex(
        id: *mut rdma_cm_id,
        mc_join_attr: *mut rdma_cm_join_mc_attr_ex,
        context: *mut c_void,
    ) -> i32 {
        let core = IdBox::lookup(id)?;
        non_null(mc_join_attr)?;
        // SAFETY: non-NULL; the caller gives a readable attribute struct.
        let a = unsafe { *mc_join_attr };
        if a.comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED {
            return Err(Errno::ENOTSUP);
        }
        if a.comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS == 0 || a.comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS == 0 {
            return Err(Errno::EINVAL);
        }
        if a.join_flags >= RDMA_MC_JOIN_FLAG_RESERVED {
            return Err(Errno::EINVAL);
        }
        // SAFETY: as for rdma_join_multicast.
        let b = backend::device()?;
        let addr = unsafe { sockaddr(a.addr, b.af_ib()) }?;
        b.join_multicast(&core, addr, a.join_flags, context as usize).map(|()| 0)
    }
}

entry! {
    fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> i32 {
        let core = IdBox::lookup(id)?;
        // SAFETY: as for rdma_join_multicast.
        let b = backend::device()?;
        let a = unsafe { sockaddr(addr, b.af_ib()) }?;
        b.leave_multicast(&core, a).map(|()| 0)
    }
}
