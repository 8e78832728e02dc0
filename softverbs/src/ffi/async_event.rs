//! `ibv_get_async_event` / `ibv_ack_async_event`.

use super::handles;
use crate::core::context::AsyncElem;
use crate::core::registry::lock;
use crate::sys::{read_unit, set_errno, Errno};
use libc::c_int;
use rdma_abi::verbs::*;
use std::sync::{LazyLock, Mutex};

/// Events handed out and not yet acknowledged: (element pointer, object). Keeps the
/// object reachable for the ack even after its handle was destroyed (destroy waits).
static DELIVERED: LazyLock<Mutex<Vec<(usize, AsyncElem)>>> = LazyLock::new(|| Mutex::new(Vec::new()));

#[inline(never)]
extern "C" fn async_fd(context: *mut ibv_context) -> c_int {
    match std::panic::catch_unwind(|| handles::ctx(context).map(|c| c.async_q.fd())) {
        Ok(Ok(fd)) => fd,
        _ => {
            set_errno(Errno::EINVAL);
            -1
        }
    }
}

/// 1 = delivered, 0 = nothing queued, -1 = error (errno set).
#[inline(never)]
extern "C" fn take_async(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int {
    let r = std::panic::catch_unwind(|| {
        let Ok(ctx) = handles::ctx(context) else { return -1 };
        let got = ctx.async_q.pop_with(|e| {
            let (elem, ptr) = match &e.elem {
                AsyncElem::Cq(c) => {
                    c.async_events.reported();
                    (ibv_async_event_element { cq: c.ibv() }, c.ibv() as usize)
                }
                AsyncElem::Qp(q) => {
                    q.events.reported();
                    (ibv_async_event_element { qp: q.ibv() }, q.ibv() as usize)
                }
                AsyncElem::Srq(s) => {
                    s.events.reported();
                    (ibv_async_event_element { srq: s.ibv() }, s.ibv() as usize)
                }
                AsyncElem::Port(p) => (ibv_async_event_element { port_num: *p }, 0),
            };
            if ptr != 0 {
                lock(&DELIVERED).push((ptr, e.elem));
            }
            ibv_async_event { element: elem, event_type: e.kind }
        });
        match got {
            Some(ev) => {
                if event.is_null() {
                    return -1;
                }
                // SAFETY: non-NULL out-pointer from the caller.
                unsafe { event.write_unaligned(ev) };
                1
            }
            None => 0,
        }
    });
    match r {
        Ok(v) => {
            if v < 0 {
                set_errno(Errno::EINVAL);
            }
            v
        }
        Err(_) => {
            set_errno(Errno::EIO);
            -1
        }
    }
}

/// Blocks in a plain `read()` of `context->async_fd` (EINTR on a signal, cancellable);
/// see `ibv_get_cq_event` for why this frame calls only `extern "C"` helpers.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int {
    let t0 = super::cq::trace_start();
    // SAFETY: forwarded caller contract.
    let r = unsafe { get_async_event(context, event) };
    if t0.is_some() {
        trace_async_event(t0, context, event, r);
    }
    r
}

#[inline(never)]
#[allow(improper_ctypes_definitions)]
extern "C" fn trace_async_event(t0: Option<std::time::Instant>, context: *mut ibv_context, event: *mut ibv_async_event, r: c_int) {
    let Some(t0) = t0 else { return };
    let err = (r < 0).then(Errno::last);
    crate::trace::finish(t0, &r, err, |_| {
        let after = if r == 0 {
            // SAFETY: on success the caller's out-pointer holds the event just written.
            let e = unsafe { event.read_unaligned() };
            // SAFETY: reading the union member the event type selects (plain data).
            let elem = unsafe {
                match e.event_type {
                    IBV_EVENT_CQ_ERR => format!("cq {:p}", e.element.cq),
                    IBV_EVENT_SRQ_ERR | IBV_EVENT_SRQ_LIMIT_REACHED => format!("srq {:p}", e.element.srq),
                    IBV_EVENT_DEVICE_FATAL => "device".to_string(),
                    IBV_EVENT_PORT_ACTIVE | IBV_EVENT_PORT_ERR | IBV_EVENT_LID_CHANGE | IBV_EVENT_PKEY_CHANGE | IBV_EVENT_SM_CHANGE
                    | IBV_EVENT_CLIENT_REREGISTER | IBV_EVENT_GID_CHANGE => format!("port {}", e.element.port_num),
                    _ => {
                        let q = e.element.qp;
                        match handles::qp(q) {
                            Ok(x) => format!("qp {q:p} qpn {}", x.qpn),
                            Err(_) => format!("qp {q:p}"),
                        }
                    }
                }
            };
            format!(" {} {elem}", crate::trace::event_type(e.event_type))
        } else {
            String::new()
        };
        (format!("ibv_get_async_event({context:p})"), after)
    });
}

/// The body of `ibv_get_async_event` (no value with a destructor in this frame).
unsafe fn get_async_event(context: *mut ibv_context, event: *mut ibv_async_event) -> c_int {
    if event.is_null() {
        set_errno(Errno::EINVAL);
        return -1;
    }
    let fd = async_fd(context);
    if fd < 0 {
        return -1;
    }
    loop {
        if read_unit(fd) != 8 {
            return -1;
        }
        match take_async(context, event) {
            1 => return 0,
            0 => continue,
            _ => return -1,
        }
    }
}

export! {
    void fn ibv_ack_async_event(event: *mut ibv_async_event),
        trace |_, _r| {
            // SAFETY: NULL or the caller's event (read only when non-NULL).
            let ty = if event.is_null() { "NULL".to_string() } else { crate::trace::event_type(unsafe { (*event).event_type }) };
            format!("ibv_ack_async_event({event:p} {ty})")
        },
    {
        if event.is_null() {
            return Ok(());
        }
        // SAFETY: non-NULL in-pointer from the caller; the element is a plain union read.
        let ptr = unsafe { (*event).element.cq } as usize;
        let found = {
            let mut d = lock(&DELIVERED);
            d.iter().position(|(p, _)| *p == ptr).map(|i| d.remove(i).1)
        };
        match found {
            Some(AsyncElem::Cq(c)) => c.ack_async(),
            Some(AsyncElem::Qp(q)) => q.ack_async(),
            Some(AsyncElem::Srq(s)) => s.ack_async(),
            _ => {}
        }
        Ok(())
    }
}
