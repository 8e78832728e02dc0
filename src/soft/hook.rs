//! The one link between our librdmacm and softverbs: a versioned table of C
//! functions that softverbs exports as `softverbs_cm_ops`. Looked up at run
//! time (never linked: Debian's libibverbs has no such symbol, and every
//! import must resolve at load), so its presence is also how we know that the
//! loaded libibverbs is ours.

use rdma_abi::verbs::{ibv_context, ibv_gid, ibv_qp};
use std::ffi::c_int;
use std::sync::OnceLock;

#[repr(C)]
pub struct SoftverbsCmOps {
    pub size: u32,
    pub version: u32,
    pub qp_endpoint: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp, local_gid: *const ibv_gid, out: *mut libc::sockaddr_storage) -> c_int,
    >,
    pub add_peer: Option<
        unsafe extern "C" fn(
            ctx: *mut ibv_context,
            gid: *const ibv_gid,
            qpn: u32,
            addr: *const libc::sockaddr,
            len: libc::socklen_t,
        ) -> c_int,
    >,
}

struct Ops(&'static SoftverbsCmOps);
// SAFETY: a table of function pointers in a loaded library, never written.
unsafe impl Send for Ops {}
unsafe impl Sync for Ops {}

static OPS: OnceLock<Option<Ops>> = OnceLock::new();

/// The softverbs hook table, if the loaded libibverbs is softverbs.
pub fn ops() -> Option<&'static SoftverbsCmOps> {
    OPS.get_or_init(|| {
        // SAFETY: dlsym with a NUL-terminated name; the result is checked.
        let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"softverbs_cm_ops".as_ptr()) };
        if f.is_null() {
            return None;
        }
        // SAFETY: softverbs exports `const struct softverbs_cm_ops *softverbs_cm_ops(void)`.
        let get: unsafe extern "C" fn() -> *const SoftverbsCmOps = unsafe { std::mem::transmute(f) };
        // SAFETY: calling the exported getter; it returns a static table or NULL.
        let t = unsafe { get() };
        if t.is_null() {
            return None;
        }
        // SAFETY: a static table in the loaded softverbs.
        let t = unsafe { &*t };
        if t.version < 1 || (t.size as usize) < std::mem::size_of::<SoftverbsCmOps>() {
            return None;
        }
        Some(Ops(t))
    })
    .as_ref()
    .map(|o| o.0)
}
