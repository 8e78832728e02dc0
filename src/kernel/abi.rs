//! `#[repr(C)]` mirrors of the kernel's `<rdma/rdma_user_cm.h>` (ucma ABI 4)
//! and of the two `<rdma/ib_user_verbs.h>` structs it embeds, written from the
//! uapi header. Every size is asserted at compile time below, and the test
//! module compiles a C probe against `/usr/include/rdma/rdma_user_cm.h` and
//! compares every size and field offset.
#![allow(non_camel_case_types)]

pub const RDMA_USER_CM_ABI_VERSION: u32 = 4;

// Commands (enum order of the uapi header).
pub const CMD_CREATE_ID: u32 = 0;
pub const CMD_DESTROY_ID: u32 = 1;
pub const CMD_RESOLVE_ROUTE: u32 = 4;
pub const CMD_CONNECT: u32 = 6;
pub const CMD_LISTEN: u32 = 7;
pub const CMD_ACCEPT: u32 = 8;
pub const CMD_REJECT: u32 = 9;
pub const CMD_DISCONNECT: u32 = 10;
pub const CMD_INIT_QP_ATTR: u32 = 11;
pub const CMD_GET_EVENT: u32 = 12;
pub const CMD_SET_OPTION: u32 = 14;
pub const CMD_NOTIFY: u32 = 15;
pub const CMD_LEAVE_MCAST: u32 = 17;
pub const CMD_MIGRATE_ID: u32 = 18;
pub const CMD_QUERY: u32 = 19;
pub const CMD_BIND: u32 = 20;
pub const CMD_RESOLVE_ADDR: u32 = 21;
pub const CMD_JOIN_MCAST: u32 = 22;

// RDMA_USER_CM_CMD_QUERY options.
pub const QUERY_ADDR: u32 = 0;
pub const QUERY_PATH: u32 = 1;
pub const QUERY_GID: u32 = 2;

/// `IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED`: the reason `rdma_reject_ece` sends.
pub const REJ_VENDOR_OPTION_NOT_SUPPORTED: u8 = 35;

/// `struct __kernel_sockaddr_storage`: 128 bytes, pointer-aligned.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct kernel_sockaddr_storage(pub [u8; 128]);

impl Default for kernel_sockaddr_storage {
    fn default() -> Self {
        kernel_sockaddr_storage([0; 128])
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_cmd_hdr {
    pub cmd: u32,
    pub in_: u16,
    pub out: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_create_id {
    pub uid: u64,
    pub response: u64,
    pub ps: u16,
    pub qp_type: u8,
    pub reserved: [u8; 5],
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_create_id_resp {
    pub id: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_destroy_id {
    pub response: u64,
    pub id: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_destroy_id_resp {
    pub events_reported: u32,
}

/// MIGRATE_ID, written on the new file: `fd` is the file the id is on now.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_migrate_id {
    pub response: u64,
    pub id: u32,
    pub fd: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_migrate_resp {
    pub events_reported: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_bind {
    pub id: u32,
    pub addr_size: u16,
    pub reserved: u16,
    pub addr: kernel_sockaddr_storage,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_resolve_addr {
    pub id: u32,
    pub timeout_ms: u32,
    pub src_size: u16,
    pub dst_size: u16,
    pub reserved: u32,
    pub src_addr: kernel_sockaddr_storage,
    pub dst_addr: kernel_sockaddr_storage,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_resolve_route {
    pub id: u32,
    pub timeout_ms: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_query {
    pub response: u64,
    pub id: u32,
    pub option: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_query_addr_resp {
    pub node_guid: u64,
    pub port_num: u8,
    pub reserved: u8,
    pub pkey: u16,
    pub src_size: u16,
    pub dst_size: u16,
    pub src_addr: kernel_sockaddr_storage,
    pub dst_addr: kernel_sockaddr_storage,
    pub ibdev_index: u32,
    pub reserved1: u32,
}

/// `struct ib_path_rec_data` (`<rdma/ib_user_sa.h>`): a wire-format SA path
/// record (the same 72 bytes as libibverbs' `struct ibv_path_data`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ib_path_rec_data {
    pub flags: u32,
    pub reserved: u32,
    pub path_rec: [u32; 16],
}

/// The fixed head of `struct rdma_ucm_query_path_resp` (a flexible array of
/// `ib_path_rec_data` follows).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_query_path_resp {
    pub num_paths: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ucm_conn_param {
    pub qp_num: u32,
    pub qkey: u32,
    pub private_data: [u8; 256],
    pub private_data_len: u8,
    pub srq: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub valid: u8,
}

impl Default for rdma_ucm_conn_param {
    fn default() -> Self {
        // SAFETY: plain integers and byte arrays: all-zero is valid.
        unsafe { std::mem::zeroed() }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ib_uverbs_global_route {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reserved: u8,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ib_uverbs_ah_attr {
    pub grh: ib_uverbs_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
    pub reserved: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ucm_ud_param {
    pub qp_num: u32,
    pub qkey: u32,
    pub ah_attr: ib_uverbs_ah_attr,
    pub private_data: [u8; 256],
    pub private_data_len: u8,
    pub reserved: [u8; 7],
}

#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct rdma_ucm_ece {
    pub vendor_id: u32,
    pub attr_mod: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_connect {
    pub conn_param: rdma_ucm_conn_param,
    pub id: u32,
    pub reserved: u32,
    pub ece: rdma_ucm_ece,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_listen {
    pub id: u32,
    pub backlog: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_accept {
    pub uid: u64,
    pub conn_param: rdma_ucm_conn_param,
    pub id: u32,
    pub reserved: u32,
    pub ece: rdma_ucm_ece,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ucm_reject {
    pub id: u32,
    pub private_data_len: u8,
    pub reason: u8,
    pub reserved: [u8; 2],
    pub private_data: [u8; 256],
}

impl Default for rdma_ucm_reject {
    fn default() -> Self {
        // SAFETY: plain integers and byte arrays: all-zero is valid.
        unsafe { std::mem::zeroed() }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_disconnect {
    pub id: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_init_qp_attr {
    pub response: u64,
    pub id: u32,
    pub qp_state: u32,
}

/// `struct ib_uverbs_qp_attr`: INIT_QP_ATTR's response (the mask comes first).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ib_uverbs_qp_attr {
    pub qp_attr_mask: u32,
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub ah_attr: ib_uverbs_ah_attr,
    pub alt_ah_attr: ib_uverbs_ah_attr,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub reserved: [u8; 5],
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_notify {
    pub id: u32,
    pub event: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_join_mcast {
    pub response: u64,
    pub uid: u64,
    pub id: u32,
    pub addr_size: u16,
    pub join_flags: u16,
    pub addr: kernel_sockaddr_storage,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_get_event {
    pub response: u64,
}

/// The unnamed union of `struct rdma_ucm_event_resp` (4-byte aligned: it
/// starts at offset 20).
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_ucm_event_param {
    pub conn: rdma_ucm_conn_param,
    pub ud: rdma_ucm_ud_param,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ucm_event_resp {
    pub uid: u64,
    pub id: u32,
    pub event: u32,
    pub status: u32,
    pub param: rdma_ucm_event_param,
    pub reserved: u32,
    pub ece: rdma_ucm_ece,
}

impl Default for rdma_ucm_event_resp {
    fn default() -> Self {
        // SAFETY: integers, byte arrays and a union of such: all-zero is valid.
        unsafe { std::mem::zeroed() }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ucm_set_option {
    pub optval: u64,
    pub id: u32,
    pub level: u32,
    pub optname: u32,
    pub optlen: u32,
}

// Sizes and offsets of the uapi header on x86-64 (kernel-abi.md §2); the test
// below proves them, and every other field, against the installed header.
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<rdma_ucm_cmd_hdr>() == 8);
    assert!(size_of::<kernel_sockaddr_storage>() == 128 && align_of::<kernel_sockaddr_storage>() == 8);
    assert!(size_of::<rdma_ucm_create_id>() == 24);
    assert!(size_of::<rdma_ucm_destroy_id>() == 16);
    assert!(size_of::<rdma_ucm_migrate_id>() == 16);
    assert!(size_of::<rdma_ucm_bind>() == 136);
    assert!(offset_of!(rdma_ucm_bind, addr) == 8);
    assert!(size_of::<rdma_ucm_resolve_addr>() == 272);
    assert!(offset_of!(rdma_ucm_resolve_addr, src_addr) == 16);
    assert!(offset_of!(rdma_ucm_resolve_addr, dst_addr) == 144);
    assert!(size_of::<rdma_ucm_resolve_route>() == 8);
    assert!(size_of::<rdma_ucm_query>() == 16);
    assert!(size_of::<rdma_ucm_query_addr_resp>() == 280);
    assert!(offset_of!(rdma_ucm_query_addr_resp, ibdev_index) == 272);
    assert!(size_of::<ib_path_rec_data>() == 72);
    assert!(size_of::<rdma_ucm_query_path_resp>() == 8);
    assert!(size_of::<rdma_ucm_conn_param>() == 272);
    assert!(offset_of!(rdma_ucm_conn_param, private_data_len) == 264);
    assert!(offset_of!(rdma_ucm_conn_param, valid) == 271);
    assert!(size_of::<ib_uverbs_ah_attr>() == 32);
    assert!(size_of::<rdma_ucm_ud_param>() == 304);
    assert!(offset_of!(rdma_ucm_ud_param, private_data_len) == 296);
    assert!(size_of::<rdma_ucm_connect>() == 288);
    assert!(offset_of!(rdma_ucm_connect, id) == 272);
    assert!(offset_of!(rdma_ucm_connect, ece) == 280);
    assert!(size_of::<rdma_ucm_listen>() == 8);
    assert!(size_of::<rdma_ucm_accept>() == 296);
    assert!(offset_of!(rdma_ucm_accept, id) == 280);
    assert!(offset_of!(rdma_ucm_accept, ece) == 288);
    assert!(size_of::<rdma_ucm_reject>() == 264);
    assert!(size_of::<rdma_ucm_disconnect>() == 4);
    assert!(size_of::<rdma_ucm_init_qp_attr>() == 16);
    assert!(size_of::<ib_uverbs_qp_attr>() == 144);
    assert!(size_of::<rdma_ucm_notify>() == 8);
    assert!(size_of::<rdma_ucm_join_mcast>() == 152);
    assert!(offset_of!(rdma_ucm_join_mcast, addr) == 24);
    assert!(size_of::<rdma_ucm_get_event>() == 8);
    assert!(size_of::<rdma_ucm_event_param>() == 304);
    assert!(size_of::<rdma_ucm_event_resp>() == 336);
    assert!(offset_of!(rdma_ucm_event_resp, param) == 20);
    assert!(offset_of!(rdma_ucm_event_resp, reserved) == 324);
    assert!(offset_of!(rdma_ucm_event_resp, ece) == 328);
    assert!(size_of::<rdma_ucm_set_option>() == 24);
};

#[cfg(test)]
mod layout {
    //! Every mirror against `<rdma/rdma_user_cm.h>`: one list drives both the
    //! Rust side (`size_of`/`offset_of!`) and a C probe compiled with `$CC`.
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    struct Probe {
        rust: Vec<String>,
        c: String,
    }

    macro_rules! check {
        ($p:ident; $t:ident = $c:literal { $($f:ident $(= $cf:literal)?),* $(,)? }) => {{
            $p.rust.push(format!("T {} {} {}", stringify!($t), size_of::<$t>(), align_of::<$t>()));
            $p.c.push_str(&format!(
                "printf(\"T {} %zu %zu\\n\", sizeof({c}), _Alignof({c}));\n",
                stringify!($t), c = $c));
            $(
                let cf: &str = check!(@name $f $(, $cf)?);
                $p.rust.push(format!("F {}.{} {}", stringify!($t), stringify!($f), offset_of!($t, $f)));
                $p.c.push_str(&format!(
                    "printf(\"F {}.{} %zu\\n\", offsetof({}, {}));\n",
                    stringify!($t), stringify!($f), $c, cf));
            )*
        }};
        (@name $f:ident) => { stringify!($f) };
        (@name $f:ident, $cf:literal) => { $cf };
    }

    fn build() -> Probe {
        let mut p = Probe { rust: Vec::new(), c: String::new() };
        check!(p; kernel_sockaddr_storage = "struct __kernel_sockaddr_storage" {});
        check!(p; rdma_ucm_cmd_hdr = "struct rdma_ucm_cmd_hdr" { cmd, in_ = "in", out });
        check!(p; rdma_ucm_create_id = "struct rdma_ucm_create_id" { uid, response, ps, qp_type, reserved });
        check!(p; rdma_ucm_create_id_resp = "struct rdma_ucm_create_id_resp" { id });
        check!(p; rdma_ucm_destroy_id = "struct rdma_ucm_destroy_id" { response, id, reserved });
        check!(p; rdma_ucm_destroy_id_resp = "struct rdma_ucm_destroy_id_resp" { events_reported });
        check!(p; rdma_ucm_migrate_id = "struct rdma_ucm_migrate_id" { response, id, fd });
        check!(p; rdma_ucm_migrate_resp = "struct rdma_ucm_migrate_resp" { events_reported });
        check!(p; rdma_ucm_bind = "struct rdma_ucm_bind" { id, addr_size, reserved, addr });
        check!(p; rdma_ucm_resolve_addr = "struct rdma_ucm_resolve_addr" {
            id, timeout_ms, src_size, dst_size, reserved, src_addr, dst_addr
        });
        check!(p; rdma_ucm_resolve_route = "struct rdma_ucm_resolve_route" { id, timeout_ms });
        check!(p; rdma_ucm_query = "struct rdma_ucm_query" { response, id, option });
        check!(p; rdma_ucm_query_addr_resp = "struct rdma_ucm_query_addr_resp" {
            node_guid, port_num, reserved, pkey, src_size, dst_size, src_addr, dst_addr, ibdev_index, reserved1
        });
        check!(p; ib_path_rec_data = "struct ib_path_rec_data" { flags, reserved, path_rec });
        check!(p; rdma_ucm_query_path_resp = "struct rdma_ucm_query_path_resp" { num_paths, reserved });
        check!(p; rdma_ucm_conn_param = "struct rdma_ucm_conn_param" {
            qp_num, qkey, private_data, private_data_len, srq, responder_resources, initiator_depth,
            flow_control, retry_count, rnr_retry_count, valid
        });
        check!(p; ib_uverbs_global_route = "struct ib_uverbs_global_route" {
            dgid, flow_label, sgid_index, hop_limit, traffic_class, reserved
        });
        check!(p; ib_uverbs_ah_attr = "struct ib_uverbs_ah_attr" {
            grh, dlid, sl, src_path_bits, static_rate, is_global, port_num, reserved
        });
        check!(p; rdma_ucm_ud_param = "struct rdma_ucm_ud_param" {
            qp_num, qkey, ah_attr, private_data, private_data_len, reserved
        });
        check!(p; rdma_ucm_ece = "struct rdma_ucm_ece" { vendor_id, attr_mod });
        check!(p; rdma_ucm_connect = "struct rdma_ucm_connect" { conn_param, id, reserved, ece });
        check!(p; rdma_ucm_listen = "struct rdma_ucm_listen" { id, backlog });
        check!(p; rdma_ucm_accept = "struct rdma_ucm_accept" { uid, conn_param, id, reserved, ece });
        check!(p; rdma_ucm_reject = "struct rdma_ucm_reject" {
            id, private_data_len, reason, reserved, private_data
        });
        check!(p; rdma_ucm_disconnect = "struct rdma_ucm_disconnect" { id });
        check!(p; rdma_ucm_init_qp_attr = "struct rdma_ucm_init_qp_attr" { response, id, qp_state });
        check!(p; ib_uverbs_qp_attr = "struct ib_uverbs_qp_attr" {
            qp_attr_mask, qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn,
            dest_qp_num, qp_access_flags, ah_attr, alt_ah_attr, max_send_wr, max_recv_wr,
            max_send_sge, max_recv_sge, max_inline_data, pkey_index, alt_pkey_index,
            en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer,
            port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, reserved
        });
        check!(p; rdma_ucm_notify = "struct rdma_ucm_notify" { id, event });
        check!(p; rdma_ucm_join_mcast = "struct rdma_ucm_join_mcast" {
            response, uid, id, addr_size, join_flags, addr
        });
        check!(p; rdma_ucm_get_event = "struct rdma_ucm_get_event" { response });
        check!(p; rdma_ucm_event_param = "__typeof__(((struct rdma_ucm_event_resp *)0)->param)" { conn, ud });
        check!(p; rdma_ucm_event_resp = "struct rdma_ucm_event_resp" { uid, id, event, status, param, reserved, ece });
        check!(p; rdma_ucm_set_option = "struct rdma_ucm_set_option" { optval, id, level, optname, optlen });
        // Constants: commands, query options, ABI version.
        for (name, v) in [
            ("RDMA_USER_CM_ABI_VERSION", RDMA_USER_CM_ABI_VERSION),
            ("RDMA_USER_CM_CMD_CREATE_ID", CMD_CREATE_ID),
            ("RDMA_USER_CM_CMD_DESTROY_ID", CMD_DESTROY_ID),
            ("RDMA_USER_CM_CMD_RESOLVE_ROUTE", CMD_RESOLVE_ROUTE),
            ("RDMA_USER_CM_CMD_CONNECT", CMD_CONNECT),
            ("RDMA_USER_CM_CMD_LISTEN", CMD_LISTEN),
            ("RDMA_USER_CM_CMD_ACCEPT", CMD_ACCEPT),
            ("RDMA_USER_CM_CMD_REJECT", CMD_REJECT),
            ("RDMA_USER_CM_CMD_DISCONNECT", CMD_DISCONNECT),
            ("RDMA_USER_CM_CMD_INIT_QP_ATTR", CMD_INIT_QP_ATTR),
            ("RDMA_USER_CM_CMD_GET_EVENT", CMD_GET_EVENT),
            ("RDMA_USER_CM_CMD_SET_OPTION", CMD_SET_OPTION),
            ("RDMA_USER_CM_CMD_NOTIFY", CMD_NOTIFY),
            ("RDMA_USER_CM_CMD_LEAVE_MCAST", CMD_LEAVE_MCAST),
            ("RDMA_USER_CM_CMD_MIGRATE_ID", CMD_MIGRATE_ID),
            ("RDMA_USER_CM_CMD_QUERY", CMD_QUERY),
            ("RDMA_USER_CM_CMD_BIND", CMD_BIND),
            ("RDMA_USER_CM_CMD_RESOLVE_ADDR", CMD_RESOLVE_ADDR),
            ("RDMA_USER_CM_CMD_JOIN_MCAST", CMD_JOIN_MCAST),
            ("RDMA_USER_CM_QUERY_ADDR", QUERY_ADDR),
            ("RDMA_USER_CM_QUERY_PATH", QUERY_PATH),
            ("RDMA_USER_CM_QUERY_GID", QUERY_GID),
        ] {
            p.rust.push(format!("K {name} {v}"));
            p.c.push_str(&format!("printf(\"K {name} %u\\n\", (unsigned){name});\n"));
        }
        p
    }

    #[test]
    fn layouts_match_the_uapi_header() {
        let p = build();
        let dir = std::env::temp_dir().join(format!("rdmacm-ucma-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("probe.c");
        let exe = dir.join("probe");
        let text = format!(
            "#include <stddef.h>\n#include <stdio.h>\n#include <rdma/rdma_user_cm.h>\nint main(void) {{\n{}return 0;\n}}\n",
            p.c
        );
        std::fs::write(&src, text).unwrap();
        let cc = std::env::var("CC").ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "cc".into());
        let mut words = cc.split_whitespace();
        let out = std::process::Command::new(words.next().unwrap())
            .args(words)
            .args(["-std=gnu11", "-Wall", "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .expect("run the C compiler");
        assert!(out.status.success(), "probe did not compile:\n{}", String::from_utf8_lossy(&out.stderr));
        let run = std::process::Command::new(&exe).output().expect("run the probe");
        let _ = std::fs::remove_dir_all(&dir);
        let c: Vec<String> = String::from_utf8(run.stdout).unwrap().lines().map(String::from).collect();
        assert_eq!(c.len(), p.rust.len());
        let bad: Vec<String> =
            p.rust.iter().zip(&c).filter(|(r, c)| r != c).map(|(r, c)| format!("rust {r} / C {c}")).collect();
        assert!(bad.is_empty(), "layout mismatches:\n{}", bad.join("\n"));
        // Field sizes that offsets alone do not show.
        assert_eq!(size_of::<[u32; 16]>(), 64);
    }
}
