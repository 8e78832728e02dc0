//! Completion channels, CQs, polling, arming, CQ events.

use super::handles::{self, CHANNELS, CQS};
use crate::core::cq::{Channel, Cq, MAX_CQE};
use crate::sys::{read_unit, set_errno, Errno};
use crate::trace as t;
use libc::{c_int, c_uint, c_void};
use rdma_abi::verbs::*;
use std::sync::atomic::Ordering;

export! {
    null fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel,
        trace |_, r| (format!("ibv_create_comp_channel({context:p})"), handles::channel(*r).map(|c| format!(" fd {}", c.events.fd())).unwrap_or_default()),
    {
        let ctx = handles::ctx(context)?;
        let ch = Channel::new(&ctx)?;
        let p = ch.ibv();
        CHANNELS.insert(p, ch);
        Ok(p)
    }
}

export! {
    errno fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int,
        trace |_, _r| format!("ibv_destroy_comp_channel({channel:p})"),
    {
        let ch = handles::channel(channel)?;
        if ch.users.load(Ordering::SeqCst) > 0 {
            return Err(Errno::EBUSY);
        }
        CHANNELS.remove(channel);
        Ok(0)
    }
}

export! {
    null fn ibv_create_cq(context: *mut ibv_context, cqe: c_int, cq_context: *mut c_void, channel: *mut ibv_comp_channel, comp_vector: c_int) -> *mut ibv_cq,
        trace |_, _r| format!("ibv_create_cq({context:p}, cqe {cqe}, channel {channel:p}, comp_vector {comp_vector})"),
    {
        let ctx = handles::ctx(context)?;
        if !(1..=MAX_CQE).contains(&cqe) || comp_vector != 0 {
            return Err(Errno::EINVAL);
        }
        let ch = if channel.is_null() { None } else { Some(handles::channel(channel)?) };
        if let Some(c) = &ch {
            if !std::sync::Arc::ptr_eq(&c.ctx, &ctx) {
                return Err(Errno::EINVAL);
            }
        }
        let cq = Cq::new(&ctx, cqe, cq_context, ch);
        let p = cq.ibv();
        CQS.insert(p, cq);
        Ok(p)
    }
}

export! {
    /// Fails with EBUSY while a QP/SRQ uses the CQ; otherwise drops its unread events and
    /// waits until every event handed out was acknowledged (upstream: forever).
    errno fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int,
        trace |_, _r| format!("ibv_destroy_cq({cq:p})"),
    {
        let c = handles::cq(cq)?;
        if c.users.load(Ordering::SeqCst) > 0 {
            return Err(Errno::EBUSY);
        }
        CQS.remove(cq);
        c.retire();
        Ok(0)
    }
}

export! {
    errno fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int,
        trace |_, _r| format!("ibv_resize_cq({cq:p}, cqe {cqe})"),
    {
        let c = handles::cq(cq)?;
        if !(1..=MAX_CQE).contains(&cqe) {
            return Err(Errno::EINVAL);
        }
        c.resize(cqe)?;
        Ok(0)
    }
}

op! {
    /// `ctx->ops.poll_cq`: number of completions written, negative on a bad CQ.
    neg fn poll_cq_op(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int,
        trace |_, r| match *r {
            0 => None,
            n if n < 0 => Some((format!("ibv_poll_cq({cq:p}, {num_entries})"), String::new())),
            // SAFETY: the poll just wrote n completions there.
            n => Some((format!("ibv_poll_cq({cq:p}, {num_entries})"), format!(" {}", t::wcs(unsafe { std::slice::from_raw_parts(wc, n as usize) })))),
        },
    {
        let c = handles::cq(cq)?;
        if num_entries <= 0 {
            return Ok(0);
        }
        if wc.is_null() {
            return Err(Errno::EINVAL);
        }
        // SAFETY: the caller provides num_entries writable ibv_wc slots.
        let out = unsafe { std::slice::from_raw_parts_mut(wc, num_entries as usize) };
        if let Some(net) = c.ctx.net() {
            net.flush_held();
        }
        let n = c.poll(out);
        if n > 0 {
            return Ok(n as c_int);
        }
        // Polling-driven progress: a busy-polling application moves its own data instead
        // of waiting for the progress thread to be scheduled. No sched_yield on empty
        // polls: the scheduler then runs whatever else is runnable (a low-priority busy
        // loop included) for a whole slice, milliseconds in which this poller's peer
        // gets no answer (udpong resends after 1 ms, and its duplicates never die out).
        if let Some(net) = c.ctx.net() {
            if net.progress(&c.ctx) {
                return Ok(c.poll(out) as c_int);
            }
        }
        Ok(0)
    }
}

op! {
    errno fn req_notify_cq_op(cq: *mut ibv_cq, solicited_only: c_int) -> c_int,
        trace |_, _r| format!("ibv_req_notify_cq({cq:p}, solicited_only {solicited_only})"),
    {
        let c = handles::cq(cq)?;
        c.arm(solicited_only != 0);
        if let Some(net) = c.ctx.net() {
            net.kick();
        }
        Ok(0)
    }
}

/// The channel's fd, or -1 with errno EINVAL. No unwinding can leave it.
#[inline(never)]
extern "C" fn channel_fd(channel: *mut ibv_comp_channel) -> c_int {
    let r = std::panic::catch_unwind(|| handles::channel(channel).map(|c| c.events.fd()));
    match r {
        Ok(Ok(fd)) => fd,
        _ => {
            set_errno(Errno::EINVAL);
            -1
        }
    }
}

/// Takes one queued event: 1 = delivered, 0 = none queued (purged), -1 = error (errno).
#[inline(never)]
extern "C" fn take_cq_event(channel: *mut ibv_comp_channel, cq: *mut *mut ibv_cq, cq_context: *mut *mut c_void) -> c_int {
    let r = std::panic::catch_unwind(|| {
        let Ok(ch) = handles::channel(channel) else { return -1 };
        let got = ch.events.pop_with(|c| {
            c.comp_events.reported();
            c
        });
        match got {
            Some(c) => {
                // SAFETY: out-pointers from the caller (checked for NULL).
                unsafe {
                    if !cq.is_null() {
                        *cq = c.ibv();
                    }
                    if !cq_context.is_null() {
                        *cq_context = (*c.ibv()).cq_context;
                    }
                }
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

/// `ibv_get_cq_event`: blocks in a plain `read()` of the channel fd, so a signal makes it
/// fail with EINTR (no retry) and `pthread_cancel` can act there. This frame holds no value
/// with a destructor and calls only `extern "C"` helpers (each with its own panic
/// boundary), so it has no landing pad for glibc's forced unwinding to trip on.
/// Traced like every export, by `extern "C"` helpers that hold their own panic boundary.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(channel: *mut ibv_comp_channel, cq: *mut *mut ibv_cq, cq_context: *mut *mut c_void) -> c_int {
    let t0 = trace_start();
    // SAFETY: forwarded caller contract.
    let r = unsafe { get_cq_event(channel, cq, cq_context) };
    if t0.is_some() {
        trace_cq_event(t0, channel, cq, r);
    }
    r
}

/// The start time of a traced call (`None` when the trace is off), for the two blocking
/// reads; `Option<Instant>` is plain data (no destructor), and only Rust calls this.
#[inline(never)]
#[allow(improper_ctypes_definitions)]
pub extern "C" fn trace_start() -> Option<std::time::Instant> {
    std::panic::catch_unwind(t::start).ok().flatten()
}

#[inline(never)]
#[allow(improper_ctypes_definitions)]
extern "C" fn trace_cq_event(t0: Option<std::time::Instant>, channel: *mut ibv_comp_channel, cq: *mut *mut ibv_cq, r: c_int) {
    let Some(t0) = t0 else { return };
    let err = (r < 0).then(Errno::last);
    t::finish(t0, &r, err, |_| {
        // SAFETY: on success the caller's out-pointer holds the CQ just written.
        let after = if r == 0 && !cq.is_null() { format!(" cq {:p}", unsafe { *cq }) } else { String::new() };
        (format!("ibv_get_cq_event({channel:p})"), after)
    });
}

/// The body of `ibv_get_cq_event`: no value with a destructor lives in this frame either.
unsafe fn get_cq_event(channel: *mut ibv_comp_channel, cq: *mut *mut ibv_cq, cq_context: *mut *mut c_void) -> c_int {
    let fd = channel_fd(channel);
    if fd < 0 {
        return -1;
    }
    loop {
        if read_unit(fd) != 8 {
            return -1;
        }
        match take_cq_event(channel, cq, cq_context) {
            1 => return 0,
            0 => continue,
            _ => return -1,
        }
    }
}

export! {
    void fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint),
        trace |_, _r| format!("ibv_ack_cq_events({cq:p}, {nevents})"),
    {
        if let Ok(c) = handles::cq(cq) {
            c.ack_comp(nevents);
        }
        Ok(())
    }
}
