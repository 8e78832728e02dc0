//! SIDR: the UD service resolution of the soft CM. A request and its reply
//! are datagrams on the ids' UDP sockets; the client retransmits once a
//! second until answered, so the listener tells a copy from a new request.

use super::conn::{add_peer, new_child, padded, qp_endpoint, ud_param, SIDR_REP_DATA, SIDR_REQ_DATA};
use super::engine;
use super::wire::{Kind, Msg};
use super::{dev, net, set_addrs, Phase, SoftId};
use crate::backend::ConnParam;
use crate::cm::event::Param;
use crate::cm::IdBox;
use crate::sys::{Errno, Result};
use rdma_abi::cma::*;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

pub fn sidr_connect(s: &Arc<SoftId>, p: ConnParam) -> Result<()> {
    if p.private_data.len() > SIDR_REQ_DATA {
        return Err(Errno::EINVAL);
    }
    let (src, dst) = {
        let st = s.st();
        (st.src.ok_or(Errno::EINVAL)?, st.dst.ok_or(Errno::EINVAL)?)
    };
    let u = UdpSocket::bind(SocketAddr::new(src.ip(), 0))?;
    // Connected: where no soft-fabric listener has the port, the ICMP refusal comes back
    // as a receive error (`on_refused`), and RoCEv2 is tried instead.
    let roce = super::ibcm::mode(src.ip());
    if roce == 2 && dst.ip().to_canonical().is_ipv4() {
        return super::ibcm::sidr_connect(s, &p.private_data, src, dst);
    }
    let _ = u.connect(dst);
    let (token, u) = engine::get().add_udp(u, s);
    let mut m = Msg::new(Kind::SidrReq);
    m.port_space = s.ps() as u16;
    m.tid = (super::random_u32() as u64) << 32 | super::random_u32() as u64;
    m.src = Some(src);
    m.dst = Some(dst);
    m.private = p.private_data;
    {
        let mut st = s.st();
        // Of two racing connects one sends; the other's socket goes.
        if st.phase.step(|p| p == Phase::RouteResolved, Phase::ReqSent).is_err() {
            drop(st);
            engine::get().remove(token);
            return Err(Errno::EINVAL);
        }
        st.udp = Some((token, u.clone()));
        st.peer.tid = m.tid;
        st.peer_private = m.private.clone();
    }
    sidr_send(s.clone(), u, m, dst, 0);
    Ok(())
}

/// Sends a SIDR REQ, and again after a second while no reply came (datagrams can be lost).
fn sidr_send(s: Arc<SoftId>, u: Arc<UdpSocket>, m: Msg, dst: SocketAddr, tries: u32) {
    {
        let mut st = s.st();
        if st.peer.tid != m.tid {
            return;
        }
        // Given up on, unless the reply (or a destroy) moved the id first.
        if tries == 4 {
            if st.phase.step(|p| p == Phase::ReqSent, Phase::Disconnected).is_ok() {
                drop(st);
                s.post(RDMA_CM_EVENT_UNREACHABLE, -libc::ETIMEDOUT, Param::zeroed(), Vec::new(), true);
            }
            return;
        }
        if st.phase.get() != Phase::ReqSent {
            return;
        }
    }
    let _ = u.send_to(&super::wire::encode(&m), dst);
    engine::get().after(Duration::from_secs(1), move || sidr_send(s, u, m, dst, tries + 1));
}

pub fn sidr_accept(s: &Arc<SoftId>, p: Option<ConnParam>) -> Result<()> {
    let p = p.unwrap_or_default();
    if p.private_data.len() > SIDR_REP_DATA {
        return Err(Errno::EINVAL);
    }
    let qp = s.qp();
    // SAFETY: a live QP of this id.
    let qpn = if qp.is_null() { p.qp_num } else { unsafe { (*qp).qp_num } };
    let src = s.st().src.ok_or(Errno::EINVAL)?;
    sidr_reply(s, 0, qpn, qp_endpoint(qp, &src), &p.private_data)
}

pub fn sidr_reply(s: &Arc<SoftId>, status: u32, qpn: u32, endpoint: Option<SocketAddr>, data: &[u8]) -> Result<()> {
    if data.len() > SIDR_REP_DATA {
        return Err(Errno::EINVAL);
    }
    if s.st().roce.is_some() {
        return super::ibcm::sidr_reply(s, status, qpn, data);
    }
    let (u, to, tid) = {
        let mut st = s.st();
        let found = (st.udp.as_ref().map(|x| x.1.clone()).ok_or(Errno::EINVAL)?, st.peer.udp.ok_or(Errno::EINVAL)?, st.peer.tid);
        // One answer per request: a racing accept or reject is refused.
        st.phase.step(|p| p == Phase::ReqRcvd, Phase::Answering).map_err(|_| Errno::EINVAL)?;
        found
    };
    let mut m = Msg::new(Kind::SidrRep);
    m.status = status;
    m.qp_num = qpn;
    m.qkey = RDMA_UDP_QKEY;
    m.endpoint = endpoint;
    m.tid = tid;
    m.private = data.to_vec();
    if let Err(e) = u.send_to(&super::wire::encode(&m), to) {
        // Unanswered still: the application may try again.
        let _ = s.transition(|p| p == Phase::Answering, Phase::ReqRcvd);
        return Err(e.into());
    }
    let mut st = s.st();
    // A destroy meanwhile has moved the id already; the reply went out all the same.
    let _ = st.phase.step(|p| p == Phase::Answering, if status == 0 { Phase::Connected } else { Phase::Disconnected });
    st.udp = None; // the listener's socket: not ours to close
    Ok(())
}

/// How many SIDR requests a listener remembers to drop retransmitted copies
/// (a client resends for 4 s; a few per second of clients are covered).
const SIDR_SEEN: usize = 64;

/// Whether this SIDR request is new to the listener. A retransmission is
/// dropped only while its request is still unanswered (its new id waits for
/// the application): once answered, a copy means the reply was lost, and it
/// is taken as a new request so that the client gets a reply.
fn first_sidr_copy(l: &SoftId, from: SocketAddr, tid: u64) -> bool {
    let same = |e: &(SocketAddr, u64, std::sync::Weak<SoftId>)| (e.0, e.1) == (from, tid);
    let child = l.st().sidr_seen.iter().find(|e| same(e)).map(|e| e.2.clone());
    let Some(child) = child else { return true };
    // The child's lock is not taken under the listener's.
    if child.upgrade().is_some_and(|c| matches!(c.phase(), Phase::ReqRcvd | Phase::Answering)) {
        return false;
    }
    l.st().sidr_seen.retain(|e| !same(e));
    true
}

/// Remembers a SIDR request and its new id (see `first_sidr_copy`).
fn remember_sidr(l: &SoftId, from: SocketAddr, tid: u64, child: &Arc<SoftId>) {
    let mut st = l.st();
    if st.sidr_seen.len() == SIDR_SEEN {
        st.sidr_seen.pop_front();
    }
    st.sidr_seen.push_back((from, tid, Arc::downgrade(child)));
}

/// A SIDR socket's receive failed: a client's request was refused (nothing listens on
/// that port of the destination). Another host with a RoCEv2 peer: try the IB CM's SIDR.
pub fn on_refused(s: &Arc<SoftId>) {
    let (src, dst, token) = {
        let st = s.st();
        if st.phase.get() != Phase::ReqSent {
            return;
        }
        let (Some(src), Some(dst)) = (st.src, st.dst) else { return };
        (src, dst, st.udp.as_ref().map(|x| x.0))
    };
    if super::ibcm::mode(src.ip()) == 0 || !dst.ip().to_canonical().is_ipv4() || net::is_local(dst.ip()) {
        return;
    }
    let private = s.st().peer_private.clone();
    {
        let mut st = s.st();
        // The stream request is abandoned: its resends stop with the new tid.
        st.peer.tid = 0;
        st.udp = None;
    }
    if let Some(t) = token {
        engine::get().remove(t);
    }
    let _ = s.transition(|p| p == Phase::ReqSent, Phase::RouteResolved);
    if super::ibcm::sidr_connect(s, &private, src, dst).is_err() && s.transition(|p| p == Phase::ReqSent, Phase::Disconnected).is_ok() {
        s.post(RDMA_CM_EVENT_UNREACHABLE, -libc::ENETUNREACH, Param::zeroed(), Vec::new(), true);
    }
}

/// A SIDR request for listener `l` from `remote` to `local`: makes the new id (which
/// `attach` ties to the request's wire) and reports CONNECT_REQUEST.
pub(super) fn sidr_request(l: &Arc<SoftId>, m: &Msg, local: Option<SocketAddr>, remote: Option<SocketAddr>, attach: impl FnOnce(&Arc<SoftId>, &mut super::St)) -> Option<Arc<SoftId>> {
    let child = new_child(l)?;
    if set_addrs(&child, local, remote).is_err() {
        let _ = IdBox::destroy(child.core.ptr().0);
        return None;
    }
    {
        let mut st = child.st();
        // A new id nobody else has yet: this cannot fail.
        let _ = st.phase.step(|p| p == Phase::Idle, Phase::ReqRcvd);
        st.src = local;
        st.dst = remote;
        st.peer.tid = m.tid;
        st.peer.gid = remote.map(|r| net::gid_of(r.ip())).unwrap_or_default();
        attach(&child, &mut st);
    }
    let mut p = l.core.pending(RDMA_CM_EVENT_CONNECT_REQUEST, 0, Param::zeroed());
    p.id = child.core.ptr();
    p.listen_id = l.core.ptr();
    p.private = padded(&m.private, SIDR_REQ_DATA);
    p.ud = true;
    l.post_pending(p);
    Some(child)
}

/// A datagram on a SIDR socket: a request at a listener, a reply at a client.
pub fn on_datagram(s: &Arc<SoftId>, u: &UdpSocket, m: Msg, from: SocketAddr) {
    match m.kind {
        Kind::SidrReq if s.phase() == Phase::Listening => {
            if m.port_space as u32 != s.ps() || !first_sidr_copy(s, from, m.tid) {
                return;
            }
            // A dual-stack listener's IPv4 requests come from mapped addresses.
            let local = u.local_addr().ok().map(|l| {
                let ip = m.dst.map(|d| d.ip()).unwrap_or(l.ip());
                net::unmapped(SocketAddr::new(ip, l.port()))
            });
            let remote = m.src.or(Some(from)).map(net::unmapped);
            let listener_udp = s.st().udp.clone();
            let child = sidr_request(s, &m, local, remote, |_, st| {
                st.udp = listener_udp.map(|(_, sock)| (0, sock));
                st.peer.udp = Some(from);
            });
            if let Some(child) = child {
                remember_sidr(s, from, m.tid, &child);
            }
        }
        Kind::SidrRep => on_reply(s, m),
        _ => {}
    }
}

/// The reply to a client's SIDR request (from either wire).
pub(super) fn on_reply(s: &Arc<SoftId>, m: Msg) {
    let to = if m.status == 0 { Phase::Connected } else { Phase::Disconnected };
    // The reply to our request, unless a destroy (or an earlier copy) came first.
    let (token, dst, src, tclass) = {
        let mut st = s.st();
        if st.peer.tid != m.tid || st.phase.step(|p| p == Phase::ReqSent, to).is_err() {
            return;
        }
        (st.udp.take().map(|x| x.0), st.dst, st.src, st.tclass)
    };
    if let Some(t) = token {
        engine::get().remove(t);
    }
    super::ibcm::forget(s);
    let gid = dst.map(|d| net::gid_of(d.ip())).unwrap_or_default();
    if m.status != 0 {
        s.post(RDMA_CM_EVENT_UNREACHABLE, m.status as i32, Param::zeroed(), padded(&m.private, SIDR_REP_DATA), true);
        return;
    }
    let _ = add_peer(&gid, m.qp_num, m.endpoint);
    let sgid = src.and_then(|a| dev().ok().map(|d| d.gid_index(a.ip()))).unwrap_or(0);
    // The address handle follows the route's path, its traffic class (TOS) included.
    let mut p = ud_param(gid, sgid, m.qp_num, m.qkey);
    p.0.ud.ah_attr.grh.traffic_class = tclass;
    s.post(RDMA_CM_EVENT_ESTABLISHED, 0, p, padded(&m.private, SIDR_REP_DATA), true);
}
