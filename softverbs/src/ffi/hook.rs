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

/// The RoCEv2 endpoint of a context.
fn roce(ctx: &crate::core::context::Context) -> Result<&std::sync::Arc<crate::roce::endpoint::Endpoint>, Errno> {
    ctx.net().and_then(|n| n.roce()).ok_or(Errno(libc::ENETUNREACH))
}

/// An IPv4 address given as a sockaddr of `len` bytes (IPv4-mapped IPv6 too).
fn v4(addr: *const sockaddr, len: socklen_t) -> Result<std::net::Ipv4Addr, Errno> {
    // SAFETY: addr points to `len` bytes per the hook's contract (from_raw checks NULL).
    match unsafe { from_raw(addr, len) }.map(|a| a.ip().to_canonical()) {
        Some(std::net::IpAddr::V4(v)) => Ok(v),
        Some(_) => Err(Errno(libc::ENETUNREACH)),
        None => Err(Errno::EINVAL),
    }
}

fn write_v4(out: *mut sockaddr_storage, ip: std::net::Ipv4Addr) -> Result<(), Errno> {
    if out.is_null() {
        return Ok(());
    }
    let (ss, _) = to_storage(&std::net::SocketAddr::from((ip, 0)), false).ok_or(Errno::EINVAL)?;
    // SAFETY: non-NULL out-pointer to a sockaddr_storage.
    unsafe { out.write_unaligned(ss) };
    Ok(())
}

op! {
    errno fn roce_mode(context: *mut ibv_context, local: *const sockaddr, len: socklen_t, mode: *mut c_int) -> c_int {
        let ctx = handles::ctx(context)?;
        if mode.is_null() {
            return Err(Errno::EINVAL);
        }
        let ip = v4(local, len);
        let on = matches!((&ip, roce(&ctx)), (Ok(ip), Ok(r)) if r.has(*ip));
        let m = match (on, crate::roce::endpoint::forced()) {
            (false, _) => 0,
            (true, Some(true)) => 2,
            (true, _) => 1,
        };
        // SAFETY: non-NULL out-pointer to an int.
        unsafe { mode.write_unaligned(m) };
        Ok(0)
    }
}

op! {
    errno fn mad_fd(context: *mut ibv_context, fd: *mut c_int) -> c_int {
        let ctx = handles::ctx(context)?;
        if fd.is_null() {
            return Err(Errno::EINVAL);
        }
        let r = roce(&ctx)?;
        // SAFETY: non-NULL out-pointer to an int.
        unsafe { fd.write_unaligned(std::os::fd::AsRawFd::as_raw_fd(&r.mad_ev)) };
        Ok(0)
    }
}

op! {
    errno fn mad_recv(context: *mut ibv_context, mad: *mut u8, from: *mut sockaddr_storage, to: *mut sockaddr_storage) -> c_int {
        let ctx = handles::ctx(context)?;
        if mad.is_null() {
            return Err(Errno::EINVAL);
        }
        let (src, dst, m) = roce(&ctx)?.mad_recv().ok_or(Errno(libc::EAGAIN))?;
        // SAFETY: the caller's buffer of MAD_LEN bytes.
        unsafe { std::ptr::copy_nonoverlapping(m.as_ptr(), mad, m.len()) };
        write_v4(from, src)?;
        write_v4(to, dst)?;
        Ok(0)
    }
}

op! {
    errno fn mad_send(context: *mut ibv_context, from: *const sockaddr, to: *const sockaddr, len: socklen_t, mad: *const u8) -> c_int {
        let ctx = handles::ctx(context)?;
        if mad.is_null() {
            return Err(Errno::EINVAL);
        }
        let (src, dst) = (v4(from, len)?, v4(to, len)?);
        let r = roce(&ctx)?;
        if !r.has(src) {
            return Err(Errno(libc::ENETUNREACH));
        }
        let mut m = [0u8; crate::roce::endpoint::MAD_LEN];
        // SAFETY: the caller's MAD of MAD_LEN bytes.
        unsafe { std::ptr::copy_nonoverlapping(mad, m.as_mut_ptr(), m.len()) };
        r.mad_send(src, dst, &m);
        Ok(0)
    }
}

op! {
    errno fn roce_service(context: *mut ibv_context, service_id: u64, listen: c_int) -> c_int {
        let ctx = handles::ctx(context)?;
        crate::roce::share::listen(service_id, ctx.port(), listen != 0);
        Ok(0)
    }
}

op! {
    errno fn ctx_drain(context: *mut ibv_context) -> c_int {
        let ctx = handles::ctx(context)?;
        if let Some(net) = ctx.net() {
            net.drain(&ctx);
        }
        Ok(0)
    }
}

static OPS: softverbs_cm_ops = softverbs_cm_ops {
    size: std::mem::size_of::<softverbs_cm_ops>() as u32,
    version: SOFTVERBS_CM_OPS_VERSION,
    qp_endpoint: Some(qp_endpoint),
    add_peer: Some(add_peer),
    ctx_endpoint: Some(ctx_endpoint),
    roce_mode: Some(roce_mode),
    mad_fd: Some(mad_fd),
    mad_recv: Some(mad_recv),
    mad_send: Some(mad_send),
    roce_service: Some(roce_service),
    ctx_drain: Some(ctx_drain),
};

export! {
    value(std::ptr::null()) fn softverbs_cm_ops() -> *const softverbs_cm_ops {
        Ok(&OPS)
    }
}
