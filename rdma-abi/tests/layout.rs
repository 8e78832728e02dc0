//! Layout proof: every `#[repr(C)]` type of `rdma_abi::{cma, verbs}` is compared with the
//! system headers (`<infiniband/verbs.h>`, `<infiniband/sa.h>`, `<infiniband/ib.h>`,
//! `<rdma/rdma_cma.h>`): size and alignment of every struct/union, offset and size of every
//! field, and the value of every constant.
//!
//! One list (the `check_*!` invocations below) drives both sides: for each entry the Rust
//! side records a line computed with `size_of`/`align_of`/`offset_of!`, and the same entry
//! appends the matching `printf` to a C probe that is compiled with `$CC` (default `cc`)
//! against /usr/include and run. The two line lists must be identical; the test prints
//! every difference. Lines:
//!
//! ```text
//! T <type> <size> <align>
//! F <type>.<rust field path>[=<C member>] <offset> <size>
//! K <constant> <value>
//! ```
//!
//! C anonymous unions (no type name, no member name) are described by their member list:
//! the union starts at the offset of its first member, and its size/alignment follow the C
//! rule (largest member size rounded up to the largest member alignment).
//!
//! Completeness: every Rust struct's field list is also used as an exhaustive destructuring
//! pattern (a field missing from the list is a compile error), and every `pub struct`,
//! `pub union` and `pub const` found in the crate's sources must appear in the lists.

#![allow(non_camel_case_types, non_upper_case_globals, clippy::all)]

use core::mem::{align_of, offset_of, size_of};
use rdma_abi::cma::*;
use rdma_abi::verbs::*;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

/// How a C type is named in the probe.
enum CType {
    /// A type name usable in `sizeof`, `_Alignof` and `offsetof` (may be `__typeof__(...)`).
    Named(&'static str),
    /// An anonymous union inside `base`, given by its member designators.
    Anon {
        base: &'static str,
        members: &'static [&'static str],
    },
}

/// The C counterpart of one Rust field.
enum CField {
    /// Same member designator as the Rust path.
    Same,
    /// A different member designator (possibly nested, `a.b`).
    Path(&'static str),
    /// An anonymous union of the enclosing C type, given by its member designators.
    Anon(&'static [&'static str]),
    /// Not present in the system header (upstream-only): expected offset and size.
    RustOnly(usize, usize),
}

#[derive(Default)]
struct Probe {
    /// Statements of the C probe's `main`.
    c: String,
    /// Lines computed on the Rust side.
    rust: Vec<String>,
    /// Rust type names covered.
    types: BTreeSet<String>,
    /// Constant names covered.
    consts: BTreeSet<String>,
    /// Current type: display name and C description.
    cur: Option<(String, CType)>,
}

fn c_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// C expression: size of an anonymous union made of `members` of `base`.
fn anon_size(base: &str, members: &[&str]) -> String {
    let sizes: Vec<String> = members
        .iter()
        .map(|m| format!("sizeof(((BASE *)0)->{m})"))
        .collect();
    let aligns: Vec<String> = members
        .iter()
        .map(|m| format!("__alignof__(((BASE *)0)->{m})"))
        .collect();
    format!("ROUND_UP({}, {})", fold_max(&sizes), fold_max(&aligns)).replace("BASE", base)
}

fn anon_align(base: &str, members: &[&str]) -> String {
    let aligns: Vec<String> = members
        .iter()
        .map(|m| format!("__alignof__((({base} *)0)->{m})"))
        .collect();
    fold_max(&aligns)
}

fn fold_max(v: &[String]) -> String {
    let mut it = v.iter();
    let mut acc = it.next().expect("non-empty").clone();
    for x in it {
        acc = format!("MAX({acc}, {x})");
    }
    acc
}

/// `fn(*const T) -> *const F` only serves to infer `F`, the field's type.
fn field_size<T, F>(_: fn(*const T) -> *const F) -> usize {
    size_of::<F>()
}

/// Rust path text (`a.b.r#priv`) → C designator (`a.b.priv`).
fn c_path(rust: &str) -> String {
    rust.split('.')
        .map(|s| s.trim_start_matches("r#"))
        .collect::<Vec<_>>()
        .join(".")
}

impl Probe {
    fn ty(&mut self, rust_name: &str, disp: &str, size: usize, align: usize, ct: CType) {
        self.types.insert(rust_name.to_string());
        self.rust.push(format!("T {disp} {size} {align}"));
        let (cs, ca) = match &ct {
            CType::Named(t) => (format!("sizeof({t})"), format!("_Alignof({t})")),
            CType::Anon { base, members } => (anon_size(base, members), anon_align(base, members)),
        };
        writeln!(
            self.c,
            "    printf(\"T %s %zu %zu\\n\", {}, (size_t)({cs}), (size_t)({ca}));",
            c_str(disp)
        )
        .unwrap();
        self.cur = Some((disp.to_string(), ct));
    }

    fn field(&mut self, rust_path: &str, off: usize, size: usize, cf: CField) {
        let (disp, ct) = self.cur.as_ref().expect("field outside a type");
        let rust_path = rust_path.replace(' ', "");
        let (name, coff, csize) = match (&cf, ct) {
            (CField::RustOnly(o, s), _) => (
                format!("{disp}.{rust_path}=(absent in C)"),
                o.to_string(),
                s.to_string(),
            ),
            (CField::Anon(ms), CType::Named(t)) => (
                format!("{disp}.{rust_path}=(anonymous union {})", ms.join("|")),
                format!("offsetof({t}, {})", ms[0]),
                anon_size(t, ms),
            ),
            (CField::Anon(_), CType::Anon { .. }) => {
                panic!("nested anonymous unions are not supported")
            }
            (CField::Same | CField::Path(_), _) => {
                let cp = match cf {
                    CField::Path(p) => p.to_string(),
                    _ => c_path(&rust_path),
                };
                let name = if cp == rust_path {
                    format!("{disp}.{rust_path}")
                } else {
                    format!("{disp}.{rust_path}={cp}")
                };
                match ct {
                    CType::Named(t) => (
                        name,
                        format!("offsetof({t}, {cp})"),
                        format!("sizeof((({t} *)0)->{cp})"),
                    ),
                    CType::Anon { base, members } => (
                        name,
                        format!("offsetof({base}, {cp}) - offsetof({base}, {})", members[0]),
                        format!("sizeof((({base} *)0)->{cp})"),
                    ),
                }
            }
        };
        self.rust.push(format!("F {name} {off} {size}"));
        writeln!(
            self.c,
            "    printf(\"F %s %zu %zu\\n\", {}, (size_t)({coff}), (size_t)({csize}));",
            c_str(&name)
        )
        .unwrap();
    }

    fn konst(&mut self, name: &str, value: i64, c_expr: &str) {
        self.consts.insert(name.to_string());
        self.rust.push(format!("K {name} {value}"));
        writeln!(
            self.c,
            "    printf(\"K %s %lld\\n\", {}, (long long)({c_expr}));",
            c_str(name)
        )
        .unwrap();
    }

    fn c_source(&self) -> String {
        format!(
            "/* Generated by rdma-abi/tests/layout.rs -- do not edit. */\n\
             #include <stddef.h>\n#include <stdio.h>\n#include <stdint.h>\n\
             #include <infiniband/verbs.h>\n#include <infiniband/sa.h>\n\
             #include <infiniband/ib.h>\n#include <rdma/rdma_cma.h>\n\n\
             #define MAX(a, b) ((a) > (b) ? (a) : (b))\n\
             #define ROUND_UP(x, a) (((x) + (a) - 1) / (a) * (a))\n\n\
             int main(void)\n{{\n{}    return 0;\n}}\n",
            self.c
        )
    }
}

macro_rules! cty {
    ($t:literal) => {
        CType::Named($t)
    };
    ((anon $base:literal $($m:literal)+)) => {
        CType::Anon { base: $base, members: &[$($m),+] }
    };
}

macro_rules! cfield {
    () => {
        CField::Same
    };
    ($c:literal) => {
        CField::Path($c)
    };
    ((anon $($m:literal)+)) => {
        CField::Anon(&[$($m),+])
    };
    ((rust_only $o:literal $s:literal)) => {
        CField::RustOnly($o, $s)
    };
}

macro_rules! disp {
    ($t:ident) => {
        stringify!($t)
    };
    ($t:ident $d:literal) => {
        $d
    };
}

/// One field line per listed path; `path: spec` maps the C side (see `cfield!`).
macro_rules! fields {
    ($p:ident, $t:ident; $($($f:ident).+ $(: $spec:tt)?),* $(,)?) => {
        $(
            #[allow(unused_unsafe)]
            $p.field(
                stringify!($($f).+),
                offset_of!($t, $($f).+),
                field_size(|x: *const $t| unsafe { core::ptr::addr_of!((*x).$($f).+) }),
                cfield!($($spec)?),
            );
        )*
    };
}

/// A struct: the first brace lists every field (checked exhaustive by a pattern), the
/// optional second one extra nested paths / aliases.
macro_rules! check_struct {
    ($p:ident; $t:ident $(as $d:literal)? = $cty:tt { $($f:ident $(: $spec:tt)?),* $(,)? } $({ $($extra:tt)* })?) => {{
        // A compile error on this pattern means the field list above is incomplete.
        #[allow(dead_code)]
        fn exhaustive(x: &$t) {
            let $t { $($f: _),* } = x;
        }
        $p.ty(stringify!($t), disp!($t $($d)?), size_of::<$t>(), align_of::<$t>(), cty!($cty));
        fields!($p, $t; $($f $(: $spec)?),*);
        $( fields!($p, $t; $($extra)*); )?
    }};
}

/// A union: members listed (Rust unions cannot be destructured exhaustively).
macro_rules! check_union {
    ($p:ident; $t:ident $(as $d:literal)? = $cty:tt { $($body:tt)* }) => {{
        $p.ty(stringify!($t), disp!($t $($d)?), size_of::<$t>(), align_of::<$t>(), cty!($cty));
        fields!($p, $t; $($body)*);
    }};
}

/// Constants: `NAME` (same identifier in C) or `NAME = "C expression"`.
macro_rules! check_consts {
    ($p:ident; $($k:ident $(= $c:literal)?),* $(,)?) => {
        $( $p.konst(stringify!($k), $k as i64, check_consts!(@c $k $($c)?)); )*
    };
    (@c $k:ident) => { stringify!($k) };
    (@c $k:ident $c:literal) => { $c };
}

fn build() -> Probe {
    let mut p = Probe::default();

    // ------------------------------------------------------------------ verbs: device
    check_struct!(p; ibv_gid_global = "__typeof__(((union ibv_gid *)0)->global)" { subnet_prefix, interface_id });
    check_union!(p; ibv_gid = "union ibv_gid" { raw, global, global.subnet_prefix, global.interface_id });
    check_struct!(p; ibv_gid_entry = "struct ibv_gid_entry" { gid, gid_index, port_num, gid_type, ndev_ifindex });
    check_struct!(p; _ibv_device_ops = "struct _ibv_device_ops" { _dummy1, _dummy2 });
    check_struct!(p; ibv_device = "struct ibv_device" {
        _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path
    });
    check_struct!(p; ibv_context_ops = "struct ibv_context_ops" {
        _compat_query_device, _compat_query_port, _compat_alloc_pd, _compat_dealloc_pd,
        _compat_reg_mr, _compat_rereg_mr, _compat_dereg_mr, alloc_mw, bind_mw, dealloc_mw,
        _compat_create_cq, poll_cq, req_notify_cq, _compat_cq_event, _compat_resize_cq,
        _compat_destroy_cq, _compat_create_srq, _compat_modify_srq, _compat_query_srq,
        _compat_destroy_srq, post_srq_recv, _compat_create_qp, _compat_query_qp,
        _compat_modify_qp, _compat_destroy_qp, post_send, post_recv, _compat_create_ah,
        _compat_destroy_ah, _compat_attach_mcast, _compat_detach_mcast, _compat_async_event,
    });
    check_struct!(p; ibv_context = "struct ibv_context" {
        device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat
    } {
        ops.alloc_mw, ops.bind_mw, ops.dealloc_mw, ops.poll_cq, ops.req_notify_cq,
        ops.post_srq_recv, ops.post_send, ops.post_recv,
    });
    check_struct!(p; verbs_context = "struct verbs_context" {
        query_port, advise_mr, alloc_null_mr, read_counters, attach_counters_point_flow,
        create_counters, destroy_counters, reg_dm_mr, alloc_dm, free_dm,
        modify_flow_action_esp, destroy_flow_action, create_flow_action_esp,
        modify_qp_rate_limit, alloc_parent_domain, dealloc_td, alloc_td, modify_cq,
        post_srq_ops, destroy_rwq_ind_table, create_rwq_ind_table, destroy_wq, modify_wq,
        create_wq, query_rt_values, create_cq_ex, r#priv, query_device_ex, ibv_destroy_flow,
        ABI_placeholder2, ibv_create_flow, ABI_placeholder1, open_qp, create_qp_ex,
        get_srq_num, create_srq_ex, open_xrcd, close_xrcd, _ABI_placeholder3, sz, context,
    } {
        context.ops, context.abi_compat,
    });
    check_struct!(p; ibv_query_device_ex_input = "struct ibv_query_device_ex_input" { comp_mask });
    check_struct!(p; ibv_device_attr = "struct ibv_device_attr" {
        fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
        vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd,
        max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom,
        max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw,
        max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
        max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
        max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt,
    });
    check_struct!(p; ibv_port_attr = "struct ibv_port_attr" {
        state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr,
        qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout,
        init_type_reply, active_width, active_speed, phys_state, link_layer, flags,
        port_cap_flags2,
    });
    check_union!(p; ibv_async_event_element = "__typeof__(((struct ibv_async_event *)0)->element)" {
        cq, qp, srq, wq, port_num
    });
    check_struct!(p; ibv_async_event = "struct ibv_async_event" { element, event_type } {
        element.cq, element.port_num,
    });

    // ------------------------------------------------------------------ verbs: objects
    check_struct!(p; ibv_pd = "struct ibv_pd" { context, handle });
    check_struct!(p; ibv_xrcd = "struct ibv_xrcd" { context });
    check_struct!(p; ibv_mr = "struct ibv_mr" { context, pd, addr, length, handle, lkey, rkey });
    check_struct!(p; ibv_mw = "struct ibv_mw" { context, pd, rkey, handle, type_: "type" });
    check_struct!(p; ibv_comp_channel = "struct ibv_comp_channel" { context, fd, refcnt });
    check_struct!(p; ibv_cq = "struct ibv_cq" {
        context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
        async_events_completed,
    });
    check_struct!(p; ibv_qp = "struct ibv_qp" {
        context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type,
        mutex, cond, events_completed,
    });
    check_struct!(p; ibv_qp_ex = "struct ibv_qp_ex" {
        qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp, wr_atomic_fetch_add,
        wr_bind_mw, wr_local_inv, wr_rdma_read, wr_rdma_write, wr_rdma_write_imm, wr_send,
        wr_send_imm, wr_send_inv, wr_send_tso, wr_set_ud_addr, wr_set_xrc_srqn,
        wr_set_inline_data, wr_set_inline_data_list, wr_set_sge, wr_set_sge_list, wr_start,
        wr_complete, wr_abort, wr_atomic_write,
    } {
        qp_base.qp_num, qp_base.events_completed,
    });
    check_struct!(p; ibv_srq = "struct ibv_srq" {
        context, srq_context, pd, handle, mutex, cond, events_completed
    });
    check_struct!(p; ibv_ah = "struct ibv_ah" { context, pd, handle });

    // ------------------------------------------------------------------ verbs: attributes
    check_struct!(p; ibv_global_route = "struct ibv_global_route" {
        dgid, flow_label, sgid_index, hop_limit, traffic_class
    });
    check_struct!(p; ibv_ah_attr = "struct ibv_ah_attr" {
        grh, dlid, sl, src_path_bits, static_rate, is_global, port_num
    } {
        grh.dgid, grh.flow_label, grh.sgid_index, grh.hop_limit, grh.traffic_class,
    });
    check_struct!(p; ibv_qp_cap = "struct ibv_qp_cap" {
        max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data
    });
    check_struct!(p; ibv_qp_attr = "struct ibv_qp_attr" {
        qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num,
        qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index, alt_pkey_index,
        en_sqd_async_notify, sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer,
        port_num, timeout, retry_cnt, rnr_retry, alt_port_num, alt_timeout, rate_limit,
    } {
        ah_attr.grh.dgid, ah_attr.dlid, ah_attr.port_num, alt_ah_attr.port_num,
    });
    check_struct!(p; ibv_qp_init_attr = "struct ibv_qp_init_attr" {
        qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all
    });
    check_struct!(p; ibv_rx_hash_conf = "struct ibv_rx_hash_conf" {
        rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask
    });
    check_struct!(p; ibv_qp_init_attr_ex = "struct ibv_qp_init_attr_ex" {
        qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask, pd, xrcd,
        create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn, send_ops_flags,
    });
    check_struct!(p; ibv_qp_open_attr = "struct ibv_qp_open_attr" {
        comp_mask, qp_num, xrcd, qp_context, qp_type
    });
    check_struct!(p; ibv_srq_attr = "struct ibv_srq_attr" { max_wr, max_sge, srq_limit });
    check_struct!(p; ibv_srq_init_attr = "struct ibv_srq_init_attr" { srq_context, attr } {
        attr.max_wr, attr.max_sge, attr.srq_limit,
    });
    check_struct!(p; ibv_tm_cap = "struct ibv_tm_cap" { max_num_tags, max_ops });
    check_struct!(p; ibv_srq_init_attr_ex = "struct ibv_srq_init_attr_ex" {
        srq_context, attr, comp_mask, srq_type, pd, xrcd, cq, tm_cap
    });
    check_struct!(p; ibv_cq_init_attr_ex = "struct ibv_cq_init_attr_ex" {
        cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags, parent_domain
    });
    check_struct!(p; ibv_xrcd_init_attr = "struct ibv_xrcd_init_attr" { comp_mask, fd, oflags });

    // ------------------------------------------------------------------ verbs: WRs, WCs
    check_struct!(p; ibv_sge = "struct ibv_sge" { addr, length, lkey });
    check_struct!(p; ibv_data_buf = "struct ibv_data_buf" { addr, length });
    check_struct!(p; ibv_mw_bind_info = "struct ibv_mw_bind_info" { mr, addr, length, mw_access_flags });
    check_struct!(p; ibv_mw_bind = "struct ibv_mw_bind" { wr_id, send_flags, bind_info });
    check_struct!(p; ibv_send_wr_rdma = "__typeof__(((struct ibv_send_wr *)0)->wr.rdma)" { remote_addr, rkey });
    check_struct!(p; ibv_send_wr_atomic = "__typeof__(((struct ibv_send_wr *)0)->wr.atomic)" {
        remote_addr, compare_add, swap, rkey
    });
    check_struct!(p; ibv_send_wr_ud = "__typeof__(((struct ibv_send_wr *)0)->wr.ud)" {
        ah, remote_qpn, remote_qkey
    });
    check_union!(p; ibv_send_wr_wr = "__typeof__(((struct ibv_send_wr *)0)->wr)" { rdma, atomic, ud });
    check_struct!(p; ibv_send_wr_xrc = "__typeof__(((struct ibv_send_wr *)0)->qp_type.xrc)" { remote_srqn });
    check_union!(p; ibv_send_wr_qp_type = "__typeof__(((struct ibv_send_wr *)0)->qp_type)" { xrc });
    check_struct!(p; ibv_send_wr_bind_mw = "__typeof__(((struct ibv_send_wr *)0)->bind_mw)" {
        mw, rkey, bind_info
    });
    check_struct!(p; ibv_send_wr_tso = "__typeof__(((struct ibv_send_wr *)0)->tso)" { hdr, hdr_sz, mss });
    check_union!(p; ibv_send_wr_bind_mw_tso = (anon "struct ibv_send_wr" "bind_mw" "tso") { bind_mw, tso });
    check_struct!(p; ibv_send_wr = "struct ibv_send_wr" {
        wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data, wr, qp_type,
        bind_mw_tso: (anon "bind_mw" "tso"),
    } {
        imm_data: "invalidate_rkey",
        wr.rdma, wr.rdma.remote_addr, wr.rdma.rkey,
        wr.atomic, wr.atomic.remote_addr, wr.atomic.compare_add, wr.atomic.swap, wr.atomic.rkey,
        wr.ud, wr.ud.ah, wr.ud.remote_qpn, wr.ud.remote_qkey,
        qp_type.xrc, qp_type.xrc.remote_srqn,
        bind_mw_tso.bind_mw: "bind_mw", bind_mw_tso.bind_mw.mw: "bind_mw.mw",
        bind_mw_tso.bind_mw.rkey: "bind_mw.rkey", bind_mw_tso.bind_mw.bind_info: "bind_mw.bind_info",
        bind_mw_tso.tso: "tso", bind_mw_tso.tso.hdr: "tso.hdr", bind_mw_tso.tso.hdr_sz: "tso.hdr_sz",
        bind_mw_tso.tso.mss: "tso.mss",
    });
    check_struct!(p; ibv_recv_wr = "struct ibv_recv_wr" { wr_id, next, sg_list, num_sge });
    check_struct!(p; ibv_wc = "struct ibv_wc" {
        wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp, wc_flags,
        pkey_index, slid, sl, dlid_path_bits,
    } {
        imm_data: "invalidated_rkey",
    });
    check_struct!(p; ibv_grh = "struct ibv_grh" {
        version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid
    });
    check_struct!(p; ibv_ece = "struct ibv_ece" { vendor_id, options, comp_mask });

    // ------------------------------------------------------------------ sa.h
    check_struct!(p; ibv_sa_path_rec = "struct ibv_sa_path_rec" {
        dgid, sgid, dlid, slid, raw_traffic, flow_label, hop_limit, traffic_class, reversible,
        numb_path, pkey, sl, mtu_selector, mtu, rate_selector, rate, packet_life_time_selector,
        packet_life_time, preference,
    });
    check_struct!(p; ibv_path_record = "struct ibv_path_record" {
        service_id, dgid, sgid, dlid, slid, flowlabel_hoplimit, tclass, reversible_numpath,
        pkey, qosclass_sl, mtu, rate, packetlifetime, preference, reserved,
    });
    check_struct!(p; ibv_path_data = "struct ibv_path_data" { flags, reserved, path } {
        path.service_id, path.preference,
    });

    // ------------------------------------------------------------------ rdma_cma.h, ib.h
    check_struct!(p; rdma_ib_addr = "struct rdma_ib_addr" { sgid, dgid, pkey });
    check_union!(p; rdma_sockaddr as "rdma_sockaddr(src)" =
        (anon "struct rdma_addr" "src_addr" "src_sin" "src_sin6" "src_storage") {
        addr: "src_addr", sin: "src_sin", sin6: "src_sin6", storage: "src_storage",
    });
    check_union!(p; rdma_sockaddr as "rdma_sockaddr(dst)" =
        (anon "struct rdma_addr" "dst_addr" "dst_sin" "dst_sin6" "dst_storage") {
        addr: "dst_addr", sin: "dst_sin", sin6: "dst_sin6", storage: "dst_storage",
    });
    check_union!(p; rdma_addr_union = "__typeof__(((struct rdma_addr *)0)->addr)" { ibaddr });
    check_struct!(p; rdma_addr = "struct rdma_addr" {
        src: (anon "src_addr" "src_sin" "src_sin6" "src_storage"),
        dst: (anon "dst_addr" "dst_sin" "dst_sin6" "dst_storage"),
        addr,
    } {
        src.addr: "src_addr", src.sin: "src_sin", src.sin6: "src_sin6", src.storage: "src_storage",
        dst.addr: "dst_addr", dst.sin: "dst_sin", dst.sin6: "dst_sin6", dst.storage: "dst_storage",
        addr.ibaddr, addr.ibaddr.sgid, addr.ibaddr.dgid, addr.ibaddr.pkey,
    });
    check_struct!(p; rdma_route = "struct rdma_route" { addr, path_rec, num_paths });
    check_struct!(p; rdma_event_channel = "struct rdma_event_channel" { fd });
    check_struct!(p; rdma_cm_id = "struct rdma_cm_id" {
        verbs, channel, context, qp, route, ps, port_num, event, send_cq_channel, send_cq,
        recv_cq_channel, recv_cq, srq, pd, qp_type,
    } {
        route.addr, route.addr.src.storage: "route.addr.src_storage",
        route.addr.src.sin6: "route.addr.src_sin6", route.addr.dst.storage: "route.addr.dst_storage",
        route.addr.dst.sin6: "route.addr.dst_sin6", route.addr.addr.ibaddr,
        route.addr.addr.ibaddr.pkey, route.path_rec, route.num_paths,
    });
    check_struct!(p; rdma_conn_param = "struct rdma_conn_param" {
        private_data, private_data_len, responder_resources, initiator_depth, flow_control,
        retry_count, rnr_retry_count, srq, qp_num,
    });
    check_struct!(p; rdma_ud_param = "struct rdma_ud_param" {
        private_data, private_data_len, ah_attr, qp_num, qkey
    });
    check_union!(p; rdma_cm_event_param = "__typeof__(((struct rdma_cm_event *)0)->param)" {
        conn, ud,
        // upstream master only (absent from rdma-core 44): `uint64_t arg` at 0.
        arg: (rust_only 0 8),
    });
    check_struct!(p; rdma_cm_event = "struct rdma_cm_event" { id, listen_id, event, status, param } {
        param.conn, param.ud, param.ud.ah_attr, param.ud.qp_num, param.ud.qkey,
    });
    check_struct!(p; rdma_addrinfo = "struct rdma_addrinfo" {
        ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len, ai_dst_len, ai_src_addr,
        ai_dst_addr, ai_src_canonname, ai_dst_canonname, ai_route_len, ai_route,
        ai_connect_len, ai_connect, ai_next,
    });
    check_struct!(p; rdma_cm_join_mc_attr_ex = "struct rdma_cm_join_mc_attr_ex" {
        comp_mask, join_flags, addr
    });
    check_struct!(p; sockaddr_ib = "struct sockaddr_ib" {
        sib_family, sib_pkey, sib_flowinfo, sib_addr, sib_sid, sib_sid_mask, sib_scope_id
    });

    // ------------------------------------------------------------------ constants
    check_consts!(p;
        IBV_NODE_UNKNOWN, IBV_NODE_CA, IBV_NODE_SWITCH, IBV_NODE_ROUTER, IBV_NODE_RNIC,
        IBV_NODE_USNIC, IBV_NODE_USNIC_UDP, IBV_NODE_UNSPECIFIED,
        IBV_TRANSPORT_UNKNOWN, IBV_TRANSPORT_IB, IBV_TRANSPORT_IWARP, IBV_TRANSPORT_USNIC,
        IBV_TRANSPORT_USNIC_UDP, IBV_TRANSPORT_UNSPECIFIED,
        IBV_GID_TYPE_IB, IBV_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V2,
        __VERBS_ABI_IS_EXTENDED, IBV_SYSFS_NAME_MAX, IBV_SYSFS_PATH_MAX,
        VERBS_CONTEXT_CONTEXT_OFFSET = "offsetof(struct verbs_context, context)",
        IBV_DEVICE_RESIZE_MAX_WR, IBV_DEVICE_BAD_PKEY_CNTR, IBV_DEVICE_BAD_QKEY_CNTR,
        IBV_DEVICE_RAW_MULTI, IBV_DEVICE_AUTO_PATH_MIG, IBV_DEVICE_CHANGE_PHY_PORT,
        IBV_DEVICE_UD_AV_PORT_ENFORCE, IBV_DEVICE_CURR_QP_STATE_MOD, IBV_DEVICE_SHUTDOWN_PORT,
        IBV_DEVICE_INIT_TYPE, IBV_DEVICE_PORT_ACTIVE_EVENT, IBV_DEVICE_SYS_IMAGE_GUID,
        IBV_DEVICE_RC_RNR_NAK_GEN, IBV_DEVICE_SRQ_RESIZE, IBV_DEVICE_N_NOTIFY_CQ,
        IBV_DEVICE_MEM_WINDOW, IBV_DEVICE_UD_IP_CSUM, IBV_DEVICE_XRC,
        IBV_DEVICE_MEM_MGT_EXTENSIONS, IBV_DEVICE_MEM_WINDOW_TYPE_2A,
        IBV_DEVICE_MEM_WINDOW_TYPE_2B, IBV_DEVICE_RC_IP_CSUM, IBV_DEVICE_RAW_IP_CSUM,
        IBV_DEVICE_MANAGED_FLOW_STEERING, IBV_DEVICE_RAW_SCATTER_FCS,
        IBV_DEVICE_PCI_WRITE_END_PADDING,
        IBV_ATOMIC_NONE, IBV_ATOMIC_HCA, IBV_ATOMIC_GLOB,
        IBV_MTU_256, IBV_MTU_512, IBV_MTU_1024, IBV_MTU_2048, IBV_MTU_4096,
        IBV_PORT_NOP, IBV_PORT_DOWN, IBV_PORT_INIT, IBV_PORT_ARMED, IBV_PORT_ACTIVE,
        IBV_PORT_ACTIVE_DEFER,
        IBV_LINK_LAYER_UNSPECIFIED, IBV_LINK_LAYER_INFINIBAND, IBV_LINK_LAYER_ETHERNET,
        IBV_PORT_SM, IBV_PORT_NOTICE_SUP, IBV_PORT_TRAP_SUP, IBV_PORT_OPT_IPD_SUP,
        IBV_PORT_AUTO_MIGR_SUP, IBV_PORT_SL_MAP_SUP, IBV_PORT_MKEY_NVRAM, IBV_PORT_PKEY_NVRAM,
        IBV_PORT_LED_INFO_SUP, IBV_PORT_SYS_IMAGE_GUID_SUP, IBV_PORT_PKEY_SW_EXT_PORT_TRAP_SUP,
        IBV_PORT_EXTENDED_SPEEDS_SUP, IBV_PORT_CAP_MASK2_SUP, IBV_PORT_CM_SUP,
        IBV_PORT_SNMP_TUNNEL_SUP, IBV_PORT_REINIT_SUP, IBV_PORT_DEVICE_MGMT_SUP,
        IBV_PORT_VENDOR_CLASS_SUP, IBV_PORT_DR_NOTICE_SUP, IBV_PORT_CAP_MASK_NOTICE_SUP,
        IBV_PORT_BOOT_MGMT_SUP, IBV_PORT_LINK_LATENCY_SUP, IBV_PORT_CLIENT_REG_SUP,
        IBV_PORT_IP_BASED_GIDS,
        IBV_EVENT_CQ_ERR, IBV_EVENT_QP_FATAL, IBV_EVENT_QP_REQ_ERR, IBV_EVENT_QP_ACCESS_ERR,
        IBV_EVENT_COMM_EST, IBV_EVENT_SQ_DRAINED, IBV_EVENT_PATH_MIG, IBV_EVENT_PATH_MIG_ERR,
        IBV_EVENT_DEVICE_FATAL, IBV_EVENT_PORT_ACTIVE, IBV_EVENT_PORT_ERR,
        IBV_EVENT_LID_CHANGE, IBV_EVENT_PKEY_CHANGE, IBV_EVENT_SM_CHANGE, IBV_EVENT_SRQ_ERR,
        IBV_EVENT_SRQ_LIMIT_REACHED, IBV_EVENT_QP_LAST_WQE_REACHED,
        IBV_EVENT_CLIENT_REREGISTER, IBV_EVENT_GID_CHANGE, IBV_EVENT_WQ_FATAL,
        IBV_WC_SUCCESS, IBV_WC_LOC_LEN_ERR, IBV_WC_LOC_QP_OP_ERR, IBV_WC_LOC_EEC_OP_ERR,
        IBV_WC_LOC_PROT_ERR, IBV_WC_WR_FLUSH_ERR, IBV_WC_MW_BIND_ERR, IBV_WC_BAD_RESP_ERR,
        IBV_WC_LOC_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR, IBV_WC_REM_ACCESS_ERR,
        IBV_WC_REM_OP_ERR, IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR,
        IBV_WC_LOC_RDD_VIOL_ERR, IBV_WC_REM_INV_RD_REQ_ERR, IBV_WC_REM_ABORT_ERR,
        IBV_WC_INV_EECN_ERR, IBV_WC_INV_EEC_STATE_ERR, IBV_WC_FATAL_ERR,
        IBV_WC_RESP_TIMEOUT_ERR, IBV_WC_GENERAL_ERR, IBV_WC_TM_ERR, IBV_WC_TM_RNDV_INCOMPLETE,
        IBV_WC_SEND, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_COMP_SWAP, IBV_WC_FETCH_ADD,
        IBV_WC_BIND_MW, IBV_WC_LOCAL_INV, IBV_WC_TSO, IBV_WC_ATOMIC_WRITE, IBV_WC_RECV,
        IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_TM_ADD, IBV_WC_TM_DEL, IBV_WC_TM_SYNC,
        IBV_WC_TM_RECV, IBV_WC_TM_NO_TAG, IBV_WC_DRIVER1, IBV_WC_DRIVER2, IBV_WC_DRIVER3,
        IBV_WC_IP_CSUM_OK_SHIFT, IBV_WC_GRH, IBV_WC_WITH_IMM, IBV_WC_IP_CSUM_OK,
        IBV_WC_WITH_INV, IBV_WC_TM_SYNC_REQ, IBV_WC_TM_MATCH, IBV_WC_TM_DATA_VALID,
        IBV_WC_EX_WITH_BYTE_LEN, IBV_WC_EX_WITH_IMM, IBV_WC_EX_WITH_QP_NUM,
        IBV_WC_EX_WITH_SRC_QP, IBV_WC_EX_WITH_SLID, IBV_WC_EX_WITH_SL,
        IBV_WC_EX_WITH_DLID_PATH_BITS, IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
        IBV_WC_EX_WITH_CVLAN, IBV_WC_EX_WITH_FLOW_TAG, IBV_WC_EX_WITH_TM_INFO,
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK, IBV_WC_STANDARD_FLAGS,
        IBV_CREATE_CQ_SUP_WC_FLAGS,
        IBV_CQ_INIT_ATTR_MASK_FLAGS, IBV_CQ_INIT_ATTR_MASK_PD,
        IBV_CREATE_CQ_ATTR_SINGLE_THREADED, IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN,
        IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_READ,
        IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_MW_BIND, IBV_ACCESS_ZERO_BASED,
        IBV_ACCESS_ON_DEMAND, IBV_ACCESS_HUGETLB, IBV_ACCESS_OPTIONAL_FIRST,
        IBV_ACCESS_RELAXED_ORDERING, IBV_ACCESS_OPTIONAL_RANGE,
        IBV_MW_TYPE_1, IBV_MW_TYPE_2,
        IBV_XRCD_INIT_ATTR_FD, IBV_XRCD_INIT_ATTR_OFLAGS, IBV_XRCD_INIT_ATTR_RESERVED,
        IBV_REREG_MR_CHANGE_TRANSLATION, IBV_REREG_MR_CHANGE_PD, IBV_REREG_MR_CHANGE_ACCESS,
        IBV_REREG_MR_FLAGS_SUPPORTED,
        IBV_RATE_MAX, IBV_RATE_2_5_GBPS, IBV_RATE_5_GBPS, IBV_RATE_10_GBPS, IBV_RATE_20_GBPS,
        IBV_RATE_30_GBPS, IBV_RATE_40_GBPS, IBV_RATE_60_GBPS, IBV_RATE_80_GBPS,
        IBV_RATE_120_GBPS, IBV_RATE_14_GBPS, IBV_RATE_56_GBPS, IBV_RATE_112_GBPS,
        IBV_RATE_168_GBPS, IBV_RATE_25_GBPS, IBV_RATE_100_GBPS, IBV_RATE_200_GBPS,
        IBV_RATE_300_GBPS, IBV_RATE_28_GBPS, IBV_RATE_50_GBPS, IBV_RATE_400_GBPS,
        IBV_RATE_600_GBPS, IBV_RATE_800_GBPS, IBV_RATE_1200_GBPS,
        IBV_SRQ_MAX_WR, IBV_SRQ_LIMIT, IBV_SRQT_BASIC, IBV_SRQT_XRC, IBV_SRQT_TM,
        IBV_SRQ_INIT_ATTR_TYPE, IBV_SRQ_INIT_ATTR_PD, IBV_SRQ_INIT_ATTR_XRCD,
        IBV_SRQ_INIT_ATTR_CQ, IBV_SRQ_INIT_ATTR_TM, IBV_SRQ_INIT_ATTR_RESERVED,
        IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_RAW_PACKET, IBV_QPT_XRC_SEND,
        IBV_QPT_XRC_RECV, IBV_QPT_DRIVER,
        IBV_QP_INIT_ATTR_PD, IBV_QP_INIT_ATTR_XRCD, IBV_QP_INIT_ATTR_CREATE_FLAGS,
        IBV_QP_INIT_ATTR_MAX_TSO_HEADER, IBV_QP_INIT_ATTR_IND_TABLE, IBV_QP_INIT_ATTR_RX_HASH,
        IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, IBV_QP_CREATE_SCATTER_FCS,
        IBV_QP_CREATE_CVLAN_STRIPPING, IBV_QP_CREATE_SOURCE_QPN,
        IBV_QP_CREATE_PCI_WRITE_END_PADDING,
        IBV_QP_EX_WITH_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, IBV_QP_EX_WITH_SEND,
        IBV_QP_EX_WITH_SEND_WITH_IMM, IBV_QP_EX_WITH_RDMA_READ,
        IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
        IBV_QP_EX_WITH_LOCAL_INV, IBV_QP_EX_WITH_BIND_MW, IBV_QP_EX_WITH_SEND_WITH_INV,
        IBV_QP_EX_WITH_TSO, IBV_QP_EX_WITH_ATOMIC_WRITE,
        IBV_QP_OPEN_ATTR_NUM, IBV_QP_OPEN_ATTR_XRCD, IBV_QP_OPEN_ATTR_CONTEXT,
        IBV_QP_OPEN_ATTR_TYPE, IBV_QP_OPEN_ATTR_RESERVED,
        IBV_QP_STATE, IBV_QP_CUR_STATE, IBV_QP_EN_SQD_ASYNC_NOTIFY, IBV_QP_ACCESS_FLAGS,
        IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_QKEY, IBV_QP_AV, IBV_QP_PATH_MTU,
        IBV_QP_TIMEOUT, IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY, IBV_QP_RQ_PSN,
        IBV_QP_MAX_QP_RD_ATOMIC, IBV_QP_ALT_PATH, IBV_QP_MIN_RNR_TIMER, IBV_QP_SQ_PSN,
        IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_PATH_MIG_STATE, IBV_QP_CAP, IBV_QP_DEST_QPN,
        IBV_QP_RATE_LIMIT,
        IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPS_SQE,
        IBV_QPS_ERR, IBV_QPS_UNKNOWN,
        IBV_MIG_MIGRATED, IBV_MIG_REARM, IBV_MIG_ARMED,
        IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND, IBV_WR_SEND_WITH_IMM,
        IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
        IBV_WR_LOCAL_INV, IBV_WR_BIND_MW, IBV_WR_SEND_WITH_INV, IBV_WR_TSO, IBV_WR_DRIVER1,
        IBV_WR_ATOMIC_WRITE,
        IBV_SEND_FENCE, IBV_SEND_SIGNALED, IBV_SEND_SOLICITED, IBV_SEND_INLINE,
        IBV_SEND_IP_CSUM,
        IBV_CQ_ATTR_MODERATE, IBV_CQ_ATTR_RESERVED,
        IBV_FORK_DISABLED, IBV_FORK_ENABLED, IBV_FORK_UNNEEDED,
        IBV_PATH_RECORD_REVERSIBLE, IBV_PATH_FLAG_GMP, IBV_PATH_FLAG_PRIMARY,
        IBV_PATH_FLAG_ALTERNATE, IBV_PATH_FLAG_OUTBOUND, IBV_PATH_FLAG_INBOUND,
        IBV_PATH_FLAG_INBOUND_REVERSE, IBV_PATH_FLAG_BIDIRECTIONAL,
        // rdma_cma.h / ib.h (the Debian 44 subset; see UPSTREAM_ONLY_CONSTS)
        RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_ADDR_ERROR, RDMA_CM_EVENT_ROUTE_RESOLVED,
        RDMA_CM_EVENT_ROUTE_ERROR, RDMA_CM_EVENT_CONNECT_REQUEST,
        RDMA_CM_EVENT_CONNECT_RESPONSE, RDMA_CM_EVENT_CONNECT_ERROR, RDMA_CM_EVENT_UNREACHABLE,
        RDMA_CM_EVENT_REJECTED, RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_EVENT_DISCONNECTED,
        RDMA_CM_EVENT_DEVICE_REMOVAL, RDMA_CM_EVENT_MULTICAST_JOIN,
        RDMA_CM_EVENT_MULTICAST_ERROR, RDMA_CM_EVENT_ADDR_CHANGE, RDMA_CM_EVENT_TIMEWAIT_EXIT,
        RDMA_PS_IPOIB, RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IB,
        RDMA_IB_IP_PS_MASK, RDMA_IB_IP_PORT_MASK, RDMA_IB_IP_PS_TCP, RDMA_IB_IP_PS_UDP,
        RDMA_IB_PS_IB, RDMA_UDP_QKEY, RDMA_MAX_RESP_RES, RDMA_MAX_INIT_DEPTH,
        RAI_PASSIVE, RAI_NUMERICHOST, RAI_NOROUTE, RAI_FAMILY,
        RDMA_OPTION_ID, RDMA_OPTION_IB, RDMA_OPTION_ID_TOS, RDMA_OPTION_ID_REUSEADDR,
        RDMA_OPTION_ID_AFONLY, RDMA_OPTION_ID_ACK_TIMEOUT, RDMA_OPTION_IB_PATH,
        RDMA_CM_JOIN_MC_ATTR_ADDRESS, RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
        RDMA_CM_JOIN_MC_ATTR_RESERVED, RDMA_MC_JOIN_FLAG_FULLMEMBER,
        RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, RDMA_MC_JOIN_FLAG_RESERVED, AF_IB,
    );

    p
}

/// Constants of upstream rdma-core master that Debian 12's rdma-core 44 header lacks; their
/// values are checked against upstream's header text here instead.
const UPSTREAM_ONLY_CONSTS: &[(&str, i64)] = &[
    (
        "RDMA_CM_EVENT_ADDRINFO_RESOLVED",
        RDMA_CM_EVENT_ADDRINFO_RESOLVED as i64,
    ),
    (
        "RDMA_CM_EVENT_ADDRINFO_ERROR",
        RDMA_CM_EVENT_ADDRINFO_ERROR as i64,
    ),
    ("RDMA_CM_EVENT_USER", RDMA_CM_EVENT_USER as i64),
    ("RDMA_CM_EVENT_INTERNAL", RDMA_CM_EVENT_INTERNAL as i64),
    ("RAI_SA", RAI_SA as i64),
    ("RAI_DNS", RAI_DNS as i64),
];

/// The crate's sources, scanned for `pub struct|union|const` so nothing escapes the lists.
const SOURCES: &[(&str, &str)] = &[
    ("cma.rs", include_str!("../src/cma.rs")),
    ("verbs/mod.rs", include_str!("../src/verbs/mod.rs")),
    ("verbs/attr.rs", include_str!("../src/verbs/attr.rs")),
    ("verbs/consts.rs", include_str!("../src/verbs/consts.rs")),
    ("verbs/device.rs", include_str!("../src/verbs/device.rs")),
    ("verbs/objects.rs", include_str!("../src/verbs/objects.rs")),
    ("verbs/sa.rs", include_str!("../src/verbs/sa.rs")),
    ("verbs/wr.rs", include_str!("../src/verbs/wr.rs")),
];

fn declared(keyword: &str) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    let pat = format!("pub {keyword} ");
    for (file, text) in SOURCES {
        for line in text.lines() {
            if let Some(rest) = line.trim_start().strip_prefix(&pat) {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                out.push((name, *file));
            }
        }
    }
    out
}

fn run_c_probe(src: &str) -> String {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let c_file = dir.join("rdma_abi_layout_probe.c");
    let exe = dir.join("rdma_abi_layout_probe");
    std::fs::write(&c_file, src).expect("write probe");
    // `CC` may carry arguments ("ccache gcc", "gcc -m64").
    let cc = std::env::var("CC")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "cc".to_string());
    let mut words = cc.split_whitespace();
    let out = Command::new(words.next().unwrap())
        .args(words)
        .args(["-std=gnu11", "-O0", "-Wall", "-o"])
        .arg(&exe)
        .arg(&c_file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(
        out.status.success(),
        "compiling {} failed:\n{}",
        c_file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run probe");
    assert!(run.status.success(), "probe failed: {:?}", run.status);
    String::from_utf8(run.stdout).expect("utf8")
}

#[test]
fn layouts_match_system_headers() {
    let probe = build();
    let c_out = run_c_probe(&probe.c_source());
    let c_lines: Vec<&str> = c_out.lines().collect();
    assert_eq!(
        c_lines.len(),
        probe.rust.len(),
        "probe printed a different number of lines"
    );

    let mut bad = Vec::new();
    for (r, c) in probe.rust.iter().zip(&c_lines) {
        if r != c {
            bad.push(format!("  rust: {r}\n     C: {c}"));
        }
    }
    let (t, f, k) = probe
        .rust
        .iter()
        .fold((0, 0, 0), |(t, f, k), l| match &l[..1] {
            "T" => (t + 1, f, k),
            "F" => (t, f + 1, k),
            _ => (t, f, k + 1),
        });
    eprintln!("checked {t} types, {f} fields, {k} constants against the system headers");
    assert!(
        bad.is_empty(),
        "{} layout mismatch(es) against the system headers:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn every_type_and_constant_is_checked() {
    let probe = build();
    let mut missing = Vec::new();
    for kw in ["struct", "union"] {
        for (name, file) in declared(kw) {
            if !probe.types.contains(&name) {
                missing.push(format!("{kw} {name} ({file})"));
            }
        }
    }
    for (name, file) in declared("const") {
        if !probe.consts.contains(&name) && !UPSTREAM_ONLY_CONSTS.iter().any(|(n, _)| *n == name) {
            missing.push(format!("const {name} ({file})"));
        }
    }
    assert!(
        missing.is_empty(),
        "not covered by tests/layout.rs:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn upstream_only_items() {
    // rdma-core master: enum rdma_cm_event_type continues after TIMEWAIT_EXIT (15).
    let expect = [
        ("RDMA_CM_EVENT_ADDRINFO_RESOLVED", 16),
        ("RDMA_CM_EVENT_ADDRINFO_ERROR", 17),
        ("RDMA_CM_EVENT_USER", 18),
        ("RDMA_CM_EVENT_INTERNAL", 19),
        ("RAI_SA", 0x10),
        ("RAI_DNS", 0x20),
    ];
    for ((n, v), (en, ev)) in UPSTREAM_ONLY_CONSTS.iter().zip(expect) {
        assert_eq!((*n, *v), (en, ev));
    }
    // `uint64_t arg` (upstream) shares the param union without growing it.
    assert_eq!(offset_of!(rdma_cm_event_param, arg), 0);
    assert_eq!(size_of::<u64>(), 8);
    assert_eq!(size_of::<rdma_cm_event_param>(), size_of::<rdma_ud_param>());
}
