//! Mirrors of `<infiniband/verbs.h>` and `<infiniband/sa.h>` (rdma-core 44 layout, x86-64).
//!
//! Split by topic; everything is re-exported here, so `rdma_abi::verbs::ibv_qp` etc. work.
//! Types and fields carry their exact C names (C keywords/Rust keywords: `type` → `type_`,
//! `priv` → `r#priv`). Pointers to types not mirrored here are `*mut c_void`.
//! `tests/layout.rs` proves every size, alignment, field offset/size and constant against
//! the system headers.

mod attr;
mod consts;
mod device;
mod objects;
mod sa;
mod wr;

pub use self::attr::*;
pub use self::consts::*;
pub use self::device::*;
pub use self::objects::*;
pub use self::sa::*;
pub use self::wr::*;

// Sizes from shared/reference/verbs-abi.md §4 (measured on rdma-core 44 headers) and the
// offsets the inline verbs of verbs.h hard-code (§3.1).
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<ibv_gid>() == 16);
    assert!(size_of::<ibv_gid_entry>() == 32);
    assert!(size_of::<ibv_device>() == 664);
    assert!(size_of::<ibv_context_ops>() == 256);
    assert!(size_of::<ibv_context>() == 328);
    assert!(size_of::<verbs_context>() == 648);
    assert!(size_of::<ibv_pd>() == 16);
    assert!(size_of::<ibv_mr>() == 48);
    assert!(size_of::<ibv_comp_channel>() == 16);
    assert!(size_of::<ibv_cq>() == 128);
    assert!(size_of::<ibv_qp>() == 160);
    assert!(size_of::<ibv_qp_ex>() == 352);
    assert!(size_of::<ibv_srq>() == 128);
    assert!(size_of::<ibv_ah>() == 24);
    assert!(size_of::<ibv_global_route>() == 24);
    assert!(size_of::<ibv_ah_attr>() == 32);
    assert!(size_of::<ibv_qp_cap>() == 20);
    assert!(size_of::<ibv_qp_attr>() == 144);
    assert!(size_of::<ibv_qp_init_attr>() == 64);
    assert!(size_of::<ibv_qp_init_attr_ex>() == 136);
    assert!(size_of::<ibv_sge>() == 16);
    assert!(size_of::<ibv_send_wr>() == 128);
    assert!(size_of::<ibv_recv_wr>() == 32);
    assert!(size_of::<ibv_wc>() == 48);
    assert!(size_of::<ibv_port_attr>() == 52);
    assert!(size_of::<ibv_device_attr>() == 232);
    assert!(size_of::<ibv_async_event>() == 16);
    assert!(size_of::<ibv_grh>() == 40);
    assert!(size_of::<ibv_srq_attr>() == 12);
    assert!(size_of::<ibv_srq_init_attr>() == 24);
    assert!(size_of::<ibv_cq_init_attr_ex>() == 56);
    assert!(size_of::<ibv_mw_bind_info>() == 32);
    assert!(size_of::<ibv_ece>() == 12);
    assert!(size_of::<ibv_sa_path_rec>() == 64);
    assert!(size_of::<ibv_path_record>() == 64);
    assert!(size_of::<ibv_path_data>() == 72);
    assert!(align_of::<ibv_port_attr>() == 4);
    assert!(align_of::<ibv_qp_cap>() == 4);
    // Dispatch offsets the inline verbs compile in (ctx = struct ibv_context *).
    assert!(offset_of!(ibv_context, ops) == 8);
    assert!(offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, alloc_mw) == 64);
    assert!(offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, poll_cq) == 96);
    assert!(offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, req_notify_cq) == 104);
    assert!(offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, post_srq_recv) == 168);
    assert!(offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, post_send) == 208);
    assert!(offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, post_recv) == 216);
    assert!(offset_of!(ibv_context, abi_compat) == 320);
    assert!(VERBS_CONTEXT_CONTEXT_OFFSET == 320);
    assert!(offset_of!(verbs_context, sz) == 312);
    assert!(offset_of!(verbs_context, query_port) == 0);
    assert!(offset_of!(verbs_context, query_device_ex) == 216);
    assert!(offset_of!(verbs_context, create_qp_ex) == 264);
};
