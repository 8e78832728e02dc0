//! `IBVERBS_PRIVATE_34`: rdma-core's provider-internal API. Only present so that
//! `libmlx5.so.1` / `libefa.so.1` (which perftest NEEDs) and pyverbs load; they never get to
//! drive our device. `ibv_query_gid_type` is real (pyverbs and ibv_devinfo call it).
//! `verbs_register_driver_34` runs from those libraries' constructors before `main`: it is
//! a no-op that touches no lazily initialised state.

use super::handles;
use crate::sys::Errno;
use libc::{c_int, c_void};
use rdma_abi::verbs::*;
use std::sync::atomic::AtomicBool;

/// `bool verbs_allow_disassociate_destroy` (a data object libmlx5 reads through its GOT).
#[no_mangle]
pub static verbs_allow_disassociate_destroy: AtomicBool = AtomicBool::new(false);

export! {
    void fn verbs_register_driver_34(ops: *const c_void) {
        let _ = ops;
        Ok(())
    }
}

export! {
    /// `int ibv_query_gid_type(ctx, port, index, enum ibv_gid_type_sysfs *type)`: every
    /// entry is RoCE v2 (sysfs value 1).
    minus1 fn ibv_query_gid_type(context: *mut ibv_context, port_num: u8, index: u32, gid_type: *mut u32) -> c_int,
        trace |_, _r| format!("ibv_query_gid_type({context:p}, port {port_num}, index {index})"),
    {
        let ctx = handles::ctx(context)?;
        if port_num != 1 {
            return Err(Errno::EINVAL);
        }
        let t = super::device::gid_type_of(&ctx, index)?;
        // SAFETY: out-pointer from the caller (checked for NULL).
        unsafe { handles::put(gid_type, t) }?;
        Ok(0)
    }
}

macro_rules! no_provider {
    (int: $($i:ident),* ; ptr: $($p:ident),* ; void: $($v:ident),* $(,)?) => {
        $( export! { errno fn $i() -> c_int { Err(Errno::EOPNOTSUPP) } } )*
        $( export! { null fn $p() -> *mut c_void { Err(Errno::EOPNOTSUPP) } } )*
        $( export! { void fn $v() { Ok(()) } } )*
    };
}

no_provider! {
    int: execute_ioctl, ibv_cmd_advise_mr, ibv_cmd_alloc_dm, ibv_cmd_alloc_mw, ibv_cmd_alloc_pd,
        ibv_cmd_attach_mcast, ibv_cmd_close_xrcd, ibv_cmd_create_ah, ibv_cmd_create_counters,
        ibv_cmd_create_cq_ex, ibv_cmd_create_flow, ibv_cmd_create_flow_action_esp,
        ibv_cmd_create_qp_ex, ibv_cmd_create_qp_ex2, ibv_cmd_create_rwq_ind_table,
        ibv_cmd_create_srq, ibv_cmd_create_srq_ex, ibv_cmd_create_wq, ibv_cmd_dealloc_mw,
        ibv_cmd_dealloc_pd, ibv_cmd_dereg_mr, ibv_cmd_destroy_ah, ibv_cmd_destroy_counters,
        ibv_cmd_destroy_cq, ibv_cmd_destroy_flow, ibv_cmd_destroy_flow_action, ibv_cmd_destroy_qp,
        ibv_cmd_destroy_rwq_ind_table, ibv_cmd_destroy_srq, ibv_cmd_destroy_wq,
        ibv_cmd_detach_mcast, ibv_cmd_free_dm, ibv_cmd_get_context, ibv_cmd_modify_cq,
        ibv_cmd_modify_flow_action_esp, ibv_cmd_modify_qp, ibv_cmd_modify_qp_ex,
        ibv_cmd_modify_srq, ibv_cmd_modify_wq, ibv_cmd_open_qp, ibv_cmd_open_xrcd,
        ibv_cmd_query_context, ibv_cmd_query_device_any, ibv_cmd_query_mr, ibv_cmd_query_port,
        ibv_cmd_query_qp, ibv_cmd_query_srq, ibv_cmd_read_counters, ibv_cmd_reg_dm_mr,
        ibv_cmd_reg_dmabuf_mr, ibv_cmd_reg_mr, ibv_cmd_rereg_mr, ibv_cmd_resize_cq;
    ptr: _verbs_init_and_alloc_context, verbs_open_device;
    void: verbs_set_ops, verbs_uninit_context, verbs_init_cq, __verbs_log,
}
