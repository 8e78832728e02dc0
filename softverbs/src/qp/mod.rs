//! Queue pairs: the object, its state, creation/modify/query/destroy, and posting.
//! The data path is split by role: [`requester`] (RC/UC send queue), [`responder`]
//! (RC/UC requests arriving from a peer) and [`ud`] (datagrams, multicast).

pub mod direct;
pub mod requester;
pub mod responder;
pub mod state;
pub mod ud;

use crate::core::context::{AsyncElem, Context};
use crate::core::cq::{wc, Cq};
use crate::core::events::EventCounts;
use crate::core::mem::Pd;
use crate::core::registry::lock;
use crate::core::srq::{RecvWqe, Srq, MAX_SGE};
use crate::core::window;
use crate::net::frame::Header;
use crate::net::peers::RegFile;
use crate::net::Link;
use crate::sys::{random_u32, Errno, Result};
use rdma_abi::verbs::*;
use state::Kind;
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

pub const MAX_QP_WR: u32 = 16384;
/// Inline data granted a UD QP at least (rdma_xclient sends 16 inline bytes with 0
/// requested).
pub const MIN_INLINE: u32 = 256;
/// The most inline data a QP may ask for. Inline costs this device nothing: a request
/// leaves for the socket from the application's buffer during `ibv_post_send` (only what
/// the socket does not take then is copied), which is the zero-copy path rsockets take
/// for messages up to the QP's inline size (ours asks for this much on the soft fabric).
pub const MAX_INLINE: u32 = 64 << 10;
/// An RC/UC QP is granted what it asks, and at least this much per send SGE: rxe's rule
/// (its WQE holds either the SGEs or the inline data). Never more: UCX sends a message
/// inline whenever it fits the granted size, and its peer's receive buffers are 8 KiB.
const INLINE_PER_SGE: u32 = 16;
/// READs/atomics a QP may be given (`max_rd_atomic`, `max_dest_rd_atomic`): rxe's value,
/// so that a peer that sets a QP's `max_rd_atomic` from rxe's device attributes (perftest
/// does) is accepted.
pub const MAX_RD_ATOM: u8 = 128;
/// READs/atomics a requester keeps in flight at most, whatever its `max_rd_atomic` (a QP
/// may always have fewer outstanding): the stream path's responder bounds the responses it
/// queues for a peer at this many (`net::engine`), which a peer of ours then never exceeds.
pub const RD_IN_FLIGHT: u32 = 16;

/// A send WQE on the requester's queue.
pub struct SendWqe {
    pub wr_id: u64,
    pub wc_opcode: ibv_wc_opcode,
    pub signaled: bool,
    /// The encoded request (header + payload) until transmitted.
    pub frame: Option<Vec<u8>>,
    /// Or: the request header, its payload to be read from `local` at transmission.
    pub gather: Option<Header>,
    /// `local` names the application's inline buffers, readable only until `ibv_post_send`
    /// returns (no key check); whatever was not transmitted by then is copied.
    pub borrowed: bool,
    pub psn: u32,
    /// Local scatter list for READ/atomic results (or the SEND/WRITE gather list).
    pub local: Vec<ibv_sge>,
    pub len: u32,
    /// READ or atomic: uses one of `max_rd_atomic` slots while in flight.
    pub rd_atomic: bool,
    /// Failed before transmission (completes with this status in order).
    pub fail: Option<ibv_wc_status>,
}

/// A request parked at the responder (arrived before RTR, or waiting for a receive).
/// Its link counts it from [`Parked::new`] until it is dropped (`Link::parked`), so every
/// way out of the queue (executed, NAKed, its link down, the QP in ERR, reset or
/// destroyed) lets a link paused for it resume.
pub struct Parked {
    pub h: Header,
    pub payload: Vec<u8>,
    pub link: Arc<dyn Link>,
    pub deadline: Option<std::time::Instant>,
}

impl Parked {
    pub fn new(h: Header, payload: Vec<u8>, link: Arc<dyn Link>) -> Parked {
        link.parked(payload.len(), true);
        Parked { h, payload, link, deadline: None }
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        self.link.parked(self.payload.len(), false);
    }
}

pub struct QpState {
    pub state: ibv_qp_state,
    pub attr: ibv_qp_attr,
    /// Send queue: in-flight WQEs first (`sent` of them), then not yet transmitted ones.
    pub sq: VecDeque<SendWqe>,
    pub sent: usize,
    pub rd_in_flight: u32,
    /// Payload bytes of transmitted SEND/WRITE requests not yet acknowledged.
    pub bytes_in_flight: usize,
    pub next_psn: u32,
    pub rq: VecDeque<RecvWqe>,
    pub out: Option<Arc<dyn Link>>,
    pub inbound: VecDeque<Parked>,
    /// Inbound links that named this QP (closed on reset/destroy).
    pub in_links: Vec<Weak<dyn Link>>,
    /// Multicast groups joined (gid → registry entry).
    pub mcast: Vec<([u8; 16], Option<RegFile>)>,
    /// Inbound links we sent a NAK on: their later requests are dropped.
    pub nakked: Vec<Weak<dyn Link>>,
    /// UD datagrams that found no receive posted, oldest first, and their payload bytes
    /// (`ud::BACKLOG_BYTES` at most): delivered by the next `ibv_post_recv`.
    pub ud_backlog: VecDeque<(Header, Vec<u8>)>,
    pub ud_backlog_bytes: usize,
    pub destroyed: bool,
}

#[repr(C)]
pub struct Qp {
    pub c: UnsafeCell<ibv_qp>,
    pub ctx: Arc<Context>,
    pub pd: Arc<Pd>,
    pub send_cq: Arc<Cq>,
    pub recv_cq: Arc<Cq>,
    pub srq: Option<Arc<Srq>>,
    pub qpn: u32,
    pub kind: Kind,
    pub qp_type: ibv_qp_type,
    pub sq_sig_all: bool,
    pub create_flags: u32,
    pub cap: ibv_qp_cap,
    pub st: Mutex<QpState>,
    pub events: EventCounts,
    pub me: Weak<Qp>,
    _qpn_file: Option<RegFile>,
}

// SAFETY: the C struct's `state` is written only under `st`'s lock by our functions; the
// rest is written before publication. Other fields are Sync.
unsafe impl Sync for Qp {}
// SAFETY: see Sync.
unsafe impl Send for Qp {}

/// What `ibv_create_qp(_ex)` asked for.
pub struct CreateArgs {
    pub qp_context: *mut libc::c_void,
    pub send_cq: Arc<Cq>,
    pub recv_cq: Arc<Cq>,
    pub srq: Option<Arc<Srq>>,
    pub cap: ibv_qp_cap,
    pub qp_type: ibv_qp_type,
    pub sq_sig_all: bool,
    pub create_flags: u32,
}

impl Qp {
    pub fn create(pd: &Arc<Pd>, a: CreateArgs) -> Result<Arc<Qp>> {
        let kind = state::kind(a.qp_type).ok_or(Errno::EOPNOTSUPP)?;
        if !Arc::ptr_eq(&a.send_cq.ctx, &pd.ctx) || !Arc::ptr_eq(&a.recv_cq.ctx, &pd.ctx) {
            return Err(Errno::EINVAL);
        }
        if a.create_flags & !IBV_QP_CREATE_BLOCK_SELF_MCAST_LB != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        let c = &a.cap;
        if c.max_send_wr > MAX_QP_WR
            || c.max_send_sge > MAX_SGE
            || c.max_inline_data > MAX_INLINE
            || (a.srq.is_none() && (c.max_recv_wr > MAX_QP_WR || c.max_recv_sge > MAX_SGE))
        {
            return Err(Errno::EINVAL);
        }
        let cap = ibv_qp_cap {
            max_send_wr: c.max_send_wr.max(1),
            max_recv_wr: if a.srq.is_some() { 0 } else { c.max_recv_wr.max(1) },
            max_send_sge: c.max_send_sge.max(1),
            max_recv_sge: if a.srq.is_some() { 0 } else { c.max_recv_sge.max(1) },
            max_inline_data: if kind == Kind::Ud {
                c.max_inline_data.max(MIN_INLINE)
            } else {
                c.max_inline_data.max(c.max_send_sge.max(1) * INLINE_PER_SGE)
            },
        };
        let (qpn, file) = crate::net::peers::alloc_qpn(pd.ctx.port());
        // SAFETY: ibv_qp is plain data; all-zero is valid (pthread objects included).
        let mut cq: ibv_qp = unsafe { std::mem::zeroed() };
        cq.context = pd.ctx.ibv();
        cq.qp_context = a.qp_context;
        cq.pd = pd.ibv();
        cq.send_cq = a.send_cq.ibv();
        cq.recv_cq = a.recv_cq.ibv();
        cq.srq = a.srq.as_ref().map(|s| s.ibv()).unwrap_or(std::ptr::null_mut());
        cq.handle = qpn;
        cq.qp_num = qpn;
        cq.state = IBV_QPS_RESET;
        cq.qp_type = a.qp_type;
        // SAFETY: ibv_qp_attr is plain data.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.cap = cap;
        attr.port_num = 1;
        attr.path_mtu = IBV_MTU_4096;
        let qp = Arc::new_cyclic(|me| Qp {
            c: UnsafeCell::new(cq),
            ctx: pd.ctx.clone(),
            pd: pd.clone(),
            send_cq: a.send_cq.clone(),
            recv_cq: a.recv_cq.clone(),
            srq: a.srq.clone(),
            qpn,
            kind,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
            create_flags: a.create_flags,
            cap,
            st: Mutex::new(QpState {
                state: IBV_QPS_RESET,
                attr,
                sq: VecDeque::new(),
                sent: 0,
                rd_in_flight: 0,
                bytes_in_flight: 0,
                next_psn: 0,
                rq: VecDeque::new(),
                out: None,
                inbound: VecDeque::new(),
                in_links: Vec::new(),
                mcast: Vec::new(),
                nakked: Vec::new(),
                ud_backlog: VecDeque::new(),
                ud_backlog_bytes: 0,
                destroyed: false,
            }),
            events: EventCounts::default(),
            me: me.clone(),
            _qpn_file: file,
        });
        pd.users.fetch_add(1, Ordering::SeqCst);
        a.send_cq.users.fetch_add(1, Ordering::SeqCst);
        a.recv_cq.users.fetch_add(1, Ordering::SeqCst);
        if let Some(s) = &a.srq {
            s.users.fetch_add(1, Ordering::SeqCst);
        }
        lock(&pd.ctx.qps).insert(qpn, Arc::downgrade(&qp));
        Ok(qp)
    }

    pub fn ibv(&self) -> *mut ibv_qp {
        self.c.get()
    }

    fn set_c_state(&self, s: ibv_qp_state) {
        // SAFETY: `state` of our own C struct; written under st's lock, the app only reads.
        unsafe { (*self.c.get()).state = s };
    }

    /// `ibv_modify_qp`.
    pub fn modify(&self, attr: &ibv_qp_attr, mask: u32) -> Result<()> {
        if mask & IBV_QP_STATE != 0 && matches!(attr.qp_state, IBV_QPS_ERR | IBV_QPS_RESET) {
            self.release_held();
        }
        let mut st = lock(&self.st);
        let r = self.modify_locked(&mut st, attr, mask);
        self.publish(&st);
        r
    }

    /// Sends the responses (ACKs) a polling thread of this context held back to ride on
    /// its next request: a NIC sends them as it receives, and a QP taken down now (by
    /// rdma_disconnect, or destroyed) would otherwise leave the peer's last SEND unacked,
    /// to fail once the link closes (fi_pingpong's server: ECANCELED after its last "fin").
    fn release_held(&self) {
        if let Some(n) = self.ctx.net() {
            n.kick();
        }
    }

    /// Tells same-host peers what they may do to this QP directly (`core::window`).
    fn publish(&self, st: &QpState) {
        if self.kind == Kind::Ud {
            return;
        }
        let serving = !st.destroyed && matches!(st.state, IBV_QPS_RTR | IBV_QPS_RTS | IBV_QPS_SQD | IBV_QPS_SQE);
        let access = st.attr.qp_access_flags;
        let mut flags = 0;
        if serving && access & IBV_ACCESS_REMOTE_WRITE != 0 {
            flags |= window::QP_WRITE;
        }
        if serving && self.kind == Kind::Rc && access & IBV_ACCESS_REMOTE_READ != 0 && st.attr.max_dest_rd_atomic > 0 {
            flags |= window::QP_READ;
        }
        if st.destroyed {
            window::withdraw_qp(self.qpn);
        } else {
            window::publish_qp(self.qpn, st.attr.dest_qp_num, self.pd.id, flags);
        }
    }

    fn modify_locked(&self, st: &mut QpState, attr: &ibv_qp_attr, mask: u32) -> Result<()> {
        let lim = state::Limits { max_rd_atom: MAX_RD_ATOM };
        let next = state::check(st.state, self.kind, attr, mask, &lim).map_err(|_| Errno::EINVAL)?;
        let a = &mut st.attr;
        macro_rules! take {
            ($bit:expr, $($f:ident),+) => { if mask & $bit != 0 { $(a.$f = attr.$f;)+ } };
        }
        take!(IBV_QP_ACCESS_FLAGS, qp_access_flags);
        take!(IBV_QP_PKEY_INDEX, pkey_index);
        take!(IBV_QP_PORT, port_num);
        take!(IBV_QP_QKEY, qkey);
        take!(IBV_QP_AV, ah_attr);
        take!(IBV_QP_PATH_MTU, path_mtu);
        take!(IBV_QP_TIMEOUT, timeout);
        take!(IBV_QP_RETRY_CNT, retry_cnt);
        take!(IBV_QP_RNR_RETRY, rnr_retry);
        take!(IBV_QP_RQ_PSN, rq_psn);
        take!(IBV_QP_MAX_QP_RD_ATOMIC, max_rd_atomic);
        take!(IBV_QP_ALT_PATH, alt_ah_attr, alt_pkey_index, alt_port_num, alt_timeout);
        take!(IBV_QP_MIN_RNR_TIMER, min_rnr_timer);
        take!(IBV_QP_SQ_PSN, sq_psn);
        take!(IBV_QP_MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
        take!(IBV_QP_PATH_MIG_STATE, path_mig_state);
        take!(IBV_QP_DEST_QPN, dest_qp_num);
        take!(IBV_QP_EN_SQD_ASYNC_NOTIFY, en_sqd_async_notify);
        if mask & IBV_QP_SQ_PSN != 0 {
            st.next_psn = attr.sq_psn & 0x00ff_ffff;
        }
        let prev = st.state;
        if mask & IBV_QP_STATE == 0 || next == prev && next != IBV_QPS_RESET {
            if mask & IBV_QP_STATE != 0 {
                self.set_c_state(next);
            }
            return Ok(());
        }
        st.state = next;
        st.attr.qp_state = next;
        self.set_c_state(next);
        match next {
            IBV_QPS_RESET => self.reset(st),
            IBV_QPS_ERR => self.enter_error(st),
            IBV_QPS_RTR => responder::drain(self, st),
            IBV_QPS_RTS => {
                responder::drain(self, st);
                requester::pump(self, st);
            }
            IBV_QPS_SQD
                if st.attr.en_sqd_async_notify != 0 && st.sent == 0 => {
                    if let Some(me) = self.me.upgrade() {
                        self.ctx.raise(AsyncElem::Qp(me), IBV_EVENT_SQ_DRAINED);
                    }
                }
            _ => {}
        }
        Ok(())
    }

    /// Back to RESET: drop everything without completions.
    fn reset(&self, st: &mut QpState) {
        st.sq.clear();
        st.sent = 0;
        st.rd_in_flight = 0;
        st.bytes_in_flight = 0;
        st.rq.clear();
        st.ud_backlog.clear();
        st.ud_backlog_bytes = 0;
        if let Some(l) = st.out.take() {
            l.close();
        }
        for p in st.inbound.drain(..) {
            responder::nak_no_qp(&p.link, &p.h);
            if p.deadline.is_some() {
                self.ctx.rnr_timers.fetch_sub(1, Ordering::SeqCst);
            }
        }
        for l in st.in_links.drain(..).filter_map(|w| w.upgrade()) {
            l.close();
        }
        st.nakked.clear();
        // SAFETY: ibv_qp_attr is plain data.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.cap = self.cap;
        attr.port_num = 1;
        attr.path_mtu = IBV_MTU_4096;
        st.attr = attr;
    }

    /// Enter ERR: flush every WQE of both queues (signaled or not) with WR_FLUSH_ERR.
    pub fn enter_error(&self, st: &mut QpState) {
        st.state = IBV_QPS_ERR;
        st.attr.qp_state = IBV_QPS_ERR;
        self.set_c_state(IBV_QPS_ERR);
        if let Some(l) = st.out.take() {
            l.close();
        }
        for w in st.sq.drain(..) {
            let mut c = wc(w.wr_id, IBV_WC_WR_FLUSH_ERR, w.wc_opcode, self.qpn);
            c.byte_len = 0;
            self.send_cq.push(c, false);
        }
        st.sent = 0;
        st.rd_in_flight = 0;
        st.bytes_in_flight = 0;
        for r in st.rq.drain(..) {
            self.recv_cq.push(wc(r.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, self.qpn), false);
        }
        st.ud_backlog.clear();
        st.ud_backlog_bytes = 0;
        for p in st.inbound.drain(..) {
            responder::nak_no_qp(&p.link, &p.h);
            if p.deadline.is_some() {
                self.ctx.rnr_timers.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.publish(st);
        if self.srq.is_some() {
            if let Some(me) = self.me.upgrade() {
                self.ctx.raise(AsyncElem::Qp(me), IBV_EVENT_QP_LAST_WQE_REACHED);
            }
        }
    }

    /// A fatal error on this QP (error completion already queued): go to ERR.
    pub fn fail(&self, st: &mut QpState) {
        if st.state != IBV_QPS_ERR {
            self.enter_error(st);
        }
    }

    pub fn query(&self) -> (ibv_qp_attr, ibv_qp_cap) {
        let st = lock(&self.st);
        let mut a = st.attr;
        a.qp_state = st.state;
        a.cur_qp_state = st.state;
        a.cap = self.cap;
        a.sq_draining = 0;
        (a, self.cap)
    }

    /// `ibv_post_recv`: returns the index of the first WR refused and why.
    pub fn post_recv(&self, wqes: Vec<RecvWqe>) -> std::result::Result<(), (usize, Errno)> {
        if self.srq.is_some() {
            return Err((0, Errno::EINVAL));
        }
        let mut st = lock(&self.st);
        if st.state == IBV_QPS_RESET {
            return Err((0, Errno::EINVAL));
        }
        for (i, w) in wqes.into_iter().enumerate() {
            if st.state == IBV_QPS_ERR {
                self.recv_cq.push(wc(w.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, self.qpn), false);
                continue;
            }
            if st.rq.len() >= self.cap.max_recv_wr as usize {
                return Err((i, Errno::ENOMEM));
            }
            st.rq.push_back(w);
        }
        if !st.inbound.is_empty() {
            responder::drain(self, &mut st);
        }
        if !st.ud_backlog.is_empty() {
            ud::deliver_backlog(self, &mut st);
        }
        Ok(())
    }

    /// Destroy: leave every table, close links, wait for acks of async events.
    pub fn destroy(self: &Arc<Qp>) {
        self.release_held();
        {
            let mut st = lock(&self.st);
            st.destroyed = true;
            self.reset(&mut st);
            st.mcast.clear();
            self.publish(&st);
        }
        lock(&self.ctx.qps).remove(&self.qpn);
        self.ctx.async_q.purge(|e| matches!(&e.elem, AsyncElem::Qp(q) if Arc::ptr_eq(q, self)));
        self.events.wait_acked();
        self.pd.users.fetch_sub(1, Ordering::SeqCst);
        self.send_cq.users.fetch_sub(1, Ordering::SeqCst);
        self.recv_cq.users.fetch_sub(1, Ordering::SeqCst);
        if let Some(s) = &self.srq {
            s.users.fetch_sub(1, Ordering::SeqCst);
        }
    }

    pub fn ack_async(&self) {
        let total = self.events.ack(1);
        // SAFETY: our own counter field; the app only reads it.
        unsafe { (*self.c.get()).events_completed = total as u32 };
    }
}

/// A random 24-bit PSN (for callers that want one).
pub fn random_psn() -> u32 {
    random_u32() & 0x00ff_ffff
}
