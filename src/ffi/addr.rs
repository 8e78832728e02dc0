//! rdma_getaddrinfo(3), rdma_freeaddrinfo(3), rdma_resolve_addrinfo,
//! rdma_query_addrinfo, rdma_bind_addr(3), rdma_resolve_addr(3),
//! rdma_resolve_route(3).

use super::args::{non_null, opt_cstr, out, sockaddr};
use crate::addrinfo::{self, Hints, Outcome};
use crate::backend;
use crate::cm::IdBox;
use crate::sys::{Errno, Result};
use rdma_abi::cma::*;
use std::ffi::c_char;

/// Reads `rdma_addrinfo` hints out of C.
///
/// # Safety
/// `h` is NULL or a readable `rdma_addrinfo` whose address pointers are
/// NULL or valid for their stated lengths.
unsafe fn hints(h: *const rdma_addrinfo) -> Result<Hints> {
    if h.is_null() {
        return Ok(Hints::default());
    }
    // SAFETY: per the contract.
    let h = unsafe { &*h };
    let bytes = |p: *mut libc::sockaddr, len: u32| -> Option<Vec<u8>> {
        // SAFETY: per the contract, len bytes are readable at p.
        (!p.is_null() && len > 0).then(|| unsafe { std::slice::from_raw_parts(p as *const u8, len as usize) }.to_vec())
    };
    if h.ai_flags & RAI_SA != 0 && h.ai_flags & RAI_DNS != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(Hints {
        flags: h.ai_flags,
        family: h.ai_family,
        qp_type: h.ai_qp_type,
        port_space: h.ai_port_space,
        src: bytes(h.ai_src_addr, h.ai_src_len),
        dst: bytes(h.ai_dst_addr, h.ai_dst_len),
    })
}

entry! {
    fn rdma_getaddrinfo(
        node: *const c_char,
        service: *const c_char,
        hints_: *const rdma_addrinfo,
        res: *mut *mut rdma_addrinfo,
    ) -> i32 {
        non_null(res)?;
        if node.is_null() && service.is_null() && hints_.is_null() {
            return Err(Errno::EINVAL); // as upstream: nothing at all to resolve
        }
        // SAFETY: C strings and hints as the man page requires of callers.
        let (node, service, h) = unsafe { (opt_cstr(node), opt_cstr(service), hints(hints_)?) };
        if h.flags & RAI_SA != 0 {
            // IB service resolution needs an IB subnet administrator.
            return Err(Errno::ENODEV);
        }
        match addrinfo::resolve(node, service, &h)? {
            // SAFETY: res checked non-NULL above.
            Outcome::Found(list) => unsafe { out(res, list.into_raw()) }.map(|()| 0),
            Outcome::Eai(code) => Ok(code),
        }
    }
}

entry! {
    fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) -> () {
        // SAFETY: the man page: res came from rdma_getaddrinfo / rdma_query_addrinfo.
        unsafe { addrinfo::free_list(res) };
        Ok(())
    }
}

entry! {
    fn rdma_resolve_addrinfo(
        id: *mut rdma_cm_id,
        node: *const c_char,
        service: *const c_char,
        hints_: *const rdma_addrinfo,
    ) -> i32 {
        let core = IdBox::lookup(id)?;
        // SAFETY: as for rdma_getaddrinfo.
        let (node, service, h) = unsafe { (opt_cstr(node), opt_cstr(service), hints(hints_)?) };
        if h.flags & RAI_SA != 0 {
            return Err(Errno::ENODEV);
        }
        let ev = match addrinfo::resolve(node, service, &h)? {
            Outcome::Found(list) => {
                core.state().extra_mut().resolved = Some(list);
                core.pending(RDMA_CM_EVENT_ADDRINFO_RESOLVED, 0, crate::cm::event::Param::zeroed())
            }
            Outcome::Eai(code) => core.pending(RDMA_CM_EVENT_ADDRINFO_ERROR, code, crate::cm::event::Param::zeroed()),
        };
        core.post_settled(ev);
        if core.is_sync() {
            core.complete()?;
        }
        Ok(0)
    }
}

entry! {
    fn rdma_query_addrinfo(id: *mut rdma_cm_id, info: *mut *mut rdma_addrinfo) -> i32 {
        let core = IdBox::lookup(id)?;
        non_null(info)?;
        let list = core.state().take_extra(|x| x.resolved.take()).ok_or(Errno::EINVAL)?;
        // SAFETY: checked non-NULL above.
        unsafe { out(info, list.into_raw()) }.map(|()| 0)
    }
}

entry! {
    fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> i32 {
        let core = IdBox::lookup(id)?;
        // SAFETY: the caller passes a socket address as long as its family says.
        let b = backend::device()?;
        let a = unsafe { sockaddr(addr, b.af_ib()) }?;
        b.bind(&core, a).map(|()| 0)
    }
}

entry! {
    fn rdma_resolve_addr(
        id: *mut rdma_cm_id,
        src_addr: *mut libc::sockaddr,
        dst_addr: *mut libc::sockaddr,
        timeout_ms: i32,
    ) -> i32 {
        let core = IdBox::lookup(id)?;
        // SAFETY: as for rdma_bind_addr; the source address is optional.
        let b = backend::device()?;
        let (src, dst) = unsafe {
            let dst = sockaddr(dst_addr, b.af_ib())?;
            let src = if src_addr.is_null() { None } else { Some(sockaddr(src_addr, b.af_ib())?) };
            (src, dst)
        };
        b.resolve_addr(&core, src, dst, timeout_ms).map(|()| 0)
    }
}

entry! {
    fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: i32) -> i32 {
        let core = IdBox::lookup(id)?;
        backend::device()?.resolve_route(&core, timeout_ms).map(|()| 0)
    }
}
