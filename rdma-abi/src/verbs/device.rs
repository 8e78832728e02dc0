//! Device, context and dispatch-table mirrors: `ibv_device`, `ibv_context_ops`,
//! `ibv_context`, `verbs_context`, plus the query structs (`ibv_device_attr`,
//! `ibv_port_attr`, `ibv_gid_entry`) and `ibv_async_event`.

use super::*;
use libc::{c_char, c_int, c_uint, c_void, pthread_mutex_t};

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_gid_global {
    pub subnet_prefix: u64,
    pub interface_id: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_gid {
    pub raw: [u8; 16],
    pub global: ibv_gid_global,
}

/// Filled by `_ibv_query_gid_ex` / `_ibv_query_gid_table` (caller passes `entry_size` 32).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    /// `enum ibv_gid_type` stored as `uint32_t`.
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// Obsolete, never called; kept for layout.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct _ibv_device_ops {
    pub _dummy1:
        Option<unsafe extern "C" fn(device: *mut ibv_device, cmd_fd: c_int) -> *mut ibv_context>,
    pub _dummy2: Option<unsafe extern "C" fn(context: *mut ibv_context)>,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device {
    pub _ops: _ibv_device_ops,
    pub node_type: ibv_node_type,
    pub transport_type: ibv_transport_type,
    /// Kernel IB device name, e.g. "mlx5_0" (NUL-terminated).
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    /// uverbs device name, e.g. "uverbs0".
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    /// sysfs path of the infiniband_verbs class device.
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    /// sysfs path of the infiniband class device.
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

/// A legacy slot `void *(*)(void)` of `ibv_context_ops` (never called by current consumers).
pub type ibv_compat_fn = Option<unsafe extern "C" fn() -> *mut c_void>;

pub type ibv_poll_cq_fn =
    Option<unsafe extern "C" fn(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int>;
pub type ibv_req_notify_cq_fn =
    Option<unsafe extern "C" fn(cq: *mut ibv_cq, solicited_only: c_int) -> c_int>;
pub type ibv_post_send_fn = Option<
    unsafe extern "C" fn(
        qp: *mut ibv_qp,
        wr: *mut ibv_send_wr,
        bad_wr: *mut *mut ibv_send_wr,
    ) -> c_int,
>;
pub type ibv_post_recv_fn = Option<
    unsafe extern "C" fn(
        qp: *mut ibv_qp,
        wr: *mut ibv_recv_wr,
        bad_wr: *mut *mut ibv_recv_wr,
    ) -> c_int,
>;
pub type ibv_post_srq_recv_fn = Option<
    unsafe extern "C" fn(
        srq: *mut ibv_srq,
        recv_wr: *mut ibv_recv_wr,
        bad_recv_wr: *mut *mut ibv_recv_wr,
    ) -> c_int,
>;

/// `struct ibv_context_ops` (32 slots, 256 bytes) embedded at `ibv_context + 8`.
/// The inline verbs call `poll_cq`, `req_notify_cq`, `post_send`, `post_recv` and
/// `post_srq_recv` unchecked; `alloc_mw` is NULL-checked; the `_compat_*` slots are legacy.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_context_ops {
    pub _compat_query_device: Option<
        unsafe extern "C" fn(context: *mut ibv_context, device_attr: *mut ibv_device_attr) -> c_int,
    >,
    /// Third argument is the 48-byte `struct _compat_ibv_port_attr` (private to libibverbs).
    pub _compat_query_port: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            port_num: u8,
            port_attr: *mut c_void,
        ) -> c_int,
    >,
    pub _compat_alloc_pd: ibv_compat_fn,
    pub _compat_dealloc_pd: ibv_compat_fn,
    pub _compat_reg_mr: ibv_compat_fn,
    pub _compat_rereg_mr: ibv_compat_fn,
    pub _compat_dereg_mr: ibv_compat_fn,
    pub alloc_mw: Option<unsafe extern "C" fn(pd: *mut ibv_pd, type_: ibv_mw_type) -> *mut ibv_mw>,
    pub bind_mw: Option<
        unsafe extern "C" fn(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> c_int,
    >,
    pub dealloc_mw: Option<unsafe extern "C" fn(mw: *mut ibv_mw) -> c_int>,
    pub _compat_create_cq: ibv_compat_fn,
    pub poll_cq: ibv_poll_cq_fn,
    pub req_notify_cq: ibv_req_notify_cq_fn,
    pub _compat_cq_event: ibv_compat_fn,
    pub _compat_resize_cq: ibv_compat_fn,
    pub _compat_destroy_cq: ibv_compat_fn,
    pub _compat_create_srq: ibv_compat_fn,
    pub _compat_modify_srq: ibv_compat_fn,
    pub _compat_query_srq: ibv_compat_fn,
    pub _compat_destroy_srq: ibv_compat_fn,
    pub post_srq_recv: ibv_post_srq_recv_fn,
    pub _compat_create_qp: ibv_compat_fn,
    pub _compat_query_qp: ibv_compat_fn,
    pub _compat_modify_qp: ibv_compat_fn,
    pub _compat_destroy_qp: ibv_compat_fn,
    pub post_send: ibv_post_send_fn,
    pub post_recv: ibv_post_recv_fn,
    pub _compat_create_ah: ibv_compat_fn,
    pub _compat_destroy_ah: ibv_compat_fn,
    pub _compat_attach_mcast: ibv_compat_fn,
    pub _compat_detach_mcast: ibv_compat_fn,
    pub _compat_async_event: ibv_compat_fn,
}

/// `struct ibv_context` (328 bytes). Applications only hold `*mut ibv_context`; a library
/// that supports the extended verbs allocates a [`verbs_context`] and hands out
/// `&mut vctx.context`, with `abi_compat == __VERBS_ABI_IS_EXTENDED`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_t,
    /// `(void *)UINTPTR_MAX` when a `verbs_context` precedes this struct.
    pub abi_compat: *mut c_void,
}

/// `struct verbs_context` (648 bytes): the extended dispatch table that sits immediately
/// before the `ibv_context` handed to applications (`context` is the last member, at
/// offset [`VERBS_CONTEXT_CONTEXT_OFFSET`] = 320; `sz` is at 312, i.e. `ctx - 8`).
///
/// `verbs_get_ctx(ctx)` (inline in verbs.h): if `ctx->abi_compat != UINTPTR_MAX` there is no
/// extended context; otherwise it is at `(char *)ctx - 320`. `verbs_get_ctx_op(ctx, op)` also
/// requires `sz >= size_of::<verbs_context>() - offset_of!(verbs_context, op)` and `op != NULL`,
/// so `sz` must be 648 for every member (including `query_port`, the first) to be usable.
/// New members are added at the front in later rdma-core releases ("grows up").
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(non_snake_case)]
pub struct verbs_context {
    pub query_port: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            port_num: u8,
            port_attr: *mut ibv_port_attr,
            port_attr_len: usize,
        ) -> c_int,
    >,
    /// `advice` is `enum ib_uverbs_advise_mr_advice`.
    pub advise_mr: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            advice: u32,
            flags: u32,
            sg_list: *mut ibv_sge,
            num_sges: u32,
        ) -> c_int,
    >,
    pub alloc_null_mr: Option<unsafe extern "C" fn(pd: *mut ibv_pd) -> *mut ibv_mr>,
    /// `counters`: `struct ibv_counters *`.
    pub read_counters: Option<
        unsafe extern "C" fn(
            counters: *mut c_void,
            counters_value: *mut u64,
            ncounters: u32,
            flags: u32,
        ) -> c_int,
    >,
    /// (`ibv_counters *`, `ibv_counter_attach_attr *`, `ibv_flow *`).
    pub attach_counters_point_flow: Option<
        unsafe extern "C" fn(counters: *mut c_void, attr: *mut c_void, flow: *mut c_void) -> c_int,
    >,
    /// Returns `struct ibv_counters *`; `init_attr`: `ibv_counters_init_attr *`.
    pub create_counters: Option<
        unsafe extern "C" fn(context: *mut ibv_context, init_attr: *mut c_void) -> *mut c_void,
    >,
    pub destroy_counters: Option<unsafe extern "C" fn(counters: *mut c_void) -> c_int>,
    /// `dm`: `struct ibv_dm *`.
    pub reg_dm_mr: Option<
        unsafe extern "C" fn(
            pd: *mut ibv_pd,
            dm: *mut c_void,
            dm_offset: u64,
            length: usize,
            access: c_uint,
        ) -> *mut ibv_mr,
    >,
    /// Returns `struct ibv_dm *`; `attr`: `ibv_alloc_dm_attr *`.
    pub alloc_dm:
        Option<unsafe extern "C" fn(context: *mut ibv_context, attr: *mut c_void) -> *mut c_void>,
    pub free_dm: Option<unsafe extern "C" fn(dm: *mut c_void) -> c_int>,
    /// (`ibv_flow_action *`, `ibv_flow_action_esp_attr *`).
    pub modify_flow_action_esp:
        Option<unsafe extern "C" fn(action: *mut c_void, attr: *mut c_void) -> c_int>,
    pub destroy_flow_action: Option<unsafe extern "C" fn(action: *mut c_void) -> c_int>,
    pub create_flow_action_esp:
        Option<unsafe extern "C" fn(context: *mut ibv_context, attr: *mut c_void) -> *mut c_void>,
    /// `attr`: `ibv_qp_rate_limit_attr *`.
    pub modify_qp_rate_limit:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp, attr: *mut c_void) -> c_int>,
    /// `attr`: `ibv_parent_domain_init_attr *`.
    pub alloc_parent_domain:
        Option<unsafe extern "C" fn(context: *mut ibv_context, attr: *mut c_void) -> *mut ibv_pd>,
    /// `td`: `struct ibv_td *`.
    pub dealloc_td: Option<unsafe extern "C" fn(td: *mut c_void) -> c_int>,
    pub alloc_td: Option<
        unsafe extern "C" fn(context: *mut ibv_context, init_attr: *mut c_void) -> *mut c_void,
    >,
    /// `attr`: `ibv_modify_cq_attr *`.
    pub modify_cq: Option<unsafe extern "C" fn(cq: *mut ibv_cq, attr: *mut c_void) -> c_int>,
    /// `op`/`bad_op`: `struct ibv_ops_wr`.
    pub post_srq_ops: Option<
        unsafe extern "C" fn(srq: *mut ibv_srq, op: *mut c_void, bad_op: *mut *mut c_void) -> c_int,
    >,
    pub destroy_rwq_ind_table: Option<unsafe extern "C" fn(rwq_ind_table: *mut c_void) -> c_int>,
    pub create_rwq_ind_table: Option<
        unsafe extern "C" fn(context: *mut ibv_context, init_attr: *mut c_void) -> *mut c_void,
    >,
    /// `wq`: `struct ibv_wq *`.
    pub destroy_wq: Option<unsafe extern "C" fn(wq: *mut c_void) -> c_int>,
    pub modify_wq: Option<unsafe extern "C" fn(wq: *mut c_void, wq_attr: *mut c_void) -> c_int>,
    pub create_wq: Option<
        unsafe extern "C" fn(context: *mut ibv_context, wq_init_attr: *mut c_void) -> *mut c_void,
    >,
    /// `values`: `struct ibv_values_ex *`.
    pub query_rt_values:
        Option<unsafe extern "C" fn(context: *mut ibv_context, values: *mut c_void) -> c_int>,
    /// Returns `struct ibv_cq_ex *` (which begins with a `struct ibv_cq`).
    pub create_cq_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            init_attr: *mut ibv_cq_init_attr_ex,
        ) -> *mut c_void,
    >,
    /// `struct verbs_ex_private *` (upstream-private, never read by applications).
    pub r#priv: *mut c_void,
    /// `attr`: `struct ibv_device_attr_ex *` (400 bytes in v44; `attr_size` says how much).
    pub query_device_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            input: *const ibv_query_device_ex_input,
            attr: *mut c_void,
            attr_size: usize,
        ) -> c_int,
    >,
    /// `flow`: `struct ibv_flow *`.
    pub ibv_destroy_flow: Option<unsafe extern "C" fn(flow: *mut c_void) -> c_int>,
    pub ABI_placeholder2: Option<unsafe extern "C" fn()>,
    /// Returns `struct ibv_flow *`; `flow_attr`: `struct ibv_flow_attr *`.
    pub ibv_create_flow:
        Option<unsafe extern "C" fn(qp: *mut ibv_qp, flow_attr: *mut c_void) -> *mut c_void>,
    pub ABI_placeholder1: Option<unsafe extern "C" fn()>,
    pub open_qp: Option<
        unsafe extern "C" fn(context: *mut ibv_context, attr: *mut ibv_qp_open_attr) -> *mut ibv_qp,
    >,
    pub create_qp_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            qp_init_attr_ex: *mut ibv_qp_init_attr_ex,
        ) -> *mut ibv_qp,
    >,
    pub get_srq_num: Option<unsafe extern "C" fn(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int>,
    pub create_srq_ex: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            srq_init_attr_ex: *mut ibv_srq_init_attr_ex,
        ) -> *mut ibv_srq,
    >,
    pub open_xrcd: Option<
        unsafe extern "C" fn(
            context: *mut ibv_context,
            xrcd_init_attr: *mut ibv_xrcd_init_attr,
        ) -> *mut ibv_xrcd,
    >,
    pub close_xrcd: Option<unsafe extern "C" fn(xrcd: *mut ibv_xrcd) -> c_int>,
    pub _ABI_placeholder3: u64,
    /// Must be immediately before `context`; set to `size_of::<verbs_context>()` (648).
    pub sz: usize,
    /// Must be the last member.
    pub context: ibv_context,
}

/// `offsetof(struct verbs_context, context)`: subtract from an `ibv_context *` to reach
/// the enclosing `verbs_context` (what `verbs_get_ctx` does).
pub const VERBS_CONTEXT_CONTEXT_OFFSET: usize = core::mem::offset_of!(verbs_context, context);

/// `struct ibv_query_device_ex_input`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    /// Big-endian (`__be64`).
    pub node_guid: u64,
    /// Big-endian (`__be64`).
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: ibv_atomic_cap,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr` (52 bytes; the exported `ibv_query_port@IBVERBS_1.1` fills only
/// the first 48, the legacy `_compat_ibv_port_attr`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_port_attr {
    pub state: ibv_port_state,
    pub max_mtu: ibv_mtu,
    pub active_mtu: ibv_mtu,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    /// `IBV_LINK_LAYER_*`.
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// The `element` union of `struct ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element {
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    pub srq: *mut ibv_srq,
    /// `struct ibv_wq *`.
    pub wq: *mut c_void,
    pub port_num: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    pub element: ibv_async_event_element,
    pub event_type: ibv_event_type,
}
