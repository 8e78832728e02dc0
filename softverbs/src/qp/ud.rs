//! UD: datagrams with a 40-byte GRH written in front of the payload at the receiver,
//! Q_Key checks, source learning (so `ibv_create_ah_from_wc` replies work without the CM),
//! and multicast: host-local members are listed in the registry and a send to QPN 0xFFFFFF
//! fans out to each of them; with a RoCEv2 endpoint, groups `::ffff:G` also go over the
//! wire to `G:4791` and come back from it (`roce::mcast`).

use super::requester::{check_wr, inline_bytes, sges_of};
use super::{Qp, QpState, RecvWqe};
use crate::core::ah::Ah;
use crate::core::context::Context;
use crate::core::cq::wc;
use crate::core::device::is_mcast_gid;
use crate::core::mem::{self, LocalErr};
use crate::core::registry::lock;
use crate::net::frame::{Header, Op, F_IMM, F_MCAST, F_SOLICITED, MAX_UD};
use crate::net::peers;
use crate::roce::endpoint::Wire;
use crate::sys::{Errno, Result};
use rdma_abi::verbs::*;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

pub const MCAST_QPN: u32 = 0x00ff_ffff;
pub const GRH_LEN: usize = 40;

/// The 40-byte GRH (IPv6-style, next header 0x1b) the receiver finds in front of the data.
pub fn grh_bytes(sgid: &[u8; 16], dgid: &[u8; 16], paylen: usize) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    g[0..4].copy_from_slice(&(6u32 << 28).to_be_bytes());
    g[4..6].copy_from_slice(&(paylen.min(0xffff) as u16).to_be_bytes());
    g[6] = 0x1b;
    g[7] = 64;
    g[8..24].copy_from_slice(sgid);
    g[24..40].copy_from_slice(dgid);
    g
}

/// `ibv_post_send` on a UD QP: each WR is transmitted now and completes locally.
///
/// # Safety
/// `wr` must be a valid NULL-terminated `ibv_send_wr` list.
pub unsafe fn post(qp: &Arc<Qp>, mut wr: *mut ibv_send_wr, ah_of: impl Fn(*mut ibv_ah) -> Option<Arc<Ah>>) -> std::result::Result<(), (*mut ibv_send_wr, Errno)> {
    let st = lock(&qp.st);
    while !wr.is_null() {
        // SAFETY: caller guarantees a valid list.
        let w = unsafe { &*wr };
        match st.state {
            IBV_QPS_RTS | IBV_QPS_SQD | IBV_QPS_ERR => {}
            _ => return Err((wr, Errno::EINVAL)),
        }
        check_wr(qp, w).map_err(|e| (wr, e))?;
        let signaled = qp.sq_sig_all || w.send_flags & IBV_SEND_SIGNALED != 0;
        if st.state == IBV_QPS_ERR {
            qp.send_cq.push(wc(w.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, qp.qpn), false);
            wr = w.next;
            continue;
        }
        // SAFETY: reading the UD member of the union of a valid UD WR.
        let ud = unsafe { w.wr.ud };
        let ah = ah_of(ud.ah).ok_or((wr, Errno::EINVAL))?;
        if !Arc::ptr_eq(&ah.pd.ctx, &qp.ctx) {
            return Err((wr, Errno::EINVAL));
        }
        // SAFETY: check_wr verified sg_list/num_sge.
        let sges = unsafe { sges_of(w) };
        let total = mem::capacity(&sges);
        let mut status = IBV_WC_SUCCESS;
        let payload = if w.send_flags & IBV_SEND_INLINE != 0 {
            if total > qp.cap.max_inline_data as u64 {
                return Err((wr, Errno::EINVAL));
            }
            // SAFETY: inline buffers are the application's readable memory.
            unsafe { inline_bytes(&sges) }
        } else if total > MAX_UD as u64 {
            status = IBV_WC_LOC_LEN_ERR;
            Vec::new()
        } else {
            mem::gather(qp.pd.id, &sges).unwrap_or_else(|e| {
                status = if e == LocalErr::Len { IBV_WC_LOC_LEN_ERR } else { IBV_WC_LOC_PROT_ERR };
                Vec::new()
            })
        };
        if payload.len() > MAX_UD as usize {
            status = IBV_WC_LOC_LEN_ERR;
        }
        if status == IBV_WC_SUCCESS {
            let mut h = Header::new(Op::UdSend);
            h.src_qpn = qp.qpn;
            h.dst_qpn = ud.remote_qpn & 0x00ff_ffff;
            h.qkey = if ud.remote_qkey & 0x8000_0000 != 0 { st.attr.qkey } else { ud.remote_qkey };
            h.src_lid = qp.ctx.lid;
            if w.opcode == IBV_WR_SEND_WITH_IMM {
                h.flags |= F_IMM;
                h.imm = w.imm_data;
            }
            if w.send_flags & IBV_SEND_SOLICITED != 0 {
                h.flags |= F_SOLICITED;
            }
            h.dgid = ah.dgid();
            h.sgid = qp.ctx.gid(ah.attr.grh.sgid_index as usize).or_else(|| qp.ctx.gid(0)).unwrap_or([0; 16]);
            transmit(qp, h, &payload, ah.attr.is_global != 0);
        }
        if signaled || status != IBV_WC_SUCCESS {
            let mut c = wc(w.wr_id, status, IBV_WC_SEND, qp.qpn);
            c.byte_len = payload.len() as u32;
            qp.send_cq.push(c, false);
        }
        wr = w.next;
    }
    Ok(())
}

fn transmit(qp: &Qp, mut h: Header, payload: &[u8], is_global: bool) {
    let Some(net) = qp.ctx.net() else { return };
    if h.dst_qpn == MCAST_QPN && is_mcast_gid(&h.dgid) {
        h.flags |= F_MCAST;
        if let Some(r) = net.roce() {
            // The wire copy (other hosts and namespaces); this namespace's members get
            // theirs below (the socket does not loop multicast back).
            let src = crate::roce::v4_of_gid(&h.sgid).filter(|a| !a.is_loopback() && r.has(*a));
            if let (Some(src), Some(g)) = (src, crate::roce::mcast::group_of(&h.dgid)) {
                r.send_ud(src, g, &h, 0, payload);
            }
        }
        let block_self = qp.create_flags & IBV_QP_CREATE_BLOCK_SELF_MCAST_LB != 0;
        for (port, qpn) in peers::mcast_members(&h.dgid) {
            if block_self && port == net.port() && qpn == qp.qpn {
                continue;
            }
            h.dst_qpn = qpn;
            let to = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            let _ = net.send_datagram(to, &h.frame(payload));
        }
        return;
    }
    match crate::roce::endpoint::choose(&qp.ctx, qp.ctx.ud_peer(&h.dgid, h.dst_qpn), &h.sgid, &h.dgid, h.dst_qpn, is_global) {
        Some(Wire::Stream(to)) => {
            let _ = net.send_datagram(to, &h.frame(payload));
        }
        Some(Wire::Roce(src, dst)) => {
            if let Some(r) = net.roce() {
                r.send_ud(src, dst, &h, 0, payload);
            }
        }
        None => {}
    }
}

/// A datagram arrived (already decoded and validated).
pub fn on_datagram(ctx: &Arc<Context>, h: &Header, payload: &[u8], from: Option<SocketAddr>) {
    let Some(qp) = ctx.find_qp(h.dst_qpn) else { return };
    if qp.kind != super::state::Kind::Ud {
        return;
    }
    let mut st = lock(&qp.st);
    if !matches!(st.state, IBV_QPS_RTR | IBV_QPS_RTS | IBV_QPS_SQD) || h.qkey != st.attr.qkey {
        return;
    }
    if h.flags & F_MCAST != 0 && !st.mcast.iter().any(|(g, _)| g == &h.dgid) {
        return;
    }
    // Learnt only from a datagram the QP takes (its state and Q_Key passed).
    if let Some(from) = from {
        if h.flags & F_MCAST == 0 {
            ctx.learn_ud_peer(h.sgid, h.src_qpn, from);
        }
    }
    if qp.srq.is_none() && (st.rq.is_empty() || !st.ud_backlog.is_empty()) {
        // No receive posted: keep it, in order, as a socket buffer would (bounded). A
        // same-host ring delivers bursts no NIC's wire could, and udpong's protocol
        // hangs on a lost control datagram.
        if st.ud_backlog_bytes + payload.len() <= BACKLOG_BYTES {
            st.ud_backlog_bytes += payload.len();
            st.ud_backlog.push_back((*h, payload.to_vec()));
        }
        deliver_backlog(&qp, &mut st);
        return;
    }
    let r = match &qp.srq {
        Some(s) => s.take(None),
        None => st.rq.pop_front(),
    };
    let Some(r) = r else { return };
    deliver(&qp, r, h, payload);
}

/// Payload bytes a UD QP keeps for receives not yet posted: what a UDP socket's default
/// receive buffer holds.
pub const BACKLOG_BYTES: usize = 208 * 1024;

/// Hands backlogged datagrams to the receives posted meanwhile, oldest first.
pub fn deliver_backlog(qp: &Qp, st: &mut QpState) {
    while !st.rq.is_empty() {
        let Some((h, payload)) = st.ud_backlog.pop_front() else { break };
        st.ud_backlog_bytes -= payload.len();
        if let Some(r) = st.rq.pop_front() {
            deliver(qp, r, &h, &payload);
        }
    }
}

fn deliver(qp: &Qp, r: RecvWqe, h: &Header, payload: &[u8]) {
    let grh = grh_bytes(&h.sgid, &h.dgid, payload.len());
    let mut c = wc(r.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, qp.qpn);
    c.src_qp = h.src_qpn;
    c.slid = h.src_lid;
    match mem::scatter(qp.pd.id, &r.sges, &[&grh, payload]) {
        Ok(()) => {
            c.byte_len = (GRH_LEN + payload.len()) as u32;
            c.wc_flags = IBV_WC_GRH;
            if h.flags & F_IMM != 0 {
                c.wc_flags |= IBV_WC_WITH_IMM;
                c.imm_data = h.imm;
            }
            qp.recv_cq.push(c, h.flags & F_SOLICITED != 0);
        }
        Err(e) => {
            c.status = if e == LocalErr::Len { IBV_WC_LOC_LEN_ERR } else { IBV_WC_LOC_PROT_ERR };
            qp.recv_cq.push(c, false);
        }
    }
}

/// `ibv_attach_mcast`.
pub fn attach(qp: &Qp, gid: [u8; 16]) -> Result<()> {
    if qp.kind != super::state::Kind::Ud || !is_mcast_gid(&gid) {
        return Err(Errno::EINVAL);
    }
    let mut st = lock(&qp.st);
    if st.mcast.iter().any(|(g, _)| g == &gid) {
        return Ok(());
    }
    let port = qp.ctx.port();
    let file = peers::mcast_join(&gid, port, qp.qpn);
    st.mcast.push((gid, file));
    drop(st);
    if let Some(r) = qp.ctx.net().and_then(|n| n.roce()) {
        r.mcast.attach(qp, &gid);
    }
    Ok(())
}

/// `ibv_detach_mcast`.
pub fn detach(qp: &Qp, gid: [u8; 16]) -> Result<()> {
    if qp.kind != super::state::Kind::Ud {
        return Err(Errno::EINVAL);
    }
    let mut st = lock(&qp.st);
    let before = st.mcast.len();
    st.mcast.retain(|(g, _)| g != &gid);
    if st.mcast.len() == before {
        return Err(Errno::EINVAL);
    }
    drop(st);
    if let Some(r) = qp.ctx.net().and_then(|n| n.roce()) {
        r.mcast.detach(qp, &gid);
    }
    Ok(())
}
