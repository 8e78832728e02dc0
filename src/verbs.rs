//! The libibverbs functions librdmacm calls (the system's, or our software
//! device's when that one is loaded).

use rdma_abi::verbs::*;
use std::ffi::{c_int, c_void};

/// `struct ibv_device` is only ever handled by pointer here.
#[repr(C)]
pub struct ibv_device_opaque {
    _opaque: [u8; 0],
}

#[link(name = "ibverbs")]
extern "C" {
    pub fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device_opaque;
    pub fn ibv_free_device_list(list: *mut *mut ibv_device_opaque);
    pub fn ibv_open_device(device: *mut ibv_device_opaque) -> *mut ibv_context;
    pub fn ibv_get_device_guid(device: *mut ibv_device_opaque) -> u64;
    pub fn ibv_get_device_name(device: *mut ibv_device_opaque) -> *const libc::c_char;
    pub fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int;
    pub fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int;
    pub fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut c_void;
    pub fn ibv_dereg_mr(mr: *mut c_void) -> c_int;
    pub fn ibv_get_cq_event(
        channel: *mut ibv_comp_channel,
        cq: *mut *mut ibv_cq,
        cq_context: *mut *mut c_void,
    ) -> c_int;
    pub fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: u32);
}

#[link(name = "ibverbs")]
extern "C" {
    pub fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd;
    pub fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel;
    pub fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int;
    pub fn ibv_create_cq(
        context: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
    ) -> *mut ibv_cq;
    pub fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int;
    pub fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp;
    pub fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int;
    pub fn ibv_create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq;
    pub fn ibv_query_port(context: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> c_int;
    pub fn ibv_query_device(context: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int;
    pub fn ibv_query_gid(context: *mut ibv_context, port: u8, index: c_int, gid: *mut ibv_gid) -> c_int;
    pub fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
    pub fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int;
}

/// `ibv_query_port`; None for a NULL context or when the query fails.
///
/// # Safety
/// `ctx` is NULL or an open device context.
pub unsafe fn port_attr(ctx: *mut ibv_context, port: u8) -> Option<ibv_port_attr> {
    // SAFETY: all-zero is a valid ibv_port_attr.
    let mut a: ibv_port_attr = unsafe { std::mem::zeroed() };
    // SAFETY: per the contract, and a writable attribute block.
    (!ctx.is_null() && unsafe { ibv_query_port(ctx, port, &mut a) } == 0).then_some(a)
}

/// A verbs call's return (0, or an errno, possibly negated) as a Result.
pub fn verr(ret: std::ffi::c_int) -> Result<(), crate::sys::Errno> {
    match ret {
        0 => Ok(()),
        r => Err(crate::sys::Errno(r.abs())),
    }
}

/// `ibv_query_device`; the errno when it fails.
///
/// # Safety
/// `ctx` is NULL or an open device context.
pub unsafe fn device_attr(ctx: *mut ibv_context) -> Result<ibv_device_attr, crate::sys::Errno> {
    if ctx.is_null() {
        return Err(crate::sys::Errno::ENODEV);
    }
    // SAFETY: all-zero is a valid ibv_device_attr.
    let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: per the contract, and a writable attribute block.
    verr(unsafe { ibv_query_device(ctx, &mut a) }).map(|()| a)
}

/// The provider's extended block behind `ctx` when it is long enough to hold
/// the member at `offset` (libibverbs' `verbs_get_ctx_op` test: the block
/// grows at its front, so an older provider's is shorter).
///
/// # Safety
/// `ctx` is NULL or an open device context.
pub unsafe fn ext_ctx(ctx: *mut ibv_context, offset: usize) -> Option<&'static verbs_context> {
    // SAFETY: per the contract; abi_compat says whether a verbs_context precedes it.
    if ctx.is_null() || unsafe { (*ctx).abi_compat } as usize != __VERBS_ABI_IS_EXTENDED {
        return None;
    }
    let at = std::mem::offset_of!(verbs_context, context);
    // SAFETY: an extended context is the `context` member of a verbs_context,
    // which lives as long as the device is open.
    let v = unsafe { &*((ctx as *const u8).sub(at) as *const verbs_context) };
    (v.sz >= std::mem::size_of::<verbs_context>() - offset).then_some(v)
}

/// A `verbs_context` operation of `ctx`'s provider, if it has one.
macro_rules! ctx_op {
    ($ctx:expr, $op:ident) => {
        $crate::verbs::ext_ctx($ctx, ::std::mem::offset_of!(rdma_abi::verbs::verbs_context, $op))
            .and_then(|v| v.$op)
    };
}
pub(crate) use ctx_op;
