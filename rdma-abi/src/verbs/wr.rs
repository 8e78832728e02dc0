//! Work requests and completions: `ibv_sge`, `ibv_send_wr`, `ibv_recv_wr`, `ibv_wc`,
//! memory-window binds, `ibv_grh` (the 40 bytes in front of every UD receive) and `ibv_ece`.
//!
//! C's anonymous unions need a Rust field name. Where every member is a `uint32_t`
//! (`imm_data`/`invalidate_rkey` in `ibv_send_wr`, `imm_data`/`invalidated_rkey` in
//! `ibv_wc`) the field is a plain `u32` named after the first member; the anonymous
//! `bind_mw`/`tso` union of `ibv_send_wr` is the field `bind_mw_tso`.

use super::*;
use libc::{c_int, c_uint, c_void};

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    /// `enum ibv_access_flags` bits.
    pub mw_access_flags: c_uint,
}

/// `struct ibv_mw_bind` (argument of `ibv_bind_mw` / `ops.bind_mw`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    pub send_flags: c_uint,
    pub bind_info: ibv_mw_bind_info,
}

/// `wr.rdma` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// `wr.atomic` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// `wr.ud` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_send_wr_rdma,
    pub atomic: ibv_send_wr_atomic,
    pub ud: ibv_send_wr_ud,
}

/// `qp_type.xrc` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_xrc {
    pub remote_srqn: u32,
}

/// The `qp_type` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_qp_type {
    pub xrc: ibv_send_wr_xrc,
}

/// `bind_mw` member of the last (anonymous) union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_bind_mw {
    pub mw: *mut ibv_mw,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// `tso` member of the last (anonymous) union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr_tso {
    pub hdr: *mut c_void,
    pub hdr_sz: u16,
    pub mss: u16,
}

/// The anonymous `{ bind_mw; tso; }` union at the end of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_bind_mw_tso {
    pub bind_mw: ibv_send_wr_bind_mw,
    pub tso: ibv_send_wr_tso,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: ibv_wr_opcode,
    /// `enum ibv_send_flags` bits.
    pub send_flags: c_uint,
    /// Anonymous union in C: `__be32 imm_data` (network byte order, `*_WITH_IMM`) or
    /// `uint32_t invalidate_rkey` (`*_INV`).
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    pub qp_type: ibv_send_wr_qp_type,
    /// Anonymous union in C (`wr->bind_mw` / `wr->tso`).
    pub bind_mw_tso: ibv_send_wr_bind_mw_tso,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: ibv_wc_status,
    pub opcode: ibv_wc_opcode,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// Anonymous union in C: `__be32 imm_data` (when `wc_flags & IBV_WC_WITH_IMM`, network
    /// byte order) or `uint32_t invalidated_rkey` (when `wc_flags & IBV_WC_WITH_INV`).
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    /// `enum ibv_wc_flags` bits.
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// Global Route Header: the first 40 bytes of every UD receive buffer.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_grh {
    /// Big-endian (`__be32`).
    pub version_tclass_flow: u32,
    /// Big-endian (`__be16`).
    pub paylen: u16,
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}
