//! The RC/UC responder: executes requests from the peer in arrival order.
//!
//! Requests are queued per QP (`QpState::inbound`) and executed while the QP is in
//! RTR/RTS/SQD. A SEND (or WRITE_WITH_IMM) with no receive posted waits there — that is
//! RNR: with the requester's `rnr_retry` = 7 it waits forever; otherwise, after
//! `(rnr_retry + 1) × min_rnr_timer` the responder NAKs it (requester:
//! `IBV_WC_RNR_RETRY_EXC_ERR`). Remote accesses are executed only inside a registered MR
//! of the QP's PD whose rkey, bounds and access flags allow it (and the QP's own
//! `qp_access_flags`); otherwise a NAK (`IBV_WC_REM_ACCESS_ERR` at the requester) and
//! nothing is touched. After a NAK, later requests on that link are dropped.

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

pub fn on_request(qp: &Arc<Qp>, link: &Arc<dyn Link>, h: &Header, payload: Vec<u8>) {
    let mut st = lock(&qp.st);
    if nakked(&st, link) {
        return;
    }
    if st.destroyed || st.state == IBV_QPS_ERR || qp.kind == Kind::Ud {
        nak_no_qp(link, h);
        return;
    }
    st.inbound.push_back(Parked { h: *h, payload, link: link.clone(), deadline: None });
    drain(qp, &mut st);
}

enum Outcome {
    /// Send this response.
    Done(Vec<u8>),
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
fn execute(qp: &Qp, st: &mut QpState, p: &Parked) -> Result<Outcome, Syndrome> {
    let h = &p.h;
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
            if let Err(e) = mem::scatter(pd, &r.sges, &[&p.payload]) {
                c.status = local_status(e);
                qp.recv_cq.push(c, false);
                return Err(if e == LocalErr::Len { Syndrome::RemInvReq } else { Syndrome::RemOp });
            }
            c.byte_len = p.payload.len() as u32;
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
            if mem::remote_write(pd, h.rkey, h.raddr, &p.payload).is_err() {
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
                c.byte_len = p.payload.len() as u32;
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
            match mem::remote_read(pd, h.rkey, h.raddr, h.aux) {
                Ok(data) => Ok(Outcome::Done(response(Op::ReadResp, h, Syndrome::Ok).frame(&data))),
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
    let before = st.inbound.len();
    let mut timers = 0;
    st.inbound.retain(|p| {
        let same = Arc::ptr_eq(&p.link, link);
        if same && p.deadline.is_some() {
            timers += 1;
        }
        !same
    });
    let _ = before;
    if timers > 0 {
        qp.ctx.rnr_timers.fetch_sub(timers, Ordering::SeqCst);
    }
}

fn nak(qp: &Qp, st: &mut QpState, p: &Parked, syn: Syndrome) {
    p.link.send(response(Op::Ack, &p.h, syn).frame(&[]));
    st.nakked.retain(|w| w.strong_count() > 0);
    st.nakked.push(Arc::downgrade(&p.link));
    forget_link(qp, st, &p.link);
}

/// Executes parked requests while possible.
pub fn drain(qp: &Qp, st: &mut QpState) {
    loop {
        match st.state {
            IBV_QPS_RTR | IBV_QPS_RTS | IBV_QPS_SQD | IBV_QPS_SQE => {}
            _ => return,
        }
        let Some(p) = st.inbound.pop_front() else { return };
        if p.link.is_dead() || nakked(st, &p.link) {
            if p.deadline.is_some() {
                qp.ctx.rnr_timers.fetch_sub(1, Ordering::SeqCst);
            }
            continue;
        }
        if p.h.src_qpn != st.attr.dest_qp_num & 0x00ff_ffff {
            nak_no_qp(&p.link, &p.h);
            if p.deadline.is_some() {
                qp.ctx.rnr_timers.fetch_sub(1, Ordering::SeqCst);
            }
            continue;
        }
        match execute(qp, st, &p) {
            Ok(Outcome::Done(resp)) => {
                if p.deadline.is_some() {
                    qp.ctx.rnr_timers.fetch_sub(1, Ordering::SeqCst);
                }
                p.link.send(resp);
            }
            Ok(Outcome::Silent) => {
                if p.deadline.is_some() {
                    qp.ctx.rnr_timers.fetch_sub(1, Ordering::SeqCst);
                }
                p.link.send(response(Op::Ack, &p.h, Syndrome::Ok).frame(&[]));
            }
            Ok(Outcome::Nak(syn)) => {
                if p.deadline.is_some() {
                    qp.ctx.rnr_timers.fetch_sub(1, Ordering::SeqCst);
                }
                nak(qp, st, &p, syn);
            }
            Ok(Outcome::NoRecv) => {
                let mut p = p;
                if p.deadline.is_none() && p.h.rnr_retry < 7 {
                    let us = rnr_timer_us(st.attr.min_rnr_timer) * (p.h.rnr_retry as u64 + 1);
                    p.deadline = Some(Instant::now() + Duration::from_micros(us));
                    qp.ctx.rnr_timers.fetch_add(1, Ordering::SeqCst);
                }
                st.inbound.push_front(p);
                return;
            }
            Err(syn) => {
                if p.deadline.is_some() {
                    qp.ctx.rnr_timers.fetch_sub(1, Ordering::SeqCst);
                }
                p.link.send(response(Op::Ack, &p.h, syn).frame(&[]));
                qp.fail(st);
                return;
            }
        }
    }
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
            nak(&qp, &mut st, &p, Syndrome::RnrExceeded);
            drain(&qp, &mut st);
        }
    }
}

/// An inbound link went away: drop its parked requests.
pub fn on_link_down(qp: &Arc<Qp>, link: &Arc<dyn Link>) {
    let mut st = lock(&qp.st);
    forget_link(qp, &mut st, link);
    let w = Arc::downgrade(link);
    st.in_links.retain(|x| !x.ptr_eq(&w) && x.strong_count() > 0);
    st.nakked.retain(|x| !x.ptr_eq(&w) && x.strong_count() > 0);
}
