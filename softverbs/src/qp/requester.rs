//! The RC/UC requester: turns `ibv_send_wr`s into request frames, transmits them in order
//! over the QP's link (at most `max_rd_atomic` READ/atomic in flight), and completes them
//! in order as responses arrive. Any error completion moves the QP to ERR (which flushes
//! the rest).

use super::{direct, Qp, QpState, SendWqe};
use crate::core::cq::wc;
use crate::core::mem::{self, LocalErr};
use crate::net::frame::{Header, Op, Syndrome, F_IMM, F_SOLICITED, MAX_MSG, QPN_MASK};
use crate::net::Link;
use crate::roce;
use crate::qp::state::Kind;
use crate::sys::Errno;
use rdma_abi::verbs::*;
use std::sync::Arc;

/// Reads the scatter/gather list of a WR.
///
/// # Safety
/// `w.sg_list` must hold `w.num_sge` valid entries when `num_sge > 0`.
pub unsafe fn sges_of(w: &ibv_send_wr) -> Vec<ibv_sge> {
    if w.num_sge <= 0 || w.sg_list.is_null() {
        return Vec::new();
    }
    // SAFETY: caller guarantees sg_list holds num_sge entries.
    unsafe { std::slice::from_raw_parts(w.sg_list, w.num_sge as usize) }.to_vec()
}

/// The application's inline buffers, in place (no key check).
///
/// # Safety
/// Each SGE must describe memory of the application readable for `'a` (the verbs
/// contract: until `ibv_post_send` returns).
pub unsafe fn inline_parts<'a>(sges: &[ibv_sge]) -> Vec<&'a [u8]> {
    sges.iter()
        .filter(|s| s.length > 0 && s.addr != 0)
        // SAFETY: the caller (the application) vouches for [addr, addr+length).
        .map(|s| unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.length as usize) })
        .collect()
}

/// Copies inline data out of the application's buffers.
///
/// # Safety
/// As for [`inline_parts`].
pub unsafe fn inline_bytes(sges: &[ibv_sge]) -> Vec<u8> {
    // SAFETY: forwarded caller guarantee.
    unsafe { inline_parts(sges) }.concat()
}

fn wc_opcode(op: ibv_wr_opcode) -> ibv_wc_opcode {
    match op {
        IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM => IBV_WC_RDMA_WRITE,
        IBV_WR_RDMA_READ => IBV_WC_RDMA_READ,
        IBV_WR_ATOMIC_CMP_AND_SWP => IBV_WC_COMP_SWAP,
        IBV_WR_ATOMIC_FETCH_AND_ADD => IBV_WC_FETCH_ADD,
        _ => IBV_WC_SEND,
    }
}

/// Checks that do not depend on memory: `Err(errno)` refuses the WR at post time.
pub fn check_wr(qp: &Qp, w: &ibv_send_wr) -> Result<(), Errno> {
    if w.num_sge < 0 || w.num_sge as u32 > qp.cap.max_send_sge || (w.num_sge > 0 && w.sg_list.is_null()) {
        return Err(Errno::EINVAL);
    }
    let ok = match qp.kind {
        Kind::Rc => matches!(
            w.opcode,
            IBV_WR_SEND | IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM | IBV_WR_RDMA_READ | IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD
        ),
        Kind::Uc => matches!(w.opcode, IBV_WR_SEND | IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM),
        Kind::Ud => matches!(w.opcode, IBV_WR_SEND | IBV_WR_SEND_WITH_IMM),
    };
    if !ok {
        return Err(Errno::EINVAL);
    }
    if w.send_flags & IBV_SEND_INLINE != 0 && !matches!(w.opcode, IBV_WR_SEND | IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM) {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// `ibv_post_send` on an RC/UC QP.
///
/// # Safety
/// `wr` must be a valid NULL-terminated `ibv_send_wr` list (the verbs contract).
pub unsafe fn post(qp: &Arc<Qp>, wr: *mut ibv_send_wr) -> Result<(), (*mut ibv_send_wr, Errno)> {
    let mut st = crate::core::registry::lock(&qp.st);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: forwarded caller guarantee.
        let r = unsafe { queue(qp, &mut st, wr) };
        // The WRs before a refused one are posted: they leave now, as a full list would.
        if st.state == IBV_QPS_RTS {
            pump(qp, &mut st);
        }
        r
    }));
    // Inline payloads the socket did not take yet (also after a panic, which the export
    // boundary turns into an error: later pumps must not read the buffers): the buffers
    // go back to the application.
    let sent = st.sent;
    for w in st.sq.iter_mut().skip(sent).filter(|w| w.borrowed) {
        w.borrowed = false;
        if let Some(h) = w.gather.take() {
            // SAFETY: still inside ibv_post_send, the application's buffers are readable.
            w.frame = Some(h.frame_parts(&unsafe { inline_parts(&w.local) }));
        }
        w.local = Vec::new();
    }
    match r {
        Ok(r) => r,
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// Queues the WRs of `wr` in order; Err names the first one refused.
///
/// # Safety
/// As for [`post`].
unsafe fn queue(qp: &Qp, st: &mut QpState, mut wr: *mut ibv_send_wr) -> Result<(), (*mut ibv_send_wr, Errno)> {
    while !wr.is_null() {
        // SAFETY: caller guarantees a valid list.
        let w = unsafe { &*wr };
        match st.state {
            IBV_QPS_RTS | IBV_QPS_SQD | IBV_QPS_ERR => {}
            _ => return Err((wr, Errno::EINVAL)),
        }
        check_wr(qp, w).map_err(|e| (wr, e))?;
        if st.state == IBV_QPS_ERR {
            qp.send_cq.push(wc(w.wr_id, IBV_WC_WR_FLUSH_ERR, wc_opcode(w.opcode), qp.qpn), false);
            wr = w.next;
            continue;
        }
        if st.sq.len() >= qp.cap.max_send_wr as usize {
            return Err((wr, Errno::ENOMEM));
        }
        // SAFETY: check_wr verified sg_list/num_sge; the list is the caller's valid memory.
        let wqe = unsafe { build(qp, st, w) }.map_err(|e| (wr, e))?;
        st.sq.push_back(wqe);
        wr = w.next;
    }
    Ok(())
}

/// Builds the WQE (and its frame) for one WR.
///
/// # Safety
/// `w` must be a checked WR of the application.
unsafe fn build(qp: &Qp, st: &mut QpState, w: &ibv_send_wr) -> Result<SendWqe, Errno> {
    // SAFETY: forwarded caller guarantee.
    let sges = unsafe { sges_of(w) };
    let signaled = qp.sq_sig_all || w.send_flags & IBV_SEND_SIGNALED != 0;
    let psn = st.next_psn;
    st.next_psn = (st.next_psn + 1) & QPN_MASK;
    let mut h = Header::new(Op::Send);
    h.dst_qpn = st.attr.dest_qp_num & QPN_MASK;
    h.src_qpn = qp.qpn;
    h.psn = psn;
    h.rnr_retry = st.attr.rnr_retry.min(7);
    h.src_lid = qp.ctx.lid;
    let mut wqe = SendWqe {
        wr_id: w.wr_id,
        wc_opcode: wc_opcode(w.opcode),
        signaled,
        frame: None,
        gather: None,
        borrowed: false,
        psn,
        local: Vec::new(),
        len: 0,
        rd_atomic: false,
        fail: None,
    };
    if w.send_flags & IBV_SEND_SOLICITED != 0 {
        h.flags |= F_SOLICITED;
    }
    // SAFETY: reading the union member selected by the opcode of a valid WR.
    let (rdma, atomic) = unsafe { (w.wr.rdma, w.wr.atomic) };
    let mut gather = false;
    let payload: Vec<u8> = match w.opcode {
        IBV_WR_SEND | IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM => {
            h.op = if matches!(w.opcode, IBV_WR_SEND | IBV_WR_SEND_WITH_IMM) { Op::Send } else { Op::Write };
            if matches!(w.opcode, IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE_WITH_IMM) {
                h.flags |= F_IMM;
                h.imm = w.imm_data;
            }
            if h.op == Op::Write {
                h.rkey = rdma.rkey;
                h.raddr = rdma.remote_addr;
            }
            let total = mem::capacity(&sges);
            if w.send_flags & IBV_SEND_INLINE != 0 {
                if total > qp.cap.max_inline_data as u64 {
                    return Err(Errno::EINVAL);
                }
                // Transmitted from the application's buffers by `post` (or copied there).
                gather = true;
                wqe.borrowed = true;
                wqe.len = sges.iter().filter(|s| s.addr != 0).map(|s| s.length).sum();
                wqe.local = sges;
                Vec::new()
            } else if total > MAX_MSG as u64 {
                wqe.fail = Some(IBV_WC_LOC_LEN_ERR);
                Vec::new()
            } else {
                // Read from the registered memory at transmission (checked then, under
                // the key lock), straight into the socket.
                gather = true;
                wqe.len = total as u32;
                wqe.local = sges;
                Vec::new()
            }
        }
        IBV_WR_RDMA_READ => {
            h.op = Op::ReadReq;
            h.rkey = rdma.rkey;
            h.raddr = rdma.remote_addr;
            let total = mem::capacity(&sges);
            if total > MAX_MSG as u64 {
                wqe.fail = Some(IBV_WC_LOC_LEN_ERR);
            }
            h.aux = total.min(MAX_MSG as u64);
            wqe.rd_atomic = true;
            wqe.local = sges;
            Vec::new()
        }
        _ => {
            h.op = if w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP { Op::CmpSwap } else { Op::FetchAdd };
            h.rkey = atomic.rkey;
            h.raddr = atomic.remote_addr;
            h.aux = atomic.compare_add;
            h.aux2 = atomic.swap;
            if mem::capacity(&sges) < 8 {
                wqe.fail = Some(IBV_WC_LOC_LEN_ERR);
            }
            wqe.rd_atomic = true;
            wqe.local = sges;
            Vec::new()
        }
    };
    wqe.len = match h.op {
        Op::ReadReq => h.aux as u32,
        Op::CmpSwap | Op::FetchAdd => 8,
        _ if gather => wqe.len,
        _ => payload.len() as u32,
    };
    if wqe.fail.is_none() {
        if gather {
            h.payload_len = wqe.len;
            wqe.gather = Some(h);
        } else {
            wqe.frame = Some(h.frame(&payload));
        }
    }
    Ok(wqe)
}

/// Completes the head WQE with an error status and moves the QP to ERR.
fn fail_head(qp: &Qp, st: &mut QpState, status: ibv_wc_status) {
    if let Some(w) = st.sq.pop_front() {
        if st.sent > 0 {
            st.sent -= 1;
        }
        qp.send_cq.push(wc(w.wr_id, status, w.wc_opcode, qp.qpn), false);
    }
    qp.fail(st);
}

/// Opens the QP's link to its peer (resolved from the AV and destination QPN): a stream to
/// a soft-fabric endpoint, or a RoCEv2 connection (`roce::endpoint::choose`).
fn connect(qp: &Qp, st: &mut QpState) -> Option<Arc<dyn Link>> {
    let ah = st.attr.ah_attr;
    // SAFETY: reading the raw bytes of a plain-data union.
    let dgid = unsafe { ah.grh.dgid.raw };
    let dqpn = st.attr.dest_qp_num & QPN_MASK;
    // The peer QP already connected to us: send our requests back on its connection.
    let reuse = st.in_links.iter().filter_map(|w| w.upgrade()).find(|l| !l.is_dead() && l.peer_qpn() == Some(dqpn));
    if let Some(link) = reuse {
        link.bind_requester(st);
        st.out = Some(link.clone());
        return Some(link);
    }
    let sgid = qp.ctx.gid(ah.grh.sgid_index as usize).unwrap_or([0; 16]);
    let net = qp.ctx.net()?;
    let addr = match roce::endpoint::choose(&qp.ctx, qp.ctx.peer(&dgid, dqpn), &sgid, &dgid, dqpn, ah.is_global != 0)? {
        roce::endpoint::Wire::Stream(a) => a,
        roce::endpoint::Wire::Roce(src, dst) => {
            let link = net.roce()?.link(qp, st, src, dst);
            link.bind_requester(st);
            let link: Arc<dyn Link> = link;
            st.out = Some(link.clone());
            return Some(link);
        }
    };
    let link = net.connect(addr, qp.me.clone()).ok()?;
    let mut hello = Header::new(Op::Hello);
    hello.src_qpn = qp.qpn;
    hello.dst_qpn = dqpn;
    hello.src_lid = qp.ctx.lid;
    hello.sgid = sgid;
    hello.dgid = dgid;
    link.send(hello.frame(&[]));
    st.out = Some(link.clone());
    Some(link)
}

/// Both QPs of a pair may open a stream at once (each on its first transmission, before
/// the other's `Hello` arrived) and then use two, where a response can never share a
/// `sendmsg` (or a `recv`) with a request. Once nothing of ours is in flight on our own
/// stream, move to the peer's if it is the one both sides keep: the one opened to the
/// lower listening endpoint (the other side then stays on it). Our old stream closes:
/// every request on it was answered, and the peer sends its own on its stream.
fn prefer_peer_link(st: &mut QpState) {
    let Some(out) = st.out.as_ref() else { return };
    if out.peer_qpn().is_some() || out.is_dead() {
        return;
    }
    let dqpn = st.attr.dest_qp_num & QPN_MASK;
    let Some(theirs) = st.in_links.iter().filter_map(|w| w.upgrade()).find(|l| !l.is_dead() && l.peer_qpn() == Some(dqpn)) else {
        return;
    };
    let key = |a: std::net::SocketAddr| (a.port(), a.ip().to_canonical());
    match (theirs.listener(), out.listener()) {
        (Some(t), Some(o)) if key(t) < key(o) => {}
        _ => return,
    }
    if let Some(old) = st.out.replace(theirs) {
        old.close();
    }
}

/// Transmits what may be transmitted, in order.
pub fn pump(qp: &Qp, st: &mut QpState) {
    if st.sent == 0 {
        prefer_peer_link(st);
    }
    while st.state == IBV_QPS_RTS && st.sent < st.sq.len() {
        let i = st.sent;
        if let Some(status) = st.sq[i].fail {
            if i == 0 {
                fail_head(qp, st, status);
            }
            return;
        }
        if st.sq[i].rd_atomic && st.rd_in_flight >= (st.attr.max_rd_atomic as u32).clamp(1, super::RD_IN_FLIGHT) {
            return;
        }
        if !st.sq[i].rd_atomic && st.bytes_in_flight > 0 && st.bytes_in_flight + st.sq[i].len as usize > window() {
            return;
        }
        let link = match &st.out {
            Some(l) if !l.is_dead() => l.clone(),
            Some(_) if st.sent > 0 => return, // the engine reports the link down first
            _ => match connect(qp, st) {
                Some(l) => l,
                None => {
                    fail_head(qp, st, IBV_WC_RETRY_EXC_ERR);
                    return;
                }
            },
        };
        if direct::run_head(qp, st, link.as_ref()) {
            continue;
        }
        if link.backlog() {
            // The socket is full: the engine calls `on_drained` when it has room again,
            // and the payload is read from memory then (no copy meanwhile).
            return;
        }
        let w = &mut st.sq[i];
        if let Some(f) = w.frame.take() {
            link.send(f);
        } else if let Some(h) = w.gather.take() {
            let hdr = h.to_bytes();
            let send = |parts: &[&[u8]]| {
                let mut all: Vec<&[u8]> = Vec::with_capacity(parts.len() + 1);
                all.push(&hdr);
                all.extend_from_slice(parts);
                link.send_parts(&all);
            };
            let sent = if w.borrowed {
                w.borrowed = false;
                // SAFETY: a borrowed WQE is pumped only inside its ibv_post_send (`post`
                // copies whatever is left before returning).
                send(&unsafe { inline_parts(&std::mem::take(&mut w.local)) });
                Ok(())
            } else {
                mem::with_gather(qp.pd.id, &w.local, send)
            };
            if sent.is_err() {
                w.fail = Some(IBV_WC_LOC_PROT_ERR);
                continue;
            }
        }
        if w.rd_atomic {
            st.rd_in_flight += 1;
        } else {
            st.bytes_in_flight += w.len as usize;
        }
        st.sent += 1;
    }
}

/// Most SEND/WRITE payload bytes a QP has transmitted and not seen acknowledged (a request
/// larger than this still leaves alone). What is beyond it waits in the send queue, where
/// it costs nothing, instead of in the kernel's socket queues: on loopback the receiver
/// copies twice per message (socket to MR, and the application's copy out) where the
/// sender copies once, so without a bound the sender fills the sockets up to the
/// application's whole credit (megabytes with large rsocket buffers), and every byte then
/// costs about three times the CPU (measured: rstream 64 KiB 12-13 Gb/s unbounded,
/// 35-38 Gb/s at 256 KiB; ib_write_bw 1.5 GB/s, 6.3 GB/s; 128 KiB already stalls the
/// sender and 320 KiB and more falls back to the slow mode in most runs).
/// `SOFTVERBS_TX_WINDOW` (bytes) overrides it, e.g. for peers on other hosts, where a
/// round trip takes longer than on loopback.
const TX_WINDOW: usize = 256 << 10;

fn window() -> usize {
    static W: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *W.get_or_init(|| {
        std::env::var("SOFTVERBS_TX_WINDOW").ok().and_then(|v| v.trim().parse().ok()).filter(|&w| w > 0).unwrap_or(TX_WINDOW)
    })
}

fn status_of(s: Syndrome) -> ibv_wc_status {
    match s {
        Syndrome::Ok => IBV_WC_SUCCESS,
        Syndrome::RnrExceeded => IBV_WC_RNR_RETRY_EXC_ERR,
        Syndrome::RemAccess => IBV_WC_REM_ACCESS_ERR,
        Syndrome::RemInvReq => IBV_WC_REM_INV_REQ_ERR,
        Syndrome::RemOp => IBV_WC_REM_OP_ERR,
        Syndrome::NoQp => IBV_WC_RETRY_EXC_ERR,
    }
}

/// A response arrived on `link`.
pub fn on_response(qp: &Arc<Qp>, link: &Arc<dyn Link>, h: &Header, payload: &[u8]) {
    let mut st = crate::core::registry::lock(&qp.st);
    match &st.out {
        Some(l) if Arc::ptr_eq(l, link) => {}
        _ => return,
    }
    if st.sent == 0 || st.state == IBV_QPS_ERR || st.state == IBV_QPS_RESET {
        return;
    }
    let (psn, op, rd) = {
        let w = &st.sq[0];
        (w.psn, w.wc_opcode, w.rd_atomic)
    };
    if h.psn != psn {
        fail_head(qp, &mut st, IBV_WC_BAD_RESP_ERR);
        return;
    }
    if h.syndrome != Syndrome::Ok {
        fail_head(qp, &mut st, status_of(h.syndrome));
        return;
    }
    let expected = match op {
        IBV_WC_RDMA_READ => Op::ReadResp,
        IBV_WC_COMP_SWAP | IBV_WC_FETCH_ADD => Op::AtomicResp,
        _ => Op::Ack,
    };
    if h.op != expected {
        fail_head(qp, &mut st, IBV_WC_BAD_RESP_ERR);
        return;
    }
    let local = std::mem::take(&mut st.sq[0].local);
    let placed = match h.op {
        Op::ReadResp if payload.len() as u32 != st.sq[0].len => Err(LocalErr::Len),
        Op::ReadResp => mem::scatter(qp.pd.id, &local, &[payload]),
        Op::AtomicResp => {
            let mut b = [0u8; 8];
            b.copy_from_slice(&payload[..8]);
            let orig = u64::from_be_bytes(b).to_ne_bytes();
            let first8 = first_bytes(&local, 8);
            mem::scatter(qp.pd.id, &first8, &[&orig])
        }
        _ => Ok(()),
    };
    if let Err(e) = placed {
        fail_head(qp, &mut st, if e == LocalErr::Len { IBV_WC_LOC_LEN_ERR } else { IBV_WC_LOC_PROT_ERR });
        return;
    }
    let Some(w) = st.sq.pop_front() else { return };
    st.sent -= 1;
    if rd {
        st.rd_in_flight = st.rd_in_flight.saturating_sub(1);
    } else {
        st.bytes_in_flight = st.bytes_in_flight.saturating_sub(w.len as usize);
    }
    if w.signaled {
        let mut c = wc(w.wr_id, IBV_WC_SUCCESS, w.wc_opcode, qp.qpn);
        c.byte_len = w.len;
        qp.send_cq.push(c, false);
    }
    if st.sent == 0 && st.state == IBV_QPS_SQD && st.attr.en_sqd_async_notify != 0 {
        qp.ctx.raise(crate::core::context::AsyncElem::Qp(qp.clone()), IBV_EVENT_SQ_DRAINED);
    }
    pump(qp, &mut st);
}

/// The first `n` bytes of a scatter list, as a scatter list.
fn first_bytes(sges: &[ibv_sge], mut n: u32) -> Vec<ibv_sge> {
    let mut out = Vec::new();
    for s in sges {
        if n == 0 {
            break;
        }
        let take = s.length.min(n);
        out.push(ibv_sge { addr: s.addr, length: take, lkey: s.lkey });
        n -= take;
    }
    out
}

/// `link`'s socket took everything queued: transmit what waits.
pub fn on_drained(qp: &Arc<Qp>, link: &Arc<dyn Link>) {
    let mut st = crate::core::registry::lock(&qp.st);
    match &st.out {
        Some(l) if Arc::ptr_eq(l, link) => {}
        _ => return,
    }
    if st.state == IBV_QPS_RTS {
        pump(qp, &mut st);
    }
}

/// The engine lost `link` (peer gone, refused, or closed by us).
pub fn on_link_down(qp: &Arc<Qp>, link: &Arc<dyn Link>) {
    let mut st = crate::core::registry::lock(&qp.st);
    match &st.out {
        Some(l) if Arc::ptr_eq(l, link) => {}
        _ => return,
    }
    st.out = None;
    if st.state == IBV_QPS_ERR || st.state == IBV_QPS_RESET {
        return;
    }
    if st.sent > 0 {
        fail_head(qp, &mut st, IBV_WC_RETRY_EXC_ERR);
    } else {
        pump(qp, &mut st);
    }
}
