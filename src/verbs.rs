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
