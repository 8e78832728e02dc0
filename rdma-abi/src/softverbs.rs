//! Mirror of `softverbs/include/softverbs.h`: the hook table our software `libibverbs.so.1`
//! exports as `softverbs_cm_ops@@SOFTVERBS_1.0` so that our librdmacm's soft CM can tell it
//! where the peers of a QP live (`dlsym(handle, "softverbs_cm_ops")`, then call it).
//!
//! Not part of rdma-core: the layout is ours and is asserted below (and compared with the C
//! header by softverbs' own tests).

use crate::verbs::{ibv_context, ibv_gid, ibv_qp};
use libc::{c_int, sockaddr, sockaddr_storage, socklen_t};

/// `struct softverbs_cm_ops`. Check `size >= size_of::<softverbs_cm_ops>()` and
/// `version >= SOFTVERBS_CM_OPS_VERSION` before using a member.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct softverbs_cm_ops {
    /// `sizeof(struct softverbs_cm_ops)`.
    pub size: u32,
    /// [`SOFTVERBS_CM_OPS_VERSION`].
    pub version: u32,
    /// Where frames for `qp` must be sent: the IP of `local_gid` (one of the device's GIDs)
    /// and the port of the QP's context. Returns 0 or an errno value.
    pub qp_endpoint: Option<
        unsafe extern "C" fn(
            qp: *mut ibv_qp,
            local_gid: *const ibv_gid,
            out: *mut sockaddr_storage,
        ) -> c_int,
    >,
    /// Records that the QP `(gid, qpn)` is reachable at `addr` (the peer's `qp_endpoint`).
    /// Call before moving an RC QP to RTR and before UD sends; repeated calls update the
    /// entry. Returns 0 or an errno value.
    pub add_peer: Option<
        unsafe extern "C" fn(
            ctx: *mut ibv_context,
            gid: *const ibv_gid,
            qpn: u32,
            addr: *const sockaddr,
            len: socklen_t,
        ) -> c_int,
    >,
    /// Like `qp_endpoint`, for a context: every QP of a context shares its endpoint, and
    /// an id whose QP the application owns gives the CM only the context. Present when
    /// `size` covers it.
    pub ctx_endpoint: Option<
        unsafe extern "C" fn(
            ctx: *mut ibv_context,
            local_gid: *const ibv_gid,
            out: *mut sockaddr_storage,
        ) -> c_int,
    >,
    /// RoCEv2 from the context's address `local`: `*mode` = 0 none (no RoCEv2 endpoint
    /// there), 1 used when the peer has no soft-fabric listener, 2 always
    /// (`SOFTVERBS_WIRE=roce`). Present, like the MAD calls, when `size` covers it.
    pub roce_mode: Option<unsafe extern "C" fn(ctx: *mut ibv_context, local: *const sockaddr, len: socklen_t, mode: *mut c_int) -> c_int>,
    /// `*fd`: readable while MADs for the context's QP1 wait.
    pub mad_fd: Option<unsafe extern "C" fn(ctx: *mut ibv_context, fd: *mut c_int) -> c_int>,
    /// The oldest MAD for QP1 (256 bytes), its source and destination IPv4 addresses
    /// (port 0); EAGAIN when none waits.
    pub mad_recv: Option<unsafe extern "C" fn(ctx: *mut ibv_context, mad: *mut u8, from: *mut sockaddr_storage, to: *mut sockaddr_storage) -> c_int>,
    /// Sends a 256-byte MAD from QP1 at `from` to QP1 at `to`; ENETUNREACH when `from`
    /// has no RoCEv2 endpoint.
    pub mad_send: Option<unsafe extern "C" fn(ctx: *mut ibv_context, from: *const sockaddr, to: *const sockaddr, len: socklen_t, mad: *const u8) -> c_int>,
    /// The CM listens (`listen` 1) or no longer listens (0) on IB service `service_id`:
    /// REQs for it that reach another soft-fabric process owning UDP 4791 here are
    /// handed to this one. Comm IDs this CM chooses carry the context port in their high
    /// 16 bits, for the same reason.
    pub roce_service: Option<unsafe extern "C" fn(ctx: *mut ibv_context, service_id: u64, listen: c_int) -> c_int>,
    /// Delivers to the context's QPs, without blocking, the frames already waiting for
    /// them (in shared-memory rings and socket buffers): the CM calls it before it
    /// reports a disconnect, which travels apart from the data the peer sent before it.
    /// Returns 0 or an errno value. Present when `size` covers it.
    pub ctx_drain: Option<unsafe extern "C" fn(ctx: *mut ibv_context) -> c_int>,
}

/// Current `softverbs_cm_ops.version`.
pub const SOFTVERBS_CM_OPS_VERSION: u32 = 1;

/// Symbol name to `dlsym` (the function returns `const struct softverbs_cm_ops *`).
pub const SOFTVERBS_CM_OPS_SYMBOL: &str = "softverbs_cm_ops";

/// The exported accessor: `const struct softverbs_cm_ops *softverbs_cm_ops(void)`.
pub type softverbs_cm_ops_fn = unsafe extern "C" fn() -> *const softverbs_cm_ops;

const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<softverbs_cm_ops>() == 80);
    assert!(align_of::<softverbs_cm_ops>() == 8);
    assert!(offset_of!(softverbs_cm_ops, size) == 0);
    assert!(offset_of!(softverbs_cm_ops, version) == 4);
    assert!(offset_of!(softverbs_cm_ops, qp_endpoint) == 8);
    assert!(offset_of!(softverbs_cm_ops, add_peer) == 16);
    assert!(offset_of!(softverbs_cm_ops, ctx_endpoint) == 24);
    assert!(offset_of!(softverbs_cm_ops, roce_mode) == 32);
    assert!(offset_of!(softverbs_cm_ops, mad_fd) == 40);
    assert!(offset_of!(softverbs_cm_ops, mad_recv) == 48);
    assert!(offset_of!(softverbs_cm_ops, mad_send) == 56);
    assert!(offset_of!(softverbs_cm_ops, roce_service) == 64);
    assert!(offset_of!(softverbs_cm_ops, ctx_drain) == 72);
};
