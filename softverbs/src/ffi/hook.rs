//! `softverbs_cm_ops@@SOFTVERBS_1.0`: the CM hook (see `include/softverbs.h`).

use super::handles;
use crate::core::device::gid_to_ip;
use crate::net::addr::{from_raw, to_storage, with_port};
use crate::sys::Errno;
use libc::{c_int, sockaddr, sockaddr_storage, socklen_t};
use rdma_abi::softverbs::{softverbs_cm_ops, SOFTVERBS_CM_OPS_VERSION};
use rdma_abi::verbs::*;

/// The endpoint of a context for one of its GIDs (or its first).
fn endpoint(ctx: &crate::core::context::Context, local_gid: *const ibv_gid, out: *mut sockaddr_storage) -> Result<c_int, Errno> {
    if out.is_null() {
        return Err(Errno::EINVAL);
    }
    let gid = if local_gid.is_null() {
        ctx.gid(0).ok_or(Errno::EINVAL)?
    } else {
        // SAFETY: non-NULL in-pointer; raw bytes of a plain-data union.
        unsafe { (*local_gid).raw }
    };
    let ifindex = ctx.gids.iter().find(|e| e.gid == gid).map(|e| e.ifindex).unwrap_or(0);
    let ip = gid_to_ip(&gid);
    let scope = if matches!(ip, std::net::IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80) { ifindex } else { 0 };
    let addr = with_port(ip, ctx.port(), scope);
    let (ss, _) = to_storage(&addr, addr.is_ipv6()).ok_or(Errno::EAFNOSUPPORT)?;
    // SAFETY: non-NULL out-pointer to a sockaddr_storage.
    unsafe { out.write_unaligned(ss) };
    Ok(0)
}

op! {
    errno fn qp_endpoint(qp: *mut ibv_qp, local_gid: *const ibv_gid, out: *mut sockaddr_storage) -> c_int {
        endpoint(&handles::qp(qp)?.ctx, local_gid, out)
    }
}

op! {
    errno fn ctx_endpoint(context: *mut ibv_context, local_gid: *const ibv_gid, out: *mut sockaddr_storage) -> c_int {
        endpoint(&*handles::ctx(context)?, local_gid, out)
    }
}

op! {
    errno fn add_peer(context: *mut ibv_context, gid: *const ibv_gid, qpn: u32, addr: *const sockaddr, len: socklen_t) -> c_int,
        trace |_, _r| {
            // SAFETY: NULL or the hook caller's GID / address of `len` bytes.
            let g = if gid.is_null() { "NULL".to_string() } else { crate::trace::gid(&unsafe { (*gid).raw }) };
            let a = unsafe { from_raw(addr, len) }.map(|a| a.to_string()).unwrap_or_else(|| "?".into());
            format!("softverbs_cm_ops.add_peer({context:p}, gid {g}, qpn {qpn}, {a})")
        },
    {
        let ctx = handles::ctx(context)?;
        if gid.is_null() || qpn & !0x00ff_ffff != 0 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: addr points to `len` bytes per the hook's contract.
        let a = unsafe { from_raw(addr, len) }.ok_or(Errno::EINVAL)?;
        // SAFETY: non-NULL in-pointer; raw bytes of a plain-data union.
        ctx.add_peer(unsafe { (*gid).raw }, qpn, a);
        Ok(0)
    }
}

static OPS: softverbs_cm_ops = softverbs_cm_ops {
    size: std::mem::size_of::<softverbs_cm_ops>() as u32,
    version: SOFTVERBS_CM_OPS_VERSION,
    qp_endpoint: Some(qp_endpoint),
    add_peer: Some(add_peer),
    ctx_endpoint: Some(ctx_endpoint),
};

export! {
    value(std::ptr::null()) fn softverbs_cm_ops() -> *const softverbs_cm_ops {
        Ok(&OPS)
    }
}
