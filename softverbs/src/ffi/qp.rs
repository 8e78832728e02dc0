//! Queue pairs: create (classic and `_ex`), modify, query, destroy, post send/recv, and
//! the extended-API entry points we decline.

use super::handles::{self, put, QPS};
use crate::core::srq::read_recv_list;
use crate::qp::{requester, ud, CreateArgs, Qp};
use crate::qp::state::Kind;
use crate::sys::{Errno, Result};
use crate::trace as t;
use libc::c_int;
use rdma_abi::verbs::*;
use std::sync::Arc;

fn create(pd: *mut ibv_pd, a: &ibv_qp_init_attr, create_flags: u32) -> Result<*mut ibv_qp> {
    let pd = handles::pd(pd)?;
    let send_cq = handles::cq(a.send_cq)?;
    let recv_cq = handles::cq(a.recv_cq)?;
    let srq = if a.srq.is_null() { None } else { Some(handles::srq(a.srq)?) };
    let qp = Qp::create(
        &pd,
        CreateArgs {
            qp_context: a.qp_context,
            send_cq,
            recv_cq,
            srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all != 0,
            create_flags,
        },
    )?;
    let p = qp.ibv();
    QPS.insert(p, qp);
    Ok(p)
}

export! {
    /// Writes the granted capabilities back into `qp_init_attr->cap`.
    null fn ibv_create_qp(pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> *mut ibv_qp,
        trace |_, r| (create_line("ibv_create_qp", pd, qp_init_attr), created(*r)),
    {
        // SAFETY: in/out pointer from the caller (checked for NULL).
        let a = unsafe { handles::get(qp_init_attr) }?;
        let p = create(pd, &a, 0)?;
        let qp = handles::qp(p)?;
        // SAFETY: qp_init_attr is non-NULL (read above) and writable.
        unsafe { (*qp_init_attr).cap = qp.cap };
        Ok(p)
    }
}

op! {
    /// `verbs_context.create_qp_ex`: PD plus optional create flags
    /// (`IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`); the extended send API and XRC are declined.
    null fn create_qp_ex_op(context: *mut ibv_context, attr: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp,
        trace |_, r| {
            // SAFETY: NULL or the caller's attr (read only when non-NULL).
            let (pd, base) = if attr.is_null() { (std::ptr::null_mut(), std::ptr::null()) } else { unsafe { ((*attr).pd, attr as *const ibv_qp_init_attr) } };
            (create_line("ibv_create_qp_ex", pd, base), created(*r))
        },
    {
        let ctx = handles::ctx(context)?;
        // SAFETY: in/out pointer from the caller (checked for NULL).
        let a = unsafe { handles::get(attr) }?;
        let allowed = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
        if a.comp_mask & !allowed != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
            return Err(Errno::EINVAL);
        }
        let pd = handles::pd(a.pd)?;
        if !Arc::ptr_eq(&pd.ctx, &ctx) {
            return Err(Errno::EINVAL);
        }
        let flags = if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 { a.create_flags } else { 0 };
        let base = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        let p = create(a.pd, &base, flags)?;
        let qp = handles::qp(p)?;
        // SAFETY: attr is non-NULL (read above) and writable.
        unsafe { (*attr).cap = qp.cap };
        Ok(p)
    }
}

export! {
    errno fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int) -> c_int,
        trace [handles::qp(qp).ok().map(|q| (q.qpn, crate::core::registry::lock(&q.st).state))] |before, _r| {
            let mask = attr_mask as u32;
            let (qpn, from) = before.map(|(n, s)| (n.to_string(), t::qp_state(s))).unwrap_or(("?".into(), "?".into()));
            // SAFETY: NULL or the caller's attr (read only when non-NULL).
            let a = if attr.is_null() { None } else { Some(unsafe { attr.read_unaligned() }) };
            let st = match a {
                Some(a) if mask & IBV_QP_STATE != 0 => format!("{from}->{}", t::qp_state(a.qp_state)),
                _ => from,
            };
            let rest = a.map(|a| t::qp_attr(&a, mask)).unwrap_or_default();
            format!("ibv_modify_qp({qp:p} qpn {qpn}, {st}, mask {}{rest})", t::qp_mask(mask))
        },
    {
        let q = handles::qp(qp)?;
        // SAFETY: in-pointer from the caller (checked for NULL).
        let a = unsafe { handles::get(attr) }?;
        q.modify(&a, attr_mask as u32)?;
        Ok(0)
    }
}

export! {
    errno fn ibv_query_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, attr_mask: c_int, init_attr: *mut ibv_qp_init_attr) -> c_int,
        trace |_, r| (format!("ibv_query_qp({qp:p}, mask {})", t::qp_mask(attr_mask as u32)), if *r == 0 { format!(" state {}", t::qp_state(unsafe { attr.read_unaligned() }.qp_state)) } else { String::new() }),
    {
        let q = handles::qp(qp)?;
        let _ = attr_mask;
        let (a, cap) = q.query();
        // SAFETY: out-pointer from the caller (checked for NULL).
        unsafe { put(attr, a) }?;
        if !init_attr.is_null() {
            // SAFETY: reading our own C struct; writing the caller's non-NULL out-pointer.
            unsafe {
                let c = &*q.ibv();
                init_attr.write_unaligned(ibv_qp_init_attr {
                    qp_context: c.qp_context,
                    send_cq: c.send_cq,
                    recv_cq: c.recv_cq,
                    srq: c.srq,
                    cap,
                    qp_type: q.qp_type,
                    sq_sig_all: q.sq_sig_all as c_int,
                });
            }
        }
        Ok(0)
    }
}

export! {
    errno fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int,
        trace [handles::qp(qp).map(|q| format!(" qpn {}", q.qpn)).unwrap_or_default()] |qpn, _r| format!("ibv_destroy_qp({qp:p}{qpn})"),
    {
        let q = QPS.remove(qp).ok_or(Errno::EINVAL)?;
        q.destroy();
        Ok(0)
    }
}

op! {
    errno fn post_send_op(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad_wr: *mut *mut ibv_send_wr) -> c_int,
        trace |_, _r| format!("ibv_post_send({qp:p}{}, {})", qpn_of(qp), unsafe { t::send_wrs(wr) }),
    {
        let q = match handles::qp(qp) {
            Ok(q) => q,
            Err(e) => {
                if !bad_wr.is_null() {
                    // SAFETY: caller's out-pointer.
                    unsafe { *bad_wr = wr };
                }
                return Err(e);
            }
        };
        // SAFETY: wr is the application's WR list (verbs contract).
        let r = unsafe {
            if q.kind == Kind::Ud {
                ud::post(&q, wr, |ah| handles::ah(ah).ok())
            } else {
                requester::post(&q, wr)
            }
        };
        match r {
            Ok(()) => Ok(0),
            Err((bad, e)) => {
                if !bad_wr.is_null() {
                    // SAFETY: caller's out-pointer.
                    unsafe { *bad_wr = bad };
                }
                Err(e)
            }
        }
    }
}

op! {
    errno fn post_recv_op(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int,
        trace |_, _r| format!("ibv_post_recv({qp:p}{}, {})", qpn_of(qp), unsafe { t::recv_wrs(wr) }),
    {
        let set_bad = |p: *mut ibv_recv_wr| {
            if !bad_wr.is_null() {
                // SAFETY: caller's out-pointer.
                unsafe { *bad_wr = p };
            }
        };
        let q = handles::qp(qp).inspect_err(|_| set_bad(wr))?;
        // SAFETY: wr is the application's WR list (verbs contract).
        let (wqes, bad) = unsafe { read_recv_list(wr, q.cap.max_recv_sge) };
        // Post the good prefix first, then report the bad WR.
        let n = wqes.len();
        let mut ptrs = Vec::with_capacity(n);
        let mut p = wr;
        for _ in 0..n {
            ptrs.push(p);
            // SAFETY: walking the same valid list read_recv_list walked.
            p = unsafe { (*p).next };
        }
        if let Err((i, e)) = q.post_recv(wqes) {
            set_bad(ptrs.get(i).copied().unwrap_or(wr));
            return Err(e);
        }
        if let Some(b) = bad {
            set_bad(b);
            return Err(Errno::EINVAL);
        }
        Ok(0)
    }
}

export! {
    /// NULL: QPs of this device are not created with the extended send API.
    null fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
        handles::qp(qp)?;
        Err(Errno::EOPNOTSUPP)
    }
}

export! {
    errno fn ibv_query_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
        let _ = ece;
        handles::qp(qp)?;
        Err(Errno::EOPNOTSUPP)
    }
}

export! {
    errno fn ibv_set_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
        let _ = ece;
        handles::qp(qp)?;
        Err(Errno::EOPNOTSUPP)
    }
}

export! {
    /// Data is placed in order and whole: `IBV_QUERY_QP_DATA_IN_ORDER_WHOLE_MSG` (1), and
    /// with `IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS` also `ALIGNED_128_BYTES` (2).
    value(0) fn ibv_query_qp_data_in_order(qp: *mut ibv_qp, op: ibv_wr_opcode, flags: u32) -> c_int {
        let _ = op;
        handles::qp(qp)?;
        Ok(if flags & 1 != 0 { 3 } else { 1 })
    }
}

/// ` qpn N` of a live QP (trace text).
fn qpn_of(qp: *mut ibv_qp) -> String {
    handles::qp(qp).map(|q| format!(" qpn {}", q.qpn)).unwrap_or_default()
}

/// Trace text of a QP creation (`a` read after the call: `cap` holds what was granted).
fn create_line(name: &str, pd: *mut ibv_pd, a: *const ibv_qp_init_attr) -> String {
    if a.is_null() {
        return format!("{name}({pd:p}, NULL)");
    }
    // SAFETY: the caller's non-NULL attr.
    let a = unsafe { a.read_unaligned() };
    format!(
        "{name}({pd:p}, {}, send_cq {:p}, recv_cq {:p}, srq {:p}, sq_sig_all {}, {})",
        t::qp_type(a.qp_type),
        a.send_cq,
        a.recv_cq,
        a.srq,
        a.sq_sig_all,
        t::cap(&a.cap)
    )
}

/// ` qpn N` of a QP just created.
fn created(p: *mut ibv_qp) -> String {
    if p.is_null() { String::new() } else { qpn_of(p) }
}
