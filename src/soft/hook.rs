//! The one link between our librdmacm and softverbs: the versioned table of C
//! functions softverbs exports as `softverbs_cm_ops` (layout in
//! `rdma_abi::softverbs`). Looked up at run time, never linked: Debian's
//! libibverbs has no such symbol and every import must resolve at load. Its
//! presence is also how we know that the loaded libibverbs is ours.

use rdma_abi::softverbs::{softverbs_cm_ops, softverbs_cm_ops_fn, SOFTVERBS_CM_OPS_VERSION};
use std::sync::OnceLock;

pub type SoftverbsCmOps = softverbs_cm_ops;

struct Ops(&'static softverbs_cm_ops, usize);
// SAFETY: a table of function pointers in a loaded library, never written.
unsafe impl Send for Ops {}
unsafe impl Sync for Ops {}

static OPS: OnceLock<Option<Ops>> = OnceLock::new();

fn table() -> Option<&'static Ops> {
    OPS.get_or_init(|| {
        // SAFETY: dlsym with a NUL-terminated name; the result is checked.
        let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"softverbs_cm_ops".as_ptr()) };
        if f.is_null() {
            return None;
        }
        // SAFETY: softverbs exports `const struct softverbs_cm_ops *softverbs_cm_ops(void)`.
        let get: softverbs_cm_ops_fn = unsafe { std::mem::transmute(f) };
        // SAFETY: calling the exported getter; it returns a static table or NULL.
        let t = unsafe { get() };
        if t.is_null() {
            return None;
        }
        // SAFETY: a static table in the loaded softverbs.
        let t = unsafe { &*t };
        // The first two members are version 1's; later ones are read only if `size` covers them.
        if t.version < SOFTVERBS_CM_OPS_VERSION || (t.size as usize) < 24 {
            return None;
        }
        Some(Ops(t, t.size as usize))
    })
    .as_ref()
}

/// The softverbs hook table, if the loaded libibverbs is softverbs.
pub fn ops() -> Option<&'static SoftverbsCmOps> {
    table().map(|o| o.0)
}

/// `ctx_endpoint`, when this softverbs offers it.
pub fn ctx_endpoint() -> Option<
    unsafe extern "C" fn(*mut rdma_abi::verbs::ibv_context, *const rdma_abi::verbs::ibv_gid, *mut libc::sockaddr_storage) -> i32,
> {
    let o = table()?;
    if o.1 >= std::mem::offset_of!(softverbs_cm_ops, ctx_endpoint) + 8 {
        o.0.ctx_endpoint
    } else {
        None
    }
}

/// The RoCEv2 members (`roce_mode`, `mad_fd`, `mad_recv`, `mad_send`, `roce_service`),
/// when this softverbs offers them.
pub fn roce() -> Option<&'static SoftverbsCmOps> {
    let o = table()?;
    (o.1 >= std::mem::offset_of!(softverbs_cm_ops, roce_service) + 8).then_some(o.0)
}

/// `ctx_drain`, when this softverbs offers it.
pub fn ctx_drain() -> Option<unsafe extern "C" fn(*mut rdma_abi::verbs::ibv_context) -> i32> {
    let o = table()?;
    if o.1 >= std::mem::offset_of!(softverbs_cm_ops, ctx_drain) + 8 {
        o.0.ctx_drain
    } else {
        None
    }
}
