//! Shared receive queues and the receive work request type both queues use.

use super::context::{AsyncElem, Context};
use super::events::EventCounts;
use super::mem::Pd;
use super::registry::lock;
use crate::qp::Qp;
use crate::sys::{Errno, Result};
use rdma_abi::verbs::*;
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

pub const MAX_SRQ_WR: u32 = 16384;
pub const MAX_SGE: u32 = 32;

/// A posted receive: its id and its (unchecked until used) scatter list.
#[derive(Clone)]
pub struct RecvWqe {
    pub wr_id: u64,
    pub sges: Vec<ibv_sge>,
}

/// Reads a receive WR list into owned WQEs, checking `num_sge` against `max_sge`.
/// Returns the WQEs and, if one is bad, its pointer.
///
/// # Safety
/// `wr` must be NULL or point to a valid NULL-terminated `ibv_recv_wr` list whose `sg_list`
/// arrays hold `num_sge` entries.
pub unsafe fn read_recv_list(mut wr: *mut ibv_recv_wr, max_sge: u32) -> (Vec<RecvWqe>, Option<*mut ibv_recv_wr>) {
    let mut out = Vec::new();
    while !wr.is_null() {
        // SAFETY: caller guarantees wr points to a valid ibv_recv_wr.
        let w = unsafe { &*wr };
        if w.num_sge < 0 || w.num_sge as u32 > max_sge || (w.num_sge > 0 && w.sg_list.is_null()) {
            return (out, Some(wr));
        }
        let sges = if w.num_sge == 0 {
            Vec::new()
        } else {
            // SAFETY: caller guarantees sg_list holds num_sge entries.
            unsafe { std::slice::from_raw_parts(w.sg_list, w.num_sge as usize) }.to_vec()
        };
        out.push(RecvWqe { wr_id: w.wr_id, sges });
        wr = w.next;
    }
    (out, None)
}

struct SrqState {
    rq: VecDeque<RecvWqe>,
    max_wr: u32,
    max_sge: u32,
    limit: u32,
    /// QPs with a request parked for lack of a receive.
    waiters: Vec<Weak<Qp>>,
}

#[repr(C)]
pub struct Srq {
    pub c: UnsafeCell<ibv_srq>,
    pub ctx: Arc<Context>,
    pub pd: Arc<Pd>,
    st: Mutex<SrqState>,
    pub events: EventCounts,
    pub users: AtomicUsize,
    me: Weak<Srq>,
}

// SAFETY: the C struct is written before publication and then only its counter, by us.
unsafe impl Sync for Srq {}
// SAFETY: see Sync.
unsafe impl Send for Srq {}

impl Srq {
    pub fn new(pd: &Arc<Pd>, srq_context: *mut libc::c_void, attr: &ibv_srq_attr) -> Result<Arc<Srq>> {
        if attr.max_wr == 0 || attr.max_wr > MAX_SRQ_WR || attr.max_sge > MAX_SGE {
            return Err(Errno::EINVAL);
        }
        // SAFETY: ibv_srq is plain data; all-zero is valid (pthread objects included).
        let mut c: ibv_srq = unsafe { std::mem::zeroed() };
        c.context = pd.ctx.ibv();
        c.srq_context = srq_context;
        c.pd = pd.ibv();
        let srq = Arc::new_cyclic(|me| Srq {
            c: UnsafeCell::new(c),
            ctx: pd.ctx.clone(),
            pd: pd.clone(),
            st: Mutex::new(SrqState {
                rq: VecDeque::new(),
                max_wr: attr.max_wr,
                max_sge: attr.max_sge.max(1),
                limit: 0,
                waiters: Vec::new(),
            }),
            events: EventCounts::default(),
            users: AtomicUsize::new(0),
            me: me.clone(),
        });
        pd.users.fetch_add(1, Ordering::SeqCst);
        Ok(srq)
    }

    pub fn ibv(&self) -> *mut ibv_srq {
        self.c.get()
    }

    pub fn attr(&self) -> ibv_srq_attr {
        let st = lock(&self.st);
        ibv_srq_attr { max_wr: st.max_wr, max_sge: st.max_sge, srq_limit: st.limit }
    }

    pub fn modify(&self, attr: &ibv_srq_attr, mask: u32) -> Result<()> {
        if mask & !(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) != 0 {
            return Err(Errno::EINVAL);
        }
        let mut st = lock(&self.st);
        if mask & IBV_SRQ_MAX_WR != 0 {
            if attr.max_wr == 0 || attr.max_wr > MAX_SRQ_WR || (attr.max_wr as usize) < st.rq.len() {
                return Err(Errno::EINVAL);
            }
            st.max_wr = attr.max_wr;
        }
        if mask & IBV_SRQ_LIMIT != 0 {
            if attr.srq_limit > st.max_wr {
                return Err(Errno::EINVAL);
            }
            st.limit = attr.srq_limit;
        }
        Ok(())
    }

    /// Posts receives; returns the index of the first WQE not posted (queue full).
    pub fn post(&self, wqes: Vec<RecvWqe>) -> (usize, Vec<Arc<Qp>>) {
        let mut st = lock(&self.st);
        let mut n = 0;
        for w in wqes {
            if st.rq.len() >= st.max_wr as usize {
                break;
            }
            st.rq.push_back(w);
            n += 1;
        }
        let waiters: Vec<Arc<Qp>> = st.waiters.drain(..).filter_map(|w| w.upgrade()).collect();
        (n, waiters)
    }

    pub fn max_sge(&self) -> u32 {
        lock(&self.st).max_sge
    }

    /// Takes one receive (raising the limit event when the queue drops below the limit);
    /// without one, remembers `waiter` so the next post can resume it.
    pub fn take(&self, waiter: Option<Weak<Qp>>) -> Option<RecvWqe> {
        let mut st = lock(&self.st);
        let w = st.rq.pop_front();
        match &w {
            Some(_) => {
                if st.limit > 0 && (st.rq.len() as u32) < st.limit {
                    st.limit = 0;
                    drop(st);
                    if let Some(me) = self.me.upgrade() {
                        self.ctx.raise(AsyncElem::Srq(me), IBV_EVENT_SRQ_LIMIT_REACHED);
                    }
                }
            }
            None => {
                if let Some(q) = waiter {
                    if !st.waiters.iter().any(|x| x.ptr_eq(&q)) {
                        st.waiters.push(q);
                    }
                }
            }
        }
        w
    }

    pub fn ack_async(&self) {
        let total = self.events.ack(1);
        // SAFETY: our own counter field; the app only reads it.
        unsafe { (*self.c.get()).events_completed = total as u32 };
    }
}
