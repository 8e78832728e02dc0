//! The RC/UC responder: executes requests from the peer in arrival order.
//!
//! Requests are queued per QP (`QpState::inbound`) and executed while the QP is in
//! RTR/RTS/SQD. A SEND (or WRITE_WITH_IMM) with no receive posted waits there — that is
//! RNR: with the requester's `rnr_retry` = 7 it waits forever; otherwise, after
//! `(rnr_retry + 1) × min_rnr_timer` the responder NAKs it (requester:
//! `IBV_WC_RNR_RETRY_EXC_ERR`). Over a link whose peer retransmits (RoCEv2) it is instead
//! dropped with an RNR NAK, as an RNIC does (`Link::refuse_rnr`). Remote accesses are
//! executed only inside a registered MR of the QP's PD whose rkey, bounds and access
//! flags allow it (and the QP's own `qp_access_flags`); otherwise a NAK (`IBV_WC_REM_ACCESS_ERR` at the requester) and
//! nothing is touched. After a NAK, later requests on that link are dropped.
//!
//! Unlike an RNIC, which drops what it cannot take and lets the requester retry, a request
//! that waits here is kept (nothing over TCP would retransmit it); its link counts it while
//! it waits (`Parked`), and the engine stops reading a link whose parked requests exceed a
//! bound until they drain.

use super::{Parked, Qp, QpState};
use crate::core::cq::wc;
use crate::core::mem::{self, LocalErr};
use crate::core::registry::lock;
use crate::core::srq::RecvWqe;
use crate::net::frame::{Header, Op, Syndrome, F_IMM, F_SOLICITED};
use crate::net::Link;
use crate::qp::state::{rnr_timer_us, Kind};
use rdma_abi::verbs::*;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn response(op: Op, req: &Header, syn: Syndrome) -> Header {
    let mut h = Header::new(op);
    h.dst_qpn = req.src_qpn;
    h.src_qpn = req.dst_qpn;
    h.psn = req.psn;
    h.syndrome = syn;
    h
}

/// Answers a request whose QP does not exist (or is in RESET/ERR).
pub fn nak_no_qp(link: &Arc<dyn Link>, req: &Header) {
    if req.op.is_request() {
        link.send(response(Op::Ack, req, Syndrome::NoQp).frame(&[]));
    }
}

pub fn on_hello(qp: &Arc<Qp>, link: &Arc<dyn Link>, _h: &Header) {
    let mut st = lock(&qp.st);
    st.in_links.retain(|w| w.strong_count() > 0);
    st.in_links.push(Arc::downgrade(link));
}

fn nakked(st: &QpState, link: &Arc<dyn Link>) -> bool {
    let w = Arc::downgrade(link);
    st.nakked.iter().any(|x| x.ptr_eq(&w))
}

/// Whether the responder executes requests in this state.
fn serving(st: &QpState) -> bool {
    matches!(st.state, IBV_QPS_RTR | IBV_QPS_RTS | IBV_QPS_SQD | IBV_QPS_SQE)
}

pub fn on_request(qp: &Arc<Qp>, link: &Arc<dyn Link>, h: &Header, payload: &[u8]) {
    let mut st = lock(&qp.st);
    if nakked(&st, link) {
        return;
    }
    if st.destroyed || st.state == IBV_QPS_ERR || qp.kind == Kind::Ud {
        nak_no_qp(link, h);
        return;
    }
    if st.inbound.is_empty() && serving(&st) {
        // Nothing parked ahead of it: execute straight from the receive buffer.
        if let Step::Park = step(qp, &mut st, h, payload, link, false) {
            park_front(qp, &mut st, Parked::new(*h, payload.to_vec(), link.clone()));
        }
        return;
    }
    st.inbound.push_back(Parked::new(*h, payload.to_vec(), link.clone()));
    drain(qp, &mut st);
}

enum Outcome {
    /// Send this response.
    Done(Vec<u8>),
    /// The response was sent already.
    Sent,
    /// No receive posted: wait.
    NoRecv,
    /// NAK and drop the link's later requests.
    Nak(Syndrome),
    /// Nothing to send (UC drop).
    Silent,
}

fn take_recv(qp: &Qp, st: &mut QpState) -> Option<RecvWqe> {
    match &qp.srq {
        Some(s) => s.take(Some(qp.me.clone())),
        None => st.rq.pop_front(),
    }
}

fn local_status(e: LocalErr) -> ibv_wc_status {
    match e {
        LocalErr::Len => IBV_WC_LOC_LEN_ERR,
        LocalErr::Prot => IBV_WC_LOC_PROT_ERR,
    }
}

/// Executes one request. `Err(status)` = a local error at the responder: its receive
/// completed with `status`; the QP must go to ERR and the requester gets a NAK.
fn execute(qp: &Qp, st: &mut QpState, h: &Header, payload: &[u8], link: &Arc<dyn Link>) -> Result<Outcome, Syndrome> {
    let access = st.attr.qp_access_flags;
    let pd = qp.pd.id;
    let rd_ok = st.attr.max_dest_rd_atomic > 0;
    match h.op {
        Op::Send => {
            let Some(r) = take_recv(qp, st) else {
                return Ok(if qp.kind == Kind::Uc { Outcome::Silent } else { Outcome::NoRecv });
            };
            let mut c = wc(r.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, qp.qpn);
            c.src_qp = h.src_qpn;
            c.slid = h.src_lid;
            if let Err(e) = mem::scatter(pd, &r.sges, &[payload]) {
                c.status = local_status(e);
                qp.recv_cq.push(c, false);
                return Err(if e == LocalErr::Len { Syndrome::RemInvReq } else { Syndrome::RemOp });
            }
            c.byte_len = payload.len() as u32;
            if h.flags & F_IMM != 0 {
                c.wc_flags |= IBV_WC_WITH_IMM;
                c.imm_data = h.imm;
            }
            qp.recv_cq.push(c, h.flags & F_SOLICITED != 0);
            Ok(Outcome::Done(response(Op::Ack, h, Syndrome::Ok).frame(&[])))
        }
        Op::Write => {
            if access & IBV_ACCESS_REMOTE_WRITE == 0 {
                return Ok(Outcome::Nak(Syndrome::RemAccess));
            }
            let with_imm = h.flags & F_IMM != 0;
            let r = if with_imm {
                match take_recv(qp, st) {
                    Some(r) => Some(r),
                    None => return Ok(if qp.kind == Kind::Uc { Outcome::Silent } else { Outcome::NoRecv }),
                }
            } else {
                None
            };
            if mem::remote_write(pd, h.rkey, h.raddr, payload).is_err() {
                if let Some(r) = r {
                    // The receive was not consumed by a successful write: give it back.
                    match &qp.srq {
                        Some(_) => {
                            let mut c = wc(r.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV_RDMA_WITH_IMM, qp.qpn);
                            c.src_qp = h.src_qpn;
                            qp.recv_cq.push(c, false);
                        }
                        None => st.rq.push_front(r),
                    }
                }
                return Ok(Outcome::Nak(Syndrome::RemAccess));
            }
            if let Some(r) = r {
                let mut c = wc(r.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, qp.qpn);
                c.byte_len = payload.len() as u32;
                c.wc_flags = IBV_WC_WITH_IMM;
                c.imm_data = h.imm;
                c.src_qp = h.src_qpn;
                c.slid = h.src_lid;
                qp.recv_cq.push(c, h.flags & F_SOLICITED != 0);
            }
            Ok(Outcome::Done(response(Op::Ack, h, Syndrome::Ok).frame(&[])))
        }
        Op::ReadReq => {
            if qp.kind != Kind::Rc || !rd_ok {
                return Ok(Outcome::Nak(Syndrome::RemInvReq));
            }
            if access & IBV_ACCESS_REMOTE_READ == 0 {
                return Ok(Outcome::Nak(Syndrome::RemAccess));
            }
            let mut resp = response(Op::ReadResp, h, Syndrome::Ok);
            if h.aux == 0 {
                return Ok(Outcome::Done(resp.frame(&[])));
            }
            resp.payload_len = h.aux as u32;
            let hdr = resp.to_bytes();
            // The response leaves straight from the MR (under the key lock).
            let sent = mem::with_remote(pd, h.rkey, h.raddr, h.aux, IBV_ACCESS_REMOTE_READ, |src| {
                // SAFETY: src..src+aux is inside the checked MR while the lock is held.
                let data = unsafe { std::slice::from_raw_parts(src as *const u8, h.aux as usize) };
                link.send_parts(&[&hdr, data]);
            });
            match sent {
                Ok(()) => Ok(Outcome::Sent),
                Err(_) => Ok(Outcome::Nak(Syndrome::RemAccess)),
            }
        }
        Op::CmpSwap | Op::FetchAdd => {
            if qp.kind != Kind::Rc || !rd_ok {
                return Ok(Outcome::Nak(Syndrome::RemInvReq));
            }
            if access & IBV_ACCESS_REMOTE_ATOMIC == 0 {
                return Ok(Outcome::Nak(Syndrome::RemAccess));
            }
            let swap = (h.op == Op::CmpSwap).then_some(h.aux2);
            match mem::remote_atomic(pd, h.rkey, h.raddr, h.aux, swap) {
                Ok(orig) => Ok(Outcome::Done(response(Op::AtomicResp, h, Syndrome::Ok).frame(&orig.to_be_bytes()))),
                Err(_) => Ok(Outcome::Nak(Syndrome::RemAccess)),
            }
        }
        _ => Ok(Outcome::Nak(Syndrome::RemInvReq)),
    }
}

fn forget_link(qp: &Qp, st: &mut QpState, link: &Arc<dyn Link>) {
    let mut timers = 0;
    st.inbound.retain(|p| {
        let same = Arc::ptr_eq(&p.link, link);
        if same && p.deadline.is_some() {
            timers += 1;
        }
        !same
    });
    if timers > 0 {
        qp.ctx.rnr_timers.fetch_sub(timers, Ordering::SeqCst);
    }
}

fn nak(qp: &Qp, st: &mut QpState, link: &Arc<dyn Link>, h: &Header, syn: Syndrome) {
    link.send(response(Op::Ack, h, syn).frame(&[]));
    st.nakked.retain(|w| w.strong_count() > 0);
    st.nakked.push(Arc::downgrade(link));
    forget_link(qp, st, link);
}

enum Step {
    /// Handled; go on with the next request.
    Next,
    /// Handled; the QP failed.
    Stop,
    /// No receive: the request must wait (at the front).
    Park,
}

/// Runs one request whose turn it is. `timed`: it held an RNR deadline (released here
/// unless it parks again).
fn step(qp: &Qp, st: &mut QpState, h: &Header, payload: &[u8], link: &Arc<dyn Link>, timed: bool) -> Step {
    let release = |qp: &Qp| {
        if timed {
            qp.ctx.rnr_timers.fetch_sub(1, Ordering::SeqCst);
        }
    };
    if link.is_dead() || nakked(st, link) {
        release(qp);
        return Step::Next;
    }
    if h.src_qpn != st.attr.dest_qp_num & 0x00ff_ffff {
        nak_no_qp(link, h);
        release(qp);
        return Step::Next;
    }
    match execute(qp, st, h, payload, link) {
        Ok(Outcome::Done(resp)) => {
            release(qp);
            link.send(resp);
            Step::Next
        }
        Ok(Outcome::Sent) => {
            release(qp);
            Step::Next
        }
        Ok(Outcome::Silent) => {
            release(qp);
            link.send(response(Op::Ack, h, Syndrome::Ok).frame(&[]));
            Step::Next
        }
        Ok(Outcome::Nak(syn)) => {
            release(qp);
            nak(qp, st, link, h, syn);
            Step::Next
        }
        Ok(Outcome::NoRecv) if link.refuse_rnr(h, payload, st.attr.min_rnr_timer) => {
            // The requester sends it again after the RNR timer; the link's later requests,
            // which it sends again too, must not run before it.
            release(qp);
            forget_link(qp, st, link);
            Step::Next
        }
        Ok(Outcome::NoRecv) => Step::Park,
        Err(syn) => {
            release(qp);
            link.send(response(Op::Ack, h, syn).frame(&[]));
            qp.fail(st);
            Step::Stop
        }
    }
}

/// Parks `p` at the front of the inbound queue, starting its RNR clock if it has a
/// finite budget and none yet.
fn park_front(qp: &Qp, st: &mut QpState, mut p: Parked) {
    if p.deadline.is_none() && p.h.rnr_retry < 7 {
        let us = rnr_timer_us(st.attr.min_rnr_timer) * (p.h.rnr_retry as u64 + 1);
        p.deadline = Some(Instant::now() + Duration::from_micros(us));
        qp.ctx.rnr_timers.fetch_add(1, Ordering::SeqCst);
    }
    st.inbound.push_front(p);
}

/// Executes parked requests while possible: not while the link of the next one is
/// congested (its peer does not read the responses; requests parked before RTR or behind
/// an RNR wait could otherwise answer with any number of READ responses at once).
pub fn drain(qp: &Qp, st: &mut QpState) {
    loop {
        if !serving(st) {
            return;
        }
        if st.inbound.front().is_some_and(|p| p.link.congested() && !p.link.is_dead()) {
            return;
        }
        let Some(p) = st.inbound.pop_front() else { return };
        match step(qp, st, &p.h, &p.payload, &p.link, p.deadline.is_some()) {
            Step::Next => {}
            Step::Stop => return,
            Step::Park => {
                // A request that parks again keeps its RNR clock.
                park_front(qp, st, p);
                return;
            }
        }
    }
}

/// Direct WRITE placement (the engine receives a large WRITE's payload straight into the
/// target MR): may this WRITE (header only so far) start now? Exactly the checks its
/// execution would make, so a refused one takes the ordinary path (and gets its NAK or
/// waits for a receive there). With an immediate it needs a posted receive of its own QP
/// (not an SRQ's, which other QPs may take meanwhile): this link's later requests cannot
/// run before it finishes, so that receive is still there when it does.
pub fn begin_direct(qp: &Arc<Qp>, link: &Arc<dyn Link>, h: &Header) -> bool {
    let st = lock(&qp.st);
    let recv_ok = h.flags & F_IMM == 0 || (qp.srq.is_none() && !st.rq.is_empty());
    !st.destroyed
        && serving(&st)
        && qp.kind != Kind::Ud
        && recv_ok
        && st.inbound.is_empty()
        && !link.is_dead()
        && !nakked(&st, link)
        && h.src_qpn == st.attr.dest_qp_num & 0x00ff_ffff
        && st.attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE != 0
        && mem::with_remote(qp.pd.id, h.rkey, h.raddr, h.payload_len as u64, IBV_ACCESS_REMOTE_WRITE, |_| ()).is_ok()
}

/// Still allowed to place (QP serving, MR still registered with the access): the whole
/// target range is re-checked under the key lock each time, so `ibv_dereg_mr` and ERR stop
/// the placement.
fn direct_target<R>(qp: &Qp, h: &Header, f: impl FnOnce(*mut u8) -> R) -> Option<R> {
    {
        let st = lock(&qp.st);
        if st.destroyed || !serving(&st) {
            return None;
        }
    }
    mem::with_remote(qp.pd.id, h.rkey, h.raddr, h.payload_len as u64, IBV_ACCESS_REMOTE_WRITE, f).ok()
}

/// Copies payload bytes `[off, off+data.len())` of a direct WRITE into place.
pub fn place_direct(qp: &Qp, h: &Header, off: usize, data: &[u8]) -> bool {
    if data.is_empty() {
        return direct_target(qp, h, |_| ()).is_some();
    }
    direct_target(qp, h, |dst| {
        // SAFETY: off + data.len() ≤ payload_len, and the whole payload range was checked.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst.add(off), data.len()) }
    })
    .is_some()
}

/// Receives up to `want` payload bytes at offset `off` of a direct WRITE with `recv`
/// (called with the destination while the key lock is held). None: no longer allowed.
pub fn recv_direct(qp: &Qp, h: &Header, off: usize, want: usize, recv: &mut dyn FnMut(*mut u8, usize) -> isize) -> Option<isize> {
    // SAFETY (of the pointer arithmetic): off + want ≤ payload_len, inside the checked range.
    direct_target(qp, h, |dst| recv(unsafe { dst.add(off) }, want))
}

/// The direct WRITE's payload is all in (`ok`) or was discarded after access was lost.
pub fn finish_direct(qp: &Arc<Qp>, link: &Arc<dyn Link>, h: &Header, ok: bool) {
    let mut st = lock(&qp.st);
    if link.is_dead() || nakked(&st, link) {
        return;
    }
    if st.destroyed || st.state == IBV_QPS_ERR || !serving(&st) {
        nak_no_qp(link, h);
        return;
    }
    if !ok {
        nak(qp, &mut st, link, h, Syndrome::RemAccess);
        return;
    }
    if h.flags & F_IMM != 0 {
        let Some(r) = take_recv(qp, &mut st) else {
            // Not expected (see `begin_direct`); should it happen, the request waits for a
            // receive like any other, carrying the payload already in place (rewriting the
            // same bytes then).
            let len = h.payload_len as usize;
            let payload = mem::with_remote(qp.pd.id, h.rkey, h.raddr, len as u64, IBV_ACCESS_REMOTE_WRITE, |p| {
                // SAFETY: p..p+len is inside the checked MR while the key lock is held.
                unsafe { std::slice::from_raw_parts(p as *const u8, len) }.to_vec()
            })
            .unwrap_or_default();
            st.inbound.push_back(Parked::new(*h, payload, link.clone()));
            drain(qp, &mut st);
            return;
        };
        let mut c = wc(r.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, qp.qpn);
        c.byte_len = h.payload_len;
        c.wc_flags = IBV_WC_WITH_IMM;
        c.imm_data = h.imm;
        c.src_qp = h.src_qpn;
        c.slid = h.src_lid;
        qp.recv_cq.push(c, h.flags & F_SOLICITED != 0);
    }
    link.send(response(Op::Ack, h, Syndrome::Ok).frame(&[]));
}

/// Progress-thread tick: NAK requests whose RNR budget ran out.
pub fn tick(ctx: &Arc<crate::core::context::Context>) {
    let qps: Vec<Arc<Qp>> = lock(&ctx.qps).values().filter_map(|w| w.upgrade()).collect();
    let now = Instant::now();
    for qp in qps {
        let mut st = lock(&qp.st);
        let expired = matches!(st.inbound.front(), Some(p) if p.deadline.is_some_and(|d| d <= now));
        if !expired {
            continue;
        }
        if let Some(p) = st.inbound.pop_front() {
            qp.ctx.rnr_timers.fetch_sub(1, Ordering::SeqCst);
            nak(&qp, &mut st, &p.link, &p.h, Syndrome::RnrExceeded);
            drain(&qp, &mut st);
        }
    }
}

/// An inbound link went away: drop its parked requests (the rest may run now, if they
/// waited behind a congested one).
pub fn on_link_down(qp: &Arc<Qp>, link: &Arc<dyn Link>) {
    let mut st = lock(&qp.st);
    forget_link(qp, &mut st, link);
    let w = Arc::downgrade(link);
    st.in_links.retain(|x| !x.ptr_eq(&w) && x.strong_count() > 0);
    st.nakked.retain(|x| !x.ptr_eq(&w) && x.strong_count() > 0);
    drain(qp, &mut st);
}

/// A link is no longer congested (`Link::congested`): run what waited for it.
pub fn resume(qp: &Qp) {
    let mut st = lock(&qp.st);
    drain(qp, &mut st);
}
