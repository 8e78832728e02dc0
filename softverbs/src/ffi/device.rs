//! Devices and contexts: list, open/close, query device/port/GID/P_Key.

use super::handles::{self, put, CTXS};
use crate::core::context::Context;
use crate::core::cq::MAX_CQE;
use crate::core::device::{self, device_ptr};
use crate::core::srq::{MAX_SGE, MAX_SRQ_WR};
use crate::net::engine::Engine;
use crate::net::frame::MAX_MSG;
use crate::qp::{MAX_QP_WR, MAX_RD_ATOM};
use crate::sys::{Errno, Result};
use crate::trace as t;
use libc::{c_char, c_int, c_void};
use rdma_abi::verbs::*;
use std::sync::Arc;

export! {
    /// `calloc`ed, NULL-terminated array (qperf frees it with `free()`).
    null fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device,
        trace |_, r| ("ibv_get_device_list()".to_string(), if r.is_null() { String::new() } else { " num 1 (soft0)".to_string() }),
    {
        // SAFETY: calloc of two pointer slots; checked for NULL.
        let list = unsafe { libc::calloc(2, std::mem::size_of::<*mut ibv_device>()) } as *mut *mut ibv_device;
        if list.is_null() {
            return Err(Errno::ENOMEM);
        }
        // SAFETY: list has two slots; the second stays NULL.
        unsafe { *list = device_ptr() };
        if !num_devices.is_null() {
            // SAFETY: non-NULL out-pointer from the caller.
            unsafe { *num_devices = 1 };
        }
        Ok(list)
    }
}

export! {
    void fn ibv_free_device_list(list: *mut *mut ibv_device),
        trace |_, _r| format!("ibv_free_device_list({list:p})"),
    {
        // SAFETY: list came from ibv_get_device_list (calloc) or is NULL.
        unsafe { libc::free(list.cast()) };
        Ok(())
    }
}

fn check_dev(d: *mut ibv_device) -> Result<()> {
    if d != device_ptr() {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

export! {
    null fn ibv_get_device_name(dev: *mut ibv_device) -> *const c_char {
        check_dev(dev)?;
        // SAFETY: dev is our static device; name is NUL-terminated.
        Ok(unsafe { (*dev).name.as_ptr() })
    }
}

export! {
    value(0) fn ibv_get_device_guid(dev: *mut ibv_device) -> u64 {
        check_dev(dev)?;
        Ok(device::node_guid().to_be())
    }
}

export! {
    value(-1) fn ibv_get_device_index(dev: *mut ibv_device) -> c_int {
        check_dev(dev)?;
        Ok(0)
    }
}

fn build_vctx() -> verbs_context {
    use super::{cq, qp, srq};
    // SAFETY: verbs_context is plain data (pointers, optional fn pointers, ints); all-zero
    // is valid, and an all-zero pthread_mutex_t is PTHREAD_MUTEX_INITIALIZER on glibc.
    let mut v: verbs_context = unsafe { std::mem::zeroed() };
    v.query_port = Some(query_port_op);
    v.query_device_ex = Some(query_device_ex_op);
    v.create_qp_ex = Some(qp::create_qp_ex_op);
    v.create_srq_ex = Some(srq::create_srq_ex_op);
    v.sz = std::mem::size_of::<verbs_context>();
    let c = &mut v.context;
    c.device = device_ptr();
    c.ops.poll_cq = Some(cq::poll_cq_op);
    c.ops.req_notify_cq = Some(cq::req_notify_cq_op);
    c.ops.post_send = Some(qp::post_send_op);
    c.ops.post_recv = Some(qp::post_recv_op);
    c.ops.post_srq_recv = Some(srq::post_srq_recv_op);
    c.ops._compat_query_device = Some(ibv_query_device);
    c.ops._compat_query_port = Some(compat_query_port_op);
    c.cmd_fd = -1;
    c.num_comp_vectors = 1;
    c.abi_compat = usize::MAX as *mut c_void;
    v
}

export! {
    null fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context,
        trace |_, r| (format!("ibv_open_device({dev:p})"), handles::ctx(*r).map(|c| format!(" soft0 lid {} port {} gids {}", c.lid, c.port(), c.gids.len())).unwrap_or_default()),
    {
        check_dev(dev)?;
        let ctx = Context::new(build_vctx())?;
        let eng = Engine::start(&ctx)?;
        let _ = ctx.net.set(eng);
        let p = ctx.ibv();
        CTXS.insert(p, ctx);
        Ok(p)
    }
}

export! {
    errno fn ibv_close_device(context: *mut ibv_context) -> c_int,
        trace |_, _r| format!("ibv_close_device({context:p})"),
    {
        let ctx = CTXS.remove(context).ok_or(Errno::EINVAL)?;
        if let Some(n) = ctx.net() {
            n.stop();
        }
        ctx.async_q.purge(|_| true);
        Ok(0)
    }
}

export! {
    /// Not supported: a software context has no kernel fd to share.
    null fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context {
        let _ = cmd_fd;
        Err(Errno::EOPNOTSUPP)
    }
}

pub fn device_attr() -> ibv_device_attr {
    // SAFETY: ibv_device_attr is plain data.
    let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
    for (i, b) in b"softverbs 0.1.0".iter().enumerate() {
        a.fw_ver[i] = *b as c_char;
    }
    a.node_guid = device::node_guid().to_be();
    a.sys_image_guid = a.node_guid;
    a.max_mr_size = 1 << 40;
    a.page_size_cap = 0xffff_f000;
    a.vendor_id = device::VENDOR_ID;
    a.vendor_part_id = device::VENDOR_PART_ID;
    a.max_qp = 65536;
    a.max_qp_wr = MAX_QP_WR as c_int;
    a.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_SRQ_RESIZE;
    a.max_sge = MAX_SGE as c_int;
    a.max_sge_rd = MAX_SGE as c_int;
    a.max_cq = 65536;
    a.max_cqe = MAX_CQE;
    a.max_mr = 1 << 20;
    a.max_pd = 65536;
    a.max_qp_rd_atom = MAX_RD_ATOM as c_int;
    a.max_res_rd_atom = MAX_RD_ATOM as c_int * 65536;
    a.max_qp_init_rd_atom = MAX_RD_ATOM as c_int;
    a.atomic_cap = IBV_ATOMIC_HCA;
    a.max_mcast_grp = 8192;
    a.max_mcast_qp_attach = 56;
    a.max_total_mcast_qp_attach = 8192 * 56;
    a.max_ah = 65536;
    a.max_srq = 65536;
    a.max_srq_wr = MAX_SRQ_WR as c_int;
    a.max_srq_sge = MAX_SGE as c_int;
    a.max_pkeys = 1;
    a.local_ca_ack_delay = 15;
    a.phys_port_cnt = 1;
    a
}

export! {
    errno fn ibv_query_device(context: *mut ibv_context, device_attr: *mut ibv_device_attr) -> c_int,
        trace |_, r| (format!("ibv_query_device({context:p})"), if *r == 0 { " soft0".to_string() } else { String::new() }),
    {
        handles::ctx(context)?;
        // SAFETY: out-pointer from the caller (checked for NULL).
        unsafe { put(device_attr, self::device_attr()) }?;
        Ok(0)
    }
}

op! {
    /// `verbs_context.query_device_ex`: the classic attributes plus zeroed extensions.
    errno fn query_device_ex_op(context: *mut ibv_context, input: *const ibv_query_device_ex_input, attr: *mut c_void, attr_size: usize) -> c_int,
        trace |_, _r| format!("ibv_query_device_ex({context:p}, attr_size {attr_size})"),
    {
        handles::ctx(context)?;
        if !input.is_null() {
            // SAFETY: non-NULL input from the caller.
            if unsafe { (*input).comp_mask } != 0 {
                return Err(Errno::EINVAL);
            }
        }
        let base = std::mem::size_of::<ibv_device_attr>();
        if attr.is_null() || attr_size < base {
            return Err(Errno::EINVAL);
        }
        let d = device_attr();
        // SAFETY: the caller's buffer holds attr_size bytes (>= base).
        unsafe {
            std::ptr::write_bytes(attr as *mut u8, 0, attr_size.min(400));
            std::ptr::copy_nonoverlapping(&d as *const ibv_device_attr as *const u8, attr as *mut u8, base);
            // phys_port_cnt_ex (uint32_t at 396 in v44's struct ibv_device_attr_ex)
            if attr_size >= 400 {
                ((attr as *mut u8).add(396) as *mut u32).write_unaligned(1);
            }
        }
        Ok(0)
    }
}

pub fn port_attr(ctx: &Context) -> ibv_port_attr {
    // SAFETY: ibv_port_attr is plain data.
    let mut a: ibv_port_attr = unsafe { std::mem::zeroed() };
    a.state = IBV_PORT_ACTIVE;
    a.max_mtu = IBV_MTU_4096;
    // A RoCEv2 endpoint's links decide (see `roce::endpoint::Endpoint::mtu`).
    a.active_mtu = ctx.net().and_then(|n| n.roce()).map_or(IBV_MTU_4096, |r| r.mtu);
    a.gid_tbl_len = ctx.gids.len() as c_int;
    a.port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS;
    a.max_msg_sz = MAX_MSG;
    a.pkey_tbl_len = 1;
    a.lid = ctx.lid;
    a.max_vl_num = 1;
    a.active_width = 2;
    a.active_speed = 32;
    a.phys_state = 5;
    a.link_layer = IBV_LINK_LAYER_ETHERNET;
    a
}

fn query_port_common(context: *mut ibv_context, port: u8, attr: *mut c_void, len: usize) -> Result<c_int> {
    let ctx = handles::ctx(context)?;
    if port != 1 || attr.is_null() {
        return Err(Errno::EINVAL);
    }
    let a = port_attr(&ctx);
    let n = len.min(std::mem::size_of::<ibv_port_attr>());
    // SAFETY: the caller's buffer holds `len` bytes; we copy at most that many.
    unsafe { std::ptr::copy_nonoverlapping(&a as *const ibv_port_attr as *const u8, attr as *mut u8, n) };
    Ok(0)
}

op! {
    /// `verbs_context.query_port` (what the inline `ibv_query_port` calls).
    errno fn query_port_op(context: *mut ibv_context, port_num: u8, port_attr: *mut ibv_port_attr, port_attr_len: usize) -> c_int,
        trace |_, r| port_line(context, port_num, *r),
    {
        query_port_common(context, port_num, port_attr.cast(), port_attr_len)
    }
}

op! {
    errno fn compat_query_port_op(context: *mut ibv_context, port_num: u8, port_attr: *mut c_void) -> c_int,
        trace |_, r| port_line(context, port_num, *r),
    {
        query_port_common(context, port_num, port_attr, 48)
    }
}

export! {
    /// The exported fallback: fills the 48-byte `_compat_ibv_port_attr`.
    errno fn ibv_query_port(context: *mut ibv_context, port_num: u8, port_attr: *mut c_void) -> c_int,
        trace |_, r| port_line(context, port_num, *r),
    {
        query_port_common(context, port_num, port_attr, 48)
    }
}

export! {
    minus1 fn ibv_query_gid(context: *mut ibv_context, port_num: u8, index: c_int, gid: *mut ibv_gid) -> c_int,
        trace |_, r| (format!("ibv_query_gid({context:p}, port {port_num}, index {index})"), if *r == 0 && !gid.is_null() { format!(" gid {}", t::gid(&unsafe { gid.read_unaligned().raw })) } else { String::new() }),
    {
        let ctx = handles::ctx(context)?;
        if port_num != 1 || index < 0 {
            return Err(Errno::EINVAL);
        }
        let g = ctx.gid(index as usize).ok_or(Errno::EINVAL)?;
        // SAFETY: out-pointer from the caller (checked for NULL).
        unsafe { put(gid, ibv_gid { raw: g }) }?;
        Ok(0)
    }
}

export! {
    minus1 fn ibv_query_pkey(context: *mut ibv_context, port_num: u8, index: c_int, pkey: *mut u16) -> c_int,
        trace |_, _r| format!("ibv_query_pkey({context:p}, port {port_num}, index {index})"),
    {
        handles::ctx(context)?;
        if port_num != 1 || index != 0 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: out-pointer from the caller (checked for NULL).
        unsafe { put(pkey, 0xffffu16.to_be()) }?;
        Ok(0)
    }
}

export! {
    value(-1) fn ibv_get_pkey_index(context: *mut ibv_context, port_num: u8, pkey: u16) -> c_int {
        handles::ctx(context)?;
        Ok(if port_num == 1 && u16::from_be(pkey) == 0xffff { 0 } else { -libc::ENOENT })
    }
}

fn entry(ctx: &Context, index: u32) -> ibv_gid_entry {
    let e = ctx.gids[index as usize];
    ibv_gid_entry { gid: ibv_gid { raw: e.gid }, gid_index: index, port_num: 1, gid_type: IBV_GID_TYPE_ROCE_V2, ndev_ifindex: e.ifindex }
}

export! {
    errno fn _ibv_query_gid_ex(context: *mut ibv_context, port_num: u32, gid_index: u32, out: *mut ibv_gid_entry, flags: u32, entry_size: usize) -> c_int,
        trace |_, r| (format!("ibv_query_gid_ex({context:p}, port {port_num}, index {gid_index})"), if *r == 0 { format!(" gid {}", t::gid(&unsafe { out.read_unaligned().gid.raw })) } else { String::new() }),
    {
        let ctx = handles::ctx(context)?;
        if port_num != 1 || flags != 0 || entry_size < std::mem::size_of::<ibv_gid_entry>() || out.is_null() {
            return Err(Errno::EINVAL);
        }
        if gid_index as usize >= ctx.gids.len() {
            return Err(Errno::EINVAL);
        }
        // SAFETY: out holds at least one entry (entry_size checked).
        unsafe { out.write_unaligned(entry(&ctx, gid_index)) };
        Ok(0)
    }
}

export! {
    neg fn _ibv_query_gid_table(context: *mut ibv_context, entries: *mut ibv_gid_entry, max_entries: usize, flags: u32, entry_size: usize) -> isize,
        trace |_, _r| format!("ibv_query_gid_table({context:p}, max_entries {max_entries})"),
    {
        let ctx = handles::ctx(context)?;
        if flags != 0 || entry_size < std::mem::size_of::<ibv_gid_entry>() || (entries.is_null() && max_entries > 0) {
            return Err(Errno::EINVAL);
        }
        let n = ctx.gids.len().min(max_entries);
        for i in 0..n {
            // SAFETY: the caller's array holds max_entries entries of entry_size bytes.
            unsafe { ((entries as *mut u8).add(i * entry_size) as *mut ibv_gid_entry).write_unaligned(entry(&ctx, i as u32)) };
        }
        Ok(n as isize)
    }
}

pub fn gid_type_of(ctx: &Arc<Context>, index: u32) -> Result<u32> {
    if index as usize >= ctx.gids.len() {
        return Err(Errno::EINVAL);
    }
    Ok(1) // IBV_GID_TYPE_SYSFS_ROCE_V2
}

/// Trace text of the three `query_port` entries.
fn port_line(context: *mut ibv_context, port: u8, r: c_int) -> (String, String) {
    let call = format!("ibv_query_port({context:p}, {port})");
    let after = match handles::ctx(context) {
        Ok(ctx) if r == 0 => {
            let a = port_attr(&ctx);
            format!(" ACTIVE mtu {} lid {} gid_tbl_len {}", t::mtu(a.active_mtu), a.lid, a.gid_tbl_len)
        }
        _ => String::new(),
    };
    (call, after)
}
