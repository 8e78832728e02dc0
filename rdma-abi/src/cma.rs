//! Mirrors of `<rdma/rdma_cma.h>` (rdma-core master layout; identical to 44 plus `arg`).

use crate::verbs::{
    ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_gid, ibv_pd, ibv_qp, ibv_sa_path_rec,
    ibv_srq,
};
use libc::{sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage};

pub type rdma_cm_event_type = u32;
pub const RDMA_CM_EVENT_ADDR_RESOLVED: u32 = 0;
pub const RDMA_CM_EVENT_ADDR_ERROR: u32 = 1;
pub const RDMA_CM_EVENT_ROUTE_RESOLVED: u32 = 2;
pub const RDMA_CM_EVENT_ROUTE_ERROR: u32 = 3;
pub const RDMA_CM_EVENT_CONNECT_REQUEST: u32 = 4;
pub const RDMA_CM_EVENT_CONNECT_RESPONSE: u32 = 5;
pub const RDMA_CM_EVENT_CONNECT_ERROR: u32 = 6;
pub const RDMA_CM_EVENT_UNREACHABLE: u32 = 7;
pub const RDMA_CM_EVENT_REJECTED: u32 = 8;
pub const RDMA_CM_EVENT_ESTABLISHED: u32 = 9;
pub const RDMA_CM_EVENT_DISCONNECTED: u32 = 10;
pub const RDMA_CM_EVENT_DEVICE_REMOVAL: u32 = 11;
pub const RDMA_CM_EVENT_MULTICAST_JOIN: u32 = 12;
pub const RDMA_CM_EVENT_MULTICAST_ERROR: u32 = 13;
pub const RDMA_CM_EVENT_ADDR_CHANGE: u32 = 14;
pub const RDMA_CM_EVENT_TIMEWAIT_EXIT: u32 = 15;
pub const RDMA_CM_EVENT_ADDRINFO_RESOLVED: u32 = 16;
pub const RDMA_CM_EVENT_ADDRINFO_ERROR: u32 = 17;
pub const RDMA_CM_EVENT_USER: u32 = 18;
pub const RDMA_CM_EVENT_INTERNAL: u32 = 19;

pub type rdma_port_space = u32;
pub const RDMA_PS_IPOIB: u32 = 0x0002;
pub const RDMA_PS_TCP: u32 = 0x0106;
pub const RDMA_PS_UDP: u32 = 0x0111;
pub const RDMA_PS_IB: u32 = 0x013F;

pub const RDMA_IB_IP_PS_MASK: u64 = 0xFFFF_FFFF_FFFF_0000;
pub const RDMA_IB_IP_PORT_MASK: u64 = 0x0000_0000_0000_FFFF;
pub const RDMA_IB_IP_PS_TCP: u64 = 0x0000_0000_0106_0000;
pub const RDMA_IB_IP_PS_UDP: u64 = 0x0000_0000_0111_0000;
pub const RDMA_IB_PS_IB: u64 = 0x0000_0000_013F_0000;

pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;
pub const RDMA_MAX_RESP_RES: u8 = 0xFF;
pub const RDMA_MAX_INIT_DEPTH: u8 = 0xFF;

pub const RAI_PASSIVE: i32 = 0x01;
pub const RAI_NUMERICHOST: i32 = 0x02;
pub const RAI_NOROUTE: i32 = 0x04;
pub const RAI_FAMILY: i32 = 0x08;
pub const RAI_SA: i32 = 0x10;
pub const RAI_DNS: i32 = 0x20;

pub const RDMA_OPTION_ID: i32 = 0;
pub const RDMA_OPTION_IB: i32 = 1;
pub const RDMA_OPTION_ID_TOS: i32 = 0;
pub const RDMA_OPTION_ID_REUSEADDR: i32 = 1;
pub const RDMA_OPTION_ID_AFONLY: i32 = 2;
pub const RDMA_OPTION_ID_ACK_TIMEOUT: i32 = 3;
pub const RDMA_OPTION_IB_PATH: i32 = 1;

pub const RDMA_CM_JOIN_MC_ATTR_ADDRESS: u32 = 1 << 0;
pub const RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS: u32 = 1 << 1;
pub const RDMA_CM_JOIN_MC_ATTR_RESERVED: u32 = 1 << 2;
pub const RDMA_MC_JOIN_FLAG_FULLMEMBER: u32 = 0;
pub const RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: u32 = 1;
pub const RDMA_MC_JOIN_FLAG_RESERVED: u32 = 2;

pub const AF_IB: i32 = 27;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ib_addr {
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
    pub pkey: u16,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_sockaddr {
    pub addr: sockaddr,
    pub sin: sockaddr_in,
    pub sin6: sockaddr_in6,
    pub storage: sockaddr_storage,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_addr_union {
    pub ibaddr: rdma_ib_addr,
}

/// `struct rdma_addr`: the C header names the union members `src_addr`,
/// `src_sin`, … ; here each side is one `rdma_sockaddr` union.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addr {
    pub src: rdma_sockaddr,
    pub dst: rdma_sockaddr,
    pub addr: rdma_addr_union,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut ibv_sa_path_rec,
    pub num_paths: i32,
}

#[repr(C)]
pub struct rdma_event_channel {
    pub fd: i32,
}

#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut libc::c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: rdma_port_space,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub pd: *mut ibv_pd,
    pub qp_type: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_conn_param {
    pub private_data: *const libc::c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ud_param {
    pub private_data: *const libc::c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
    pub arg: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: rdma_cm_event_type,
    pub status: i32,
    pub param: rdma_cm_event_param,
}

#[repr(C)]
pub struct rdma_addrinfo {
    pub ai_flags: i32,
    pub ai_family: i32,
    pub ai_qp_type: i32,
    pub ai_port_space: i32,
    pub ai_src_len: libc::socklen_t,
    pub ai_dst_len: libc::socklen_t,
    pub ai_src_addr: *mut sockaddr,
    pub ai_dst_addr: *mut sockaddr,
    pub ai_src_canonname: *mut libc::c_char,
    pub ai_dst_canonname: *mut libc::c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut libc::c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut libc::c_void,
    pub ai_next: *mut rdma_addrinfo,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_cm_join_mc_attr_ex {
    pub comp_mask: u32,
    pub join_flags: u32,
    pub addr: *mut sockaddr,
}

/// `struct sockaddr_ib` from `<infiniband/ib.h>`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sockaddr_ib {
    pub sib_family: u16,
    pub sib_pkey: u16,
    pub sib_flowinfo: u32,
    pub sib_addr: ibv_gid,
    pub sib_sid: u64,
    pub sib_sid_mask: u64,
    pub sib_scope_id: u64,
}

// Sizes and offsets measured on upstream's headers (shared/reference/abi.md);
// tests/layout.rs proves every field against the system headers as well.
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<rdma_ib_addr>() == 40);
    assert!(size_of::<rdma_addr>() == 296);
    assert!(size_of::<rdma_route>() == 312);
    assert!(size_of::<rdma_cm_id>() == 416);
    assert!(offset_of!(rdma_cm_id, route) == 32);
    assert!(offset_of!(rdma_cm_id, ps) == 344);
    assert!(offset_of!(rdma_cm_id, port_num) == 348);
    assert!(offset_of!(rdma_cm_id, event) == 352);
    assert!(offset_of!(rdma_cm_id, pd) == 400);
    assert!(offset_of!(rdma_cm_id, qp_type) == 408);
    assert!(size_of::<rdma_conn_param>() == 24);
    assert!(size_of::<rdma_ud_param>() == 56);
    assert!(offset_of!(rdma_ud_param, ah_attr) == 16);
    assert!(size_of::<rdma_cm_event>() == 80);
    assert!(offset_of!(rdma_cm_event, param) == 24);
    assert!(size_of::<rdma_addrinfo>() == 96);
    assert!(size_of::<rdma_cm_join_mc_attr_ex>() == 16);
    assert!(size_of::<sockaddr_ib>() == 48);
    assert!(size_of::<ibv_sa_path_rec>() == 64);
};
