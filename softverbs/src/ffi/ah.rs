//! Address handles and multicast attach/detach.

use super::handles::{self, AHS};
use crate::core::ah::Ah;
use crate::core::context::Context;
use crate::core::device::is_mcast_gid;
use crate::qp::ud;
use crate::sys::{Errno, Result};
use libc::c_int;
use rdma_abi::verbs::*;
use std::sync::atomic::Ordering;

fn check_attr(ctx: &Context, a: &ibv_ah_attr) -> Result<()> {
    if a.port_num != 1 {
        return Err(Errno::EINVAL);
    }
    if a.is_global != 0 && a.grh.sgid_index as usize >= ctx.gids.len() {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

export! {
    null fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah,
        trace |_, _r| {
            // SAFETY: NULL or the caller's attr.
            let a = if attr.is_null() { None } else { Some(unsafe { attr.read_unaligned() }) };
            format!("ibv_create_ah({pd:p}{})", a.map(|a| ah_text(&a)).unwrap_or_default())
        },
    {
        let pd = handles::pd(pd)?;
        // SAFETY: in-pointer from the caller (checked for NULL).
        let a = unsafe { handles::get(attr) }?;
        check_attr(&pd.ctx, &a)?;
        let ah = Ah::new(&pd, a);
        pd.users.fetch_add(1, Ordering::SeqCst);
        let p = ah.ibv();
        AHS.insert(p, ah);
        Ok(p)
    }
}

export! {
    errno fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int,
        trace |_, _r| format!("ibv_destroy_ah({ah:p})"),
    {
        let a = AHS.remove(ah).ok_or(Errno::EINVAL)?;
        a.pd.users.fetch_sub(1, Ordering::SeqCst);
        Ok(0)
    }
}

fn init_from_wc(context: *mut ibv_context, port_num: u8, wc: *const ibv_wc, grh: *const ibv_grh) -> Result<ibv_ah_attr> {
    let ctx = handles::ctx(context)?;
    // SAFETY: in-pointer from the caller (checked for NULL).
    let w = unsafe { handles::get(wc) }?;
    // SAFETY: ibv_ah_attr is plain data.
    let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
    a.dlid = w.slid;
    a.sl = w.sl;
    a.src_path_bits = w.dlid_path_bits;
    a.port_num = port_num;
    if w.wc_flags & IBV_WC_GRH != 0 {
        // SAFETY: in-pointer from the caller (checked for NULL).
        let g = unsafe { handles::get(grh) }?;
        // SAFETY: reading raw bytes of plain-data unions.
        let (sgid, dgid) = unsafe { (g.sgid.raw, g.dgid.raw) };
        let flow = u32::from_be(g.version_tclass_flow);
        a.is_global = 1;
        a.grh.dgid = ibv_gid { raw: sgid };
        a.grh.flow_label = flow & 0x000f_ffff;
        a.grh.traffic_class = ((flow >> 20) & 0xff) as u8;
        a.grh.hop_limit = 0xff;
        a.grh.sgid_index = match ctx.gid_index(&dgid) {
            Some(i) => i as u8,
            None if is_mcast_gid(&dgid) => 0,
            None => return Err(Errno::EINVAL),
        };
    }
    Ok(a)
}

export! {
    errno fn ibv_init_ah_from_wc(context: *mut ibv_context, port_num: u8, wc: *mut ibv_wc, grh: *mut ibv_grh, ah_attr: *mut ibv_ah_attr) -> c_int {
        let a = init_from_wc(context, port_num, wc, grh)?;
        // SAFETY: out-pointer from the caller (checked for NULL).
        unsafe { handles::put(ah_attr, a) }?;
        Ok(0)
    }
}

export! {
    null fn ibv_create_ah_from_wc(pd: *mut ibv_pd, wc: *mut ibv_wc, grh: *mut ibv_grh, port_num: u8) -> *mut ibv_ah,
        trace |_, _r| format!("ibv_create_ah_from_wc({pd:p}, port {port_num})"),
    {
        let p = handles::pd(pd)?;
        let mut a = init_from_wc(p.ctx.ibv(), port_num, wc, grh)?;
        // SAFETY: calling our own export with a live attr.
        let ah = unsafe { ibv_create_ah(pd, &mut a) };
        if ah.is_null() {
            return Err(crate::sys::Errno::last());
        }
        Ok(ah)
    }
}

export! {
    errno fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int,
        trace |_, _r| format!("ibv_attach_mcast({qp:p}{})", gid_text(gid)),
    {
        let _ = lid;
        let q = handles::qp(qp)?;
        // SAFETY: in-pointer from the caller (checked for NULL).
        let g = unsafe { handles::get(gid) }?;
        // SAFETY: raw bytes of a plain-data union.
        ud::attach(&q, unsafe { g.raw })?;
        Ok(0)
    }
}

export! {
    errno fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int,
        trace |_, _r| format!("ibv_detach_mcast({qp:p}{})", gid_text(gid)),
    {
        let _ = lid;
        let q = handles::qp(qp)?;
        // SAFETY: in-pointer from the caller (checked for NULL).
        let g = unsafe { handles::get(gid) }?;
        // SAFETY: raw bytes of a plain-data union.
        ud::detach(&q, unsafe { g.raw })?;
        Ok(0)
    }
}

export! {
    /// No Ethernet L2 behind this device's GIDs.
    errno fn ibv_resolve_eth_l2_from_gid(context: *mut ibv_context, attr: *mut ibv_ah_attr, eth_mac: *mut u8, vid: *mut u16) -> c_int {
        let _ = (attr, eth_mac, vid);
        handles::ctx(context)?;
        Err(Errno::EOPNOTSUPP)
    }
}

/// Trace text of an address vector.
fn ah_text(a: &ibv_ah_attr) -> String {
    if a.is_global != 0 {
        // SAFETY: raw bytes of a plain-data union.
        format!(", dgid {} sgid_index {} dlid {} port {}", crate::trace::gid(&unsafe { a.grh.dgid.raw }), a.grh.sgid_index, a.dlid, a.port_num)
    } else {
        format!(", dlid {} port {}", a.dlid, a.port_num)
    }
}

/// `, gid …` of an in-pointer (trace text).
fn gid_text(g: *const ibv_gid) -> String {
    if g.is_null() {
        return ", NULL".into();
    }
    // SAFETY: the caller's non-NULL GID.
    format!(", gid {}", crate::trace::gid(&unsafe { (*g).raw }))
}
