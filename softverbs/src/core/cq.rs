//! Completion channels and completion queues.
//!
//! A channel is an [`EventQueue`] of CQs. A CQ keeps its completions in a bounded queue; an
//! armed CQ (`ibv_req_notify_cq`) queues one event on its channel for the next completion
//! added after arming (solicited-only: the next solicited receive or any error), then
//! disarms. Overrun drops the completion and raises `IBV_EVENT_CQ_ERR` once.

use super::context::{AsyncElem, Context};
use super::events::{EventCounts, EventQueue};
use super::registry::lock;
use crate::sys::Result;
use rdma_abi::verbs::*;
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Largest CQ (`max_cqe`).
pub const MAX_CQE: i32 = 1 << 20;

#[repr(C)]
pub struct Channel {
    pub c: UnsafeCell<ibv_comp_channel>,
    pub ctx: Arc<Context>,
    pub events: EventQueue<Arc<Cq>>,
    pub users: AtomicUsize,
}

// SAFETY: the C struct is written only under `users` bookkeeping by our own functions
// (refcnt), which the application only reads; other fields are Sync.
unsafe impl Sync for Channel {}
// SAFETY: see Sync.
unsafe impl Send for Channel {}

impl Channel {
    pub fn new(ctx: &Arc<Context>) -> Result<Arc<Channel>> {
        let events = EventQueue::new()?;
        let fd = events.fd();
        Ok(Arc::new(Channel {
            c: UnsafeCell::new(ibv_comp_channel { context: ctx.ibv(), fd, refcnt: 0 }),
            ctx: ctx.clone(),
            events,
            users: AtomicUsize::new(0),
        }))
    }

    pub fn ibv(&self) -> *mut ibv_comp_channel {
        self.c.get()
    }

    fn sync_refcnt(&self) {
        // SAFETY: refcnt is a plain int in our own struct; the app only reads it.
        unsafe { (*self.c.get()).refcnt = self.users.load(Ordering::SeqCst) as i32 };
    }
}

struct CqState {
    entries: VecDeque<ibv_wc>,
    cap: usize,
    /// `Some(solicited_only)` while armed.
    armed: Option<bool>,
    overrun: bool,
}

#[repr(C)]
pub struct Cq {
    pub c: UnsafeCell<ibv_cq>,
    pub ctx: Arc<Context>,
    pub channel: Option<Arc<Channel>>,
    st: Mutex<CqState>,
    pub comp_events: EventCounts,
    pub async_events: EventCounts,
    /// QPs and SRQs using this CQ (destroy fails with EBUSY while > 0).
    pub users: AtomicUsize,
    me: Weak<Cq>,
}

// SAFETY: the C struct's mutable counters are written only by our functions under the
// EventCounts locks; everything else in it is set before publication.
unsafe impl Sync for Cq {}
// SAFETY: see Sync.
unsafe impl Send for Cq {}

impl Cq {
    pub fn new(ctx: &Arc<Context>, cqe: i32, cq_context: *mut libc::c_void, channel: Option<Arc<Channel>>) -> Arc<Cq> {
        let cap = cqe.max(1) as usize;
        let chan_ptr = channel.as_ref().map(|c| c.ibv()).unwrap_or(std::ptr::null_mut());
        // SAFETY: ibv_cq is plain data; all-zero is valid (also for the pthread objects).
        let mut c: ibv_cq = unsafe { std::mem::zeroed() };
        c.context = ctx.ibv();
        c.channel = chan_ptr;
        c.cq_context = cq_context;
        c.cqe = cap as i32;
        let cq = Arc::new_cyclic(|me| Cq {
            c: UnsafeCell::new(c),
            ctx: ctx.clone(),
            channel: channel.clone(),
            st: Mutex::new(CqState { entries: VecDeque::new(), cap, armed: None, overrun: false }),
            comp_events: EventCounts::default(),
            async_events: EventCounts::default(),
            users: AtomicUsize::new(0),
            me: me.clone(),
        });
        if let Some(ch) = &channel {
            ch.users.fetch_add(1, Ordering::SeqCst);
            ch.sync_refcnt();
        }
        cq
    }

    pub fn ibv(&self) -> *mut ibv_cq {
        self.c.get()
    }

    /// Adds a completion. `solicited`: a receive whose sender asked for a solicited event.
    pub fn push(&self, wc: ibv_wc, solicited: bool) {
        let mut overrun = false;
        {
            let mut st = lock(&self.st);
            if st.entries.len() >= st.cap {
                if !st.overrun {
                    st.overrun = true;
                    overrun = true;
                }
            } else {
                st.entries.push_back(wc);
                if let Some(sol_only) = st.armed {
                    if !sol_only || solicited || wc.status != IBV_WC_SUCCESS {
                        st.armed = None;
                        // Queued before the entry can be polled (the lock is still held):
                        // whoever polls the completion finds its event there too. Nothing
                        // takes this CQ's lock while holding the channel's.
                        if let (Some(ch), Some(me)) = (&self.channel, self.me.upgrade()) {
                            ch.events.push(me);
                        }
                    }
                }
            }
        }
        if overrun {
            if let Some(me) = self.me.upgrade() {
                self.ctx.raise(AsyncElem::Cq(me), IBV_EVENT_CQ_ERR);
            }
        }
    }

    pub fn poll(&self, out: &mut [ibv_wc]) -> usize {
        let mut st = lock(&self.st);
        let n = out.len().min(st.entries.len());
        for slot in out.iter_mut().take(n) {
            if let Some(wc) = st.entries.pop_front() {
                *slot = wc;
            }
        }
        if n > 0 {
            st.overrun = false;
        }
        n
    }

    pub fn arm(&self, solicited_only: bool) {
        let mut st = lock(&self.st);
        // Arming an armed CQ keeps the broader condition.
        st.armed = Some(match st.armed {
            Some(prev) => prev && solicited_only,
            None => solicited_only,
        });
    }

    pub fn resize(&self, cqe: i32) -> Result<i32> {
        let mut st = lock(&self.st);
        let cap = (cqe.max(1) as usize).max(st.entries.len());
        st.cap = cap;
        // SAFETY: cqe is a plain int of our own struct; the app only reads it.
        unsafe { (*self.c.get()).cqe = cap as i32 };
        Ok(cap as i32)
    }

    /// Records acknowledgements from `ibv_ack_cq_events`.
    pub fn ack_comp(&self, n: u32) {
        let total = self.comp_events.ack(n as u64);
        // SAFETY: our own counter field; the app only reads it.
        unsafe { (*self.c.get()).comp_events_completed = total as u32 };
    }

    pub fn ack_async(&self) {
        let total = self.async_events.ack(1);
        // SAFETY: our own counter field; the app only reads it.
        unsafe { (*self.c.get()).async_events_completed = total as u32 };
    }

    /// Destroy's second half: drop unread events of this CQ, wait for acks of read ones.
    pub fn retire(self: &Arc<Cq>) {
        if let Some(ch) = &self.channel {
            ch.events.purge(|c| Arc::ptr_eq(c, self));
        }
        self.ctx.async_q.purge(|e| matches!(&e.elem, AsyncElem::Cq(c) if Arc::ptr_eq(c, self)));
        self.comp_events.wait_acked();
        self.async_events.wait_acked();
        if let Some(ch) = &self.channel {
            ch.users.fetch_sub(1, Ordering::SeqCst);
            ch.sync_refcnt();
        }
    }
}

/// A completion with the fields every completion carries.
pub fn wc(wr_id: u64, status: ibv_wc_status, opcode: ibv_wc_opcode, qp_num: u32) -> ibv_wc {
    ibv_wc {
        wr_id,
        status,
        opcode,
        vendor_err: 0,
        byte_len: 0,
        imm_data: 0,
        qp_num,
        src_qp: 0,
        wc_flags: 0,
        pkey_index: 0,
        slid: 0,
        sl: 0,
        dlid_path_bits: 0,
    }
}
