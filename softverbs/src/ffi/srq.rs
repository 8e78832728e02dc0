//! Shared receive queues.

use super::handles::{self, put, SRQS};
use crate::core::registry::lock;
use crate::core::srq::{read_recv_list, Srq};
use crate::qp::responder;
use crate::sys::{Errno, Result};
use libc::c_int;
use rdma_abi::verbs::*;
use std::sync::atomic::Ordering;
use std::sync::Arc;

fn create(pd: *mut ibv_pd, srq_context: *mut libc::c_void, attr: *mut ibv_srq_attr) -> Result<*mut ibv_srq> {
    let pd = handles::pd(pd)?;
    // SAFETY: in/out pointer from the caller (checked for NULL).
    let a = unsafe { handles::get(attr) }?;
    let srq = Srq::new(&pd, srq_context, &a)?;
    // SAFETY: attr is non-NULL (read above) and writable: report what was granted.
    unsafe { attr.write_unaligned(srq.attr()) };
    let p = srq.ibv();
    SRQS.insert(p, srq);
    Ok(p)
}

export! {
    null fn ibv_create_srq(pd: *mut ibv_pd, srq_init_attr: *mut ibv_srq_init_attr) -> *mut ibv_srq,
        trace |_, _r| {
            // SAFETY: NULL or the caller's attr, which now holds what was granted.
            let a = if srq_init_attr.is_null() { None } else { Some(unsafe { (*srq_init_attr).attr }) };
            format!("ibv_create_srq({pd:p}{})", a.map(|a| format!(", max_wr {} max_sge {} limit {}", a.max_wr, a.max_sge, a.srq_limit)).unwrap_or_default())
        },
    {
        if srq_init_attr.is_null() {
            return Err(Errno::EINVAL);
        }
        // SAFETY: non-NULL in/out pointer from the caller.
        let (ctx, attr) = unsafe { ((*srq_init_attr).srq_context, std::ptr::addr_of_mut!((*srq_init_attr).attr)) };
        create(pd, ctx, attr)
    }
}

op! {
    /// `verbs_context.create_srq_ex`: basic SRQs only (XRC and tag matching: EOPNOTSUPP).
    null fn create_srq_ex_op(context: *mut ibv_context, attr: *mut ibv_srq_init_attr_ex) -> *mut ibv_srq,
        trace |_, _r| format!("ibv_create_srq_ex({context:p})"),
    {
        let ctx = handles::ctx(context)?;
        // SAFETY: in/out pointer from the caller (checked for NULL).
        let a = unsafe { handles::get(attr) }?;
        if a.comp_mask & !(IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ) != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 && a.srq_type != IBV_SRQT_BASIC {
            return Err(Errno::EOPNOTSUPP);
        }
        if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 {
            return Err(Errno::EINVAL);
        }
        let pd = handles::pd(a.pd)?;
        if !Arc::ptr_eq(&pd.ctx, &ctx) {
            return Err(Errno::EINVAL);
        }
        // SAFETY: attr is non-NULL; projecting its `attr` member.
        create(a.pd, a.srq_context, unsafe { std::ptr::addr_of_mut!((*attr).attr) })
    }
}

export! {
    errno fn ibv_modify_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr, srq_attr_mask: c_int) -> c_int,
        trace |_, _r| {
            // SAFETY: NULL or the caller's attr.
            let a = if srq_attr.is_null() { None } else { Some(unsafe { srq_attr.read_unaligned() }) };
            format!("ibv_modify_srq({srq:p}, mask {srq_attr_mask:#x}{})", a.map(|a| format!(", max_wr {} limit {}", a.max_wr, a.srq_limit)).unwrap_or_default())
        },
    {
        let s = handles::srq(srq)?;
        // SAFETY: in-pointer from the caller (checked for NULL).
        let a = unsafe { handles::get(srq_attr) }?;
        s.modify(&a, srq_attr_mask as u32)?;
        Ok(0)
    }
}

export! {
    errno fn ibv_query_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr) -> c_int {
        let s = handles::srq(srq)?;
        // SAFETY: out-pointer from the caller (checked for NULL).
        unsafe { put(srq_attr, s.attr()) }?;
        Ok(0)
    }
}

export! {
    errno fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int,
        trace |_, _r| format!("ibv_destroy_srq({srq:p})"),
    {
        let s = handles::srq(srq)?;
        if s.users.load(Ordering::SeqCst) > 0 {
            return Err(Errno::EBUSY);
        }
        SRQS.remove(srq);
        s.ctx.async_q.purge(|e| matches!(&e.elem, crate::core::context::AsyncElem::Srq(x) if Arc::ptr_eq(x, &s)));
        s.events.wait_acked();
        s.pd.users.fetch_sub(1, Ordering::SeqCst);
        Ok(0)
    }
}

op! {
    errno fn post_srq_recv_op(srq: *mut ibv_srq, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int,
        trace |_, _r| format!("ibv_post_srq_recv({srq:p}, {})", unsafe { crate::trace::recv_wrs(wr) }),
    {
        let set_bad = |p: *mut ibv_recv_wr| {
            if !bad_wr.is_null() {
                // SAFETY: caller's out-pointer.
                unsafe { *bad_wr = p };
            }
        };
        let s = handles::srq(srq).inspect_err(|_| set_bad(wr))?;
        // SAFETY: wr is the application's WR list (verbs contract).
        let (wqes, bad) = unsafe { read_recv_list(wr, s.max_sge()) };
        let n = wqes.len();
        let (posted, waiters) = s.post(wqes);
        for qp in waiters {
            let mut st = lock(&qp.st);
            responder::drain(&qp, &mut st);
        }
        if posted < n {
            let mut p = wr;
            for _ in 0..posted {
                // SAFETY: walking the same valid list.
                p = unsafe { (*p).next };
            }
            set_bad(p);
            return Err(Errno::ENOMEM);
        }
        if let Some(b) = bad {
            set_bad(b);
            return Err(Errno::EINVAL);
        }
        Ok(0)
    }
}
