//! Mirrors of `<infiniband/sa.h>`: `ibv_sa_path_rec` (host form, `rdma_route.path_rec`) and
//! the wire-format `ibv_path_record` / `ibv_path_data` (`RDMA_OPTION_IB_PATH`, `ai_route`).

use super::ibv_gid;

/// `struct ibv_sa_path_rec`. `dlid`, `slid`, `flow_label` and `pkey` are big-endian.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_sa_path_rec {
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: i32,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: i32,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct ibv_path_record`: a packed SA PathRecord, all multi-byte fields big-endian.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_path_record {
    pub service_id: u64,
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    /// reserved 31:28, flow label 27:8, hop limit 7:0.
    pub flowlabel_hoplimit: u32,
    pub tclass: u8,
    /// reversible bit 7 (`IBV_PATH_RECORD_REVERSIBLE`), num path 6:0.
    pub reversible_numpath: u8,
    pub pkey: u16,
    /// QoS class 15:4, SL 3:0.
    pub qosclass_sl: u16,
    /// selector 7:6, MTU 5:0.
    pub mtu: u8,
    /// selector 7:6, rate 5:0.
    pub rate: u8,
    /// selector 7:6, lifetime 5:0.
    pub packetlifetime: u8,
    pub preference: u8,
    pub reserved: [u8; 6],
}

/// `struct ibv_path_data`: `flags` are `IBV_PATH_FLAG_*`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_path_data {
    pub flags: u32,
    pub reserved: u32,
    pub path: ibv_path_record,
}
