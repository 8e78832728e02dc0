//! The soft CM's connection protocol: what each call sends, and what each
//! received message does to an id (events, QP transitions, peer addresses).

use super::engine::{self, Conn, Owner};
use super::wire::{Kind, Msg};
use super::{dev, net, set_addrs, soft_id, Phase, SoftId};
use crate::backend::ConnParam;
use crate::cm::event::Param;
use crate::cm::IdBox;
use crate::sys::{Errno, Result};
use crate::verbs::{ibv_attach_mcast, ibv_detach_mcast};
use rdma_abi::cma::*;
use rdma_abi::verbs::*;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// Private data the IB CM carries per message (the receiver sees all of it, zero padded).
pub const REQ_DATA: usize = 56;
pub const REP_DATA: usize = 196;
pub const REJ_DATA: usize = 148;
pub const SIDR_REQ_DATA: usize = 180;
pub const SIDR_REP_DATA: usize = 136;
/// IB CM reject reasons the soft CM sends.
pub const REJ_INVALID_SERVICE_ID: u32 = 8;
pub const REJ_CONSUMER: u32 = 28;
const DEVICE_MAX_RD_ATOMIC: u8 = 128;
/// IB_SIDR_REJECT (ib_cm_sidr_status: 1 is UNSUPPORTED), the status a
/// rejected SIDR client's UNREACHABLE event carries.
const SIDR_REJECT: u32 = 2;

/// Private data as the application sees it: `len` bytes, the peer's data
/// zero-padded (or cut, should a peer send more than the message carries).
pub(super) fn padded(data: &[u8], len: usize) -> Vec<u8> {
    let mut v = data[..data.len().min(len)].to_vec();
    v.resize(len, 0);
    v
}

fn cap_rd(v: u8) -> u8 {
    v.min(DEVICE_MAX_RD_ATOMIC)
}

fn conn_param(m: &Msg, swap: bool) -> Param {
    let mut p = Param::zeroed();
    let (resp, init) = if swap {
        (m.initiator_depth, m.responder_resources)
    } else {
        (m.responder_resources, m.initiator_depth)
    };
    p.0.conn = rdma_conn_param {
        private_data: std::ptr::null(),
        private_data_len: 0,
        responder_resources: resp,
        initiator_depth: init,
        flow_control: m.flow_control,
        retry_count: m.retry_count,
        rnr_retry_count: m.rnr_retry_count,
        srq: m.srq,
        qp_num: m.qp_num,
    };
    p
}

fn hook() -> Result<&'static super::hook::SoftverbsCmOps> {
    super::hook::ops().ok_or(Errno::ENODEV)
}

/// The transport endpoint of a QP (or, for an id whose QP the application
/// owns, of the device context), as softverbs reports it for `local`.
pub(super) fn qp_endpoint(qp: *mut ibv_qp, local: &SocketAddr) -> Option<SocketAddr> {
    let gid = ibv_gid { raw: net::gid_of(local.ip()) };
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut out: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let r = if qp.is_null() {
        let f = super::hook::ctx_endpoint()?;
        // SAFETY: the soft device's open context; gid and out are valid for the call.
        unsafe { f(dev().ok()?.ctx as *mut ibv_context, &gid, &mut out) }
    } else {
        let f = hook().ok()?.qp_endpoint?;
        // SAFETY: a live QP of the soft device; gid and out are valid for the call.
        unsafe { f(qp, &gid, &mut out) }
    };
    if r != 0 {
        return None;
    }
    // SAFETY: out is 128 initialised bytes.
    let b = unsafe { std::slice::from_raw_parts(&out as *const _ as *const u8, 128) };
    net::from_bytes(b).ok()
}

/// Tells softverbs where (gid, qpn) lives.
pub(super) fn add_peer(gid: &[u8; 16], qpn: u32, endpoint: Option<SocketAddr>) -> Result<()> {
    let Some(ep) = endpoint else { return Ok(()) };
    let f = hook()?.add_peer.ok_or(Errno::ENOSYS)?;
    let d = dev()?;
    let g = ibv_gid { raw: *gid };
    let mut st = [0u8; 128];
    net::to_storage(&ep, &mut st);
    let len = if ep.is_ipv4() { 16 } else { 28 };
    // SAFETY: the soft device's context, a valid gid and socket address.
    crate::verbs::verr(unsafe { f(d.ctx as *mut ibv_context, &g, qpn, st.as_ptr().cast(), len) })
}

fn modify(s: &SoftId, qp: *mut ibv_qp, states: &[u32]) -> Result<()> {
    for &st in states {
        // SAFETY: the id's live QP (callers take it from the id just before).
        unsafe { crate::qp::modify_to(&s.core, qp, st) }?;
    }
    Ok(())
}

pub(super) fn error_qp(s: &SoftId) {
    let _qp = s.core.lock_qp();
    let qp = s.qp();
    if !qp.is_null() {
        // SAFETY: the id's live QP, not destroyed while we hold its lock.
        unsafe { crate::qp::to_error(qp) };
    }
}

/// Frames the peer sent before its DREQ, or before it went away, reach our QP
/// before DISCONNECTED reaches the application: the CM message travels on its
/// own connection and can overtake them, and an application that closes its QP
/// on DISCONNECTED would then lose receives a NIC had completed (its last
/// message flushed, or a completion left for a QP it has destroyed).
fn deliver_sent(s: &SoftId) {
    let Some(drain) = super::hook::ctx_drain() else { return };
    let ctx = {
        let _qp = s.core.lock_qp();
        let qp = s.qp();
        if qp.is_null() {
            match dev() {
                Ok(d) => d.ctx as *mut ibv_context,
                Err(_) => return,
            }
        } else {
            // SAFETY: the id's live QP, not destroyed while we hold its lock.
            unsafe { (*qp).context }
        }
    };
    // SAFETY: a context of the soft device, open while ids use it.
    unsafe { drain(ctx) };
}

fn send(s: &Arc<SoftId>, m: &Msg) -> Result<()> {
    if s.st().roce.is_some() {
        return super::ibcm::send(s, m);
    }
    let c = s.st().conn.clone().ok_or(Errno(libc::ENOTCONN))?;
    c.send(m)
}

fn drop_conn(s: &SoftId) {
    if let Some(c) = s.st().conn.take() {
        engine::get().remove(c.token);
    }
    super::ibcm::forget(s);
}

pub fn connect(s: &Arc<SoftId>, p: ConnParam) -> Result<()> {
    if s.phase() != Phase::RouteResolved {
        return Err(Errno::EINVAL);
    }
    if s.is_ud() {
        return super::sidr::sidr_connect(s, p);
    }
    if p.private_data.len() > REQ_DATA {
        return Err(Errno::EINVAL);
    }
    let qp = s.qp();
    // SAFETY: a live QP of this id.
    let qpn = if qp.is_null() { p.qp_num } else { unsafe { (*qp).qp_num } };
    let mut st = s.st();
    let (src, dst) = (st.src.ok_or(Errno::EINVAL)?, st.dst.ok_or(Errno::EINVAL)?);
    // Claimed before the REQ is made: of two racing connects one sends.
    st.phase.step(|p| p == Phase::RouteResolved, Phase::ReqSent).map_err(|_| Errno::EINVAL)?;
    st.responder_resources = cap_rd(p.responder_resources);
    st.initiator_depth = cap_rd(p.initiator_depth);
    st.retry = p.retry_count.min(7);
    st.rnr_retry = p.rnr_retry_count.min(7);
    st.qp_num = qpn;
    let mut m = Msg::new(Kind::Req);
    m.port_space = s.ps() as u16;
    m.qp_num = qpn;
    m.psn = st.my_psn;
    m.responder_resources = st.responder_resources;
    m.initiator_depth = st.initiator_depth;
    m.retry_count = st.retry;
    m.rnr_retry_count = st.rnr_retry;
    m.flow_control = p.flow_control;
    m.srq = p.srq;
    m.tclass = st.tclass;
    m.src = Some(src);
    m.dst = Some(dst);
    m.endpoint = qp_endpoint(qp, &src);
    (m.ece_vendor, m.ece_options) = crate::ece::carried(&s.core.state(), false);
    m.private = p.private_data;
    drop(st);
    let s2 = s.clone();
    let go = move || {
        // RoCEv2 (the IB CM with a kernel rdma_cm): forced, or where no soft-fabric
        // listener answers on another host.
        let roce = super::ibcm::mode(src.ip());
        let ib_cm = |s: &Arc<SoftId>| {
            if let Err(e) = super::ibcm::connect(s, &m, src, dst) {
                if s.transition(|p| p == Phase::ReqSent, Phase::Disconnected).is_ok() {
                    s.post(RDMA_CM_EVENT_UNREACHABLE, -e.0, Param::zeroed(), Vec::new(), false);
                }
            }
        };
        if roce == 2 && dst.ip().to_canonical().is_ipv4() {
            return ib_cm(&s2);
        }
        let r = if net::is_local(dst.ip()) {
            connect_local(dst)
        } else {
            TcpStream::connect_timeout(&dst, Duration::from_secs(5))
        };
        match r {
            Ok(stream) => {
                let c = engine::get().add_conn(stream, Owner::Id(Arc::downgrade(&s2)));
                {
                    let mut st = s2.st();
                    // Destroyed (or disconnected) while connecting: its teardown
                    // found no connection to close, so this one goes here.
                    if st.dead || st.phase.get() != Phase::ReqSent {
                        drop(st);
                        engine::get().remove(c.token);
                        return;
                    }
                    st.conn = Some(c.clone());
                }
                if c.send(&m).is_err() {
                    on_eof(&s2, &c);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused && roce == 1 && dst.ip().to_canonical().is_ipv4() && !net::is_local(dst.ip()) => ib_cm(&s2),
            // Unless destroyed meanwhile (which moved the phase).
            Err(e) if s2.transition(|p| p == Phase::ReqSent, Phase::Disconnected).is_ok() => {
                if e.kind() == std::io::ErrorKind::ConnectionRefused {
                    // Nobody listens on that port: the remote CM rejects the service id.
                    s2.post(RDMA_CM_EVENT_REJECTED, REJ_INVALID_SERVICE_ID as i32, conn_param(&Msg::new(Kind::Rej), false), padded(&[], REJ_DATA), false);
                } else {
                    s2.post(RDMA_CM_EVENT_UNREACHABLE, -Errno::from(e).0, Param::zeroed(), Vec::new(), false);
                }
            }
            Err(_) => {}
        }
    };
    // The TCP connect (and its retries) happens off the caller's thread:
    // rdma_connect only starts the connection, its outcome is an event.
    common::thread::spawn("rdmacm-connect", go).map_err(|_| Errno(libc::EAGAIN))?;
    Ok(())
}

/// A connect on this host. A refusal is retried for a moment before it counts:
/// programs that tear a listener down and listen again on the same port
/// (perftest's two rdma_cm phases) race their peer by a few milliseconds, and
/// their own retry path is broken; an IB REQ would not be lost in that gap
/// either, as the CM answers it only once it is processed.
fn connect_local(dst: SocketAddr) -> std::io::Result<TcpStream> {
    let mut tries = 0;
    loop {
        match TcpStream::connect(dst) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused && tries < 20 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            r => return r,
        }
    }
}

pub fn accept(s: &Arc<SoftId>, p: Option<ConnParam>) -> Result<()> {
    if s.phase() != Phase::ReqRcvd {
        return Err(Errno::EINVAL);
    }
    if s.is_ud() {
        return super::sidr::sidr_accept(s, p);
    }
    let p = p.unwrap_or_default();
    if p.private_data.len() > REP_DATA {
        return Err(Errno::EINVAL);
    }
    let qp = s.qp();
    let src = {
        let mut st = s.st();
        let src = st.src.ok_or(Errno::EINVAL)?;
        // Claimed before the QP moves: a second accept or a reject of the
        // same request is refused instead of answering it too.
        st.phase.step(|p| p == Phase::ReqRcvd, Phase::Answering).map_err(|_| Errno::EINVAL)?;
        if p.responder_resources != 0 && p.responder_resources != 0xff {
            st.responder_resources = cap_rd(p.responder_resources);
        }
        if p.initiator_depth != 0 && p.initiator_depth != 0xff {
            st.initiator_depth = cap_rd(p.initiator_depth);
        }
        if p.rnr_retry_count != 0 {
            st.rnr_retry = p.rnr_retry_count.min(7);
        }
        // SAFETY: a live QP of this id.
        st.qp_num = if qp.is_null() { p.qp_num } else { unsafe { (*qp).qp_num } };
        src
    };
    if !qp.is_null() {
        let peer = s.st().peer.clone();
        let r = add_peer(&peer.gid, peer.qpn, peer.endpoint).and_then(|()| modify(s, qp, &[IBV_QPS_RTR, IBV_QPS_RTS]));
        if let Err(e) = r {
            // SAFETY: the id's live QP (non-NULL, checked above).
            unsafe { crate::qp::to_error(qp) };
            // Still unanswered: the application may reject it (unless the peer left meanwhile).
            let _ = s.transition(|p| p == Phase::Answering, Phase::ReqRcvd);
            return Err(e);
        }
    }
    let mut m = Msg::new(Kind::Rep);
    m.endpoint = qp_endpoint(qp, &src);
    (m.ece_vendor, m.ece_options) = crate::ece::carried(&s.core.state(), true);
    m.private = p.private_data;
    m.srq = p.srq;
    m.flow_control = p.flow_control;
    {
        let mut st = s.st();
        m.qp_num = st.qp_num;
        m.psn = st.my_psn;
        m.responder_resources = st.responder_resources;
        m.initiator_depth = st.initiator_depth;
        m.rnr_retry_count = st.rnr_retry;
        // RepSent before the REP leaves, as its RTU may come at once. The
        // peer's EOF (or a destroy) may have ended the request meanwhile.
        if st.phase.step(|p| p == Phase::Answering, Phase::RepSent).is_err() {
            drop(st);
            error_qp(s);
            return Err(Errno(libc::ENOTCONN));
        }
    }
    if let Err(e) = send(s, &m) {
        error_qp(s);
        // No event: the peer's EOF reports it, unless it came first.
        let _ = s.transition(|p| p == Phase::RepSent, Phase::Disconnected);
        return Err(e);
    }
    Ok(())
}

pub fn reject(s: &Arc<SoftId>, data: &[u8], reason: u32) -> Result<()> {
    if s.phase() != Phase::ReqRcvd {
        return Err(Errno::EINVAL);
    }
    if s.is_ud() {
        return super::sidr::sidr_reply(s, SIDR_REJECT, 0, None, data);
    }
    if data.len() > REJ_DATA {
        return Err(Errno::EINVAL);
    }
    // Claimed before the REJ leaves: an accept racing it is refused.
    s.transition(|p| p == Phase::ReqRcvd, Phase::Disconnected).map_err(|_| Errno::EINVAL)?;
    let mut m = Msg::new(Kind::Rej);
    m.status = reason;
    m.private = data.to_vec();
    let r = send(s, &m);
    drop_conn(s);
    r
}

pub fn establish(s: &Arc<SoftId>) -> Result<()> {
    // A DREQ or EOF taking the connection down meanwhile wins: no RTU then.
    s.transition(|p| p == Phase::ConnResponse, Phase::Connected).map_err(|_| Errno::EINVAL)?;
    send(s, &Msg::new(Kind::Rtu))
}

pub fn disconnect(s: &Arc<SoftId>) -> Result<()> {
    // Which of the two moves applies is decided in the same hold as the
    // move, so the peer's DREQ or EOF cannot slip in between.
    let moved = {
        let mut st = s.st();
        st.phase.step(Phase::is_connected, Phase::DreqSent).or_else(|_| st.phase.step(|p| p == Phase::DreqRcvd, Phase::Disconnected))
    };
    match moved {
        Ok(Phase::DreqRcvd) => {
            error_qp(s);
            let _ = send(s, &Msg::new(Kind::Drep));
            disconnected(s, false);
        }
        Ok(_) => {
            error_qp(s);
            // The peer is gone already: nothing will answer. Its EOF may
            // have been seen meanwhile, and reported the end itself.
            if send(s, &Msg::new(Kind::Dreq)).is_err() && s.transition(|p| p == Phase::DreqSent, Phase::Disconnected).is_ok() {
                disconnected(s, true);
            }
        }
        // The peer died: the connection is gone already, as is our QP's.
        Err(Phase::Disconnected) if s.st().peer_lost => error_qp(s),
        // A connection attempt or one that is over: the kernel moves the QP
        // to error and succeeds, though it can send neither DREQ nor DREP
        // then; no event follows, so a synchronous id does not wait for one.
        Err(Phase::ReqSent | Phase::ReqRcvd | Phase::Answering | Phase::DreqSent | Phase::Disconnected) if !s.is_ud() => {
            error_qp(s);
            return Ok(());
        }
        Err(_) => return Err(Errno::EINVAL),
    }
    if s.core.is_sync() {
        s.core.complete()?;
    }
    Ok(())
}

/// The rest of the way down, for the thread whose transition to
/// Disconnected won: close the CM connection, report, start timewait.
fn disconnected(s: &Arc<SoftId>, event: bool) {
    drop_conn(s);
    if event {
        s.post(RDMA_CM_EVENT_DISCONNECTED, 0, Param::zeroed(), Vec::new(), false);
    }
    timewait(s);
}

/// How long a disconnected id stays in timewait before TIMEWAIT_EXIT.
const TIMEWAIT: Duration = Duration::from_millis(500);

/// TIMEWAIT_EXIT after the connection is gone on this side, as the IB CM
/// reports it once stale packets can no longer arrive (unless the id is
/// destroyed first).
fn timewait(s: &Arc<SoftId>) {
    let w = Arc::downgrade(s);
    engine::get().after(TIMEWAIT, move || {
        if let Some(s) = w.upgrade() {
            s.post(RDMA_CM_EVENT_TIMEWAIT_EXIT, 0, Param::zeroed(), Vec::new(), false);
        }
    });
}

pub fn init_qp_attr(s: &SoftId, a: &mut ibv_qp_attr, mask: &mut i32) -> Result<()> {
    let ud = s.is_ud();
    let st = s.st();
    let m = match a.qp_state {
        IBV_QPS_INIT => {
            a.pkey_index = 0;
            a.port_num = 1;
            if ud {
                a.qkey = RDMA_UDP_QKEY;
                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY
            } else {
                a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
                IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS
            }
        }
        IBV_QPS_RTR if ud => IBV_QP_STATE,
        IBV_QPS_RTR => {
            if !matches!(st.phase.get(), Phase::ReqSent | Phase::ReqRcvd | Phase::Answering | Phase::RepSent | Phase::ConnResponse | Phase::Connected) {
                return Err(Errno::EINVAL);
            }
            let src = st.src.ok_or(Errno::EINVAL)?;
            a.path_mtu = IBV_MTU_4096;
            a.dest_qp_num = st.peer.qpn;
            // The IB CM's messages carry the PSN the sender receives (ibcm).
            a.rq_psn = if st.roce.is_some() { st.my_psn } else { st.peer.psn };
            a.max_dest_rd_atomic = st.responder_resources;
            a.min_rnr_timer = 12;
            a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
            if st.responder_resources > 0 {
                a.qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
            }
            a.ah_attr.is_global = 1;
            a.ah_attr.port_num = 1;
            a.ah_attr.grh.dgid.raw = st.peer.gid;
            a.ah_attr.grh.sgid_index = dev()?.gid_index(src.ip());
            a.ah_attr.grh.hop_limit = 64;
            a.ah_attr.grh.traffic_class = st.tclass;
            IBV_QP_STATE
                | IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER
                | IBV_QP_ACCESS_FLAGS
        }
        IBV_QPS_RTS if ud => {
            a.sq_psn = st.my_psn;
            IBV_QP_STATE | IBV_QP_SQ_PSN
        }
        IBV_QPS_RTS => {
            if !matches!(st.phase.get(), Phase::ReqSent | Phase::ReqRcvd | Phase::Answering | Phase::RepSent | Phase::ConnResponse | Phase::Connected) {
                return Err(Errno::EINVAL);
            }
            a.timeout = s.core.state().options.ack_timeout.unwrap_or(14);
            a.retry_cnt = st.retry;
            a.rnr_retry = st.rnr_retry;
            a.sq_psn = if st.roce.is_some() { st.peer.psn } else { st.my_psn };
            a.max_rd_atomic = st.initiator_depth;
            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC
        }
        _ => return Err(Errno::EINVAL),
    };
    *mask = m as i32;
    Ok(())
}

/// A REQ arrived on a connection a listener accepted: make the new id.
/// Refuses a connect request with REJ `reason` and closes its connection.
pub fn reject_request(c: &Arc<Conn>, reason: u32) {
    let mut r = Msg::new(Kind::Rej);
    r.status = reason;
    let _ = c.send(&r);
    engine::get().remove(c.token);
}

pub fn on_request(l: &Arc<SoftId>, c: &Arc<Conn>, m: Msg) {
    // A dual-stack listener's IPv4 requests come from and to mapped addresses.
    let local = c.sock.local_addr().ok().map(net::unmapped);
    let remote = m.src.or_else(|| c.peer()).map(net::unmapped);
    let made = request_id(l, &m, local, remote, |child, st| {
        st.conn = Some(c.clone());
        c.set_owner(Owner::Id(Arc::downgrade(child)));
    });
    if let Err(reason) = made {
        reject_request(c, reason);
    }
}

/// A REQ for listener `l` from `remote` to `local`: makes the new id, lets `attach` tie
/// the connection to it (under the new id's lock, before anything can reach it) and
/// reports CONNECT_REQUEST. `Err(reason)`: refuse the request with that REJ reason.
pub(super) fn request_id(l: &Arc<SoftId>, m: &Msg, local: Option<SocketAddr>, remote: Option<SocketAddr>, attach: impl FnOnce(&Arc<SoftId>, &mut super::St)) -> std::result::Result<(), u32> {
    if m.kind != Kind::Req || m.port_space as u32 != l.ps() || l.phase() != Phase::Listening {
        return Err(REJ_INVALID_SERVICE_ID);
    }
    let child = new_child(l).ok_or(REJ_CONSUMER)?;
    if set_addrs(&child, local, remote).is_err() {
        let _ = IdBox::destroy(child.core.ptr().0);
        return Err(REJ_CONSUMER);
    }
    {
        let mut st = child.st();
        // A new id nobody else has yet: this cannot fail.
        let _ = st.phase.step(|p| p == Phase::Idle, Phase::ReqRcvd);
        st.src = local;
        st.dst = remote;
        st.peer.qpn = m.qp_num;
        st.peer.psn = m.psn;
        st.peer.gid = remote.map(|r| net::gid_of(r.ip())).unwrap_or_default();
        st.peer.endpoint = m.endpoint;
        st.responder_resources = cap_rd(m.initiator_depth);
        st.initiator_depth = cap_rd(m.responder_resources);
        st.retry = m.retry_count;
        st.rnr_retry = m.rnr_retry_count;
        st.tclass = m.tclass;
        attach(&child, &mut st);
    }
    // The new id's route has the request's path, as the kernel CM gives it.
    if let (Some(l), Some(r)) = (local, remote) {
        if let Ok(path) = super::path_rec(l, r, m.tclass, None) {
            let rec = path.0;
            if child.core.with_public(|p| {
                p.route.path_rec = rec;
                p.route.num_paths = 1;
            }).is_ok() {
                child.st().path = Some(path);
            }
        }
    }
    child.core.state().set_remote_ece(ibv_ece { vendor_id: m.ece_vendor, options: m.ece_options, comp_mask: 0 });
    let mut p = l.core.pending(RDMA_CM_EVENT_CONNECT_REQUEST, 0, conn_param(m, true));
    p.id = child.core.ptr();
    p.listen_id = l.core.ptr();
    p.private = padded(&m.private, REQ_DATA);
    l.post_pending(p);
    Ok(())
}

/// A new id inheriting the listener's channel, context and port space (its
/// own private channel when the listener is synchronous).
pub(super) fn new_child(l: &Arc<SoftId>) -> Option<Arc<SoftId>> {
    let (ch, ctx, ps, qpt) = l.core.with_public(|p| (p.channel, p.context, p.ps, p.qp_type)).ok()?;
    let (ptr, core) = IdBox::create_core(ch, ctx, ps, Some(qpt)).ok()?;
    if l.core.is_sync() && IdBox::migrate(ptr, std::ptr::null_mut()).is_err() {
        let _ = IdBox::destroy(ptr);
        return None;
    }
    Some(soft_id(&core))
}

/// A message from the peer. The phase read here only picks the arm: each arm
/// acts only if its own transition wins (the application may have moved the
/// id since, or destroyed it). The transitions stay inside their arms, not in
/// match guards (clippy's suggestion): a state change in a guard is easy to
/// miss, and a guard that fails sends the message on to the arms below.
#[allow(clippy::collapsible_match)]
pub fn on_msg(s: &Arc<SoftId>, m: Msg) {
    match (m.kind, s.phase()) {
        (Kind::Rep, Phase::ReqSent) => {
            {
                let mut st = s.st();
                st.peer.qpn = m.qp_num;
                st.peer.psn = m.psn;
                st.peer.gid = st.dst.map(|d| net::gid_of(d.ip())).unwrap_or_default();
                st.peer.endpoint = m.endpoint;
                st.peer.rnr_retry = m.rnr_retry_count;
                st.responder_resources = st.responder_resources.min(cap_rd(m.initiator_depth).max(1));
                st.initiator_depth = st.initiator_depth.min(cap_rd(m.responder_resources));
            }
            s.core.state().set_remote_ece(ibv_ece { vendor_id: m.ece_vendor, options: m.ece_options, comp_mask: 0 });
            let peer = s.st().peer.clone();
            let data = padded(&m.private, REP_DATA);
            // This runs on the engine thread: the application may destroy the QP meanwhile.
            let qp_guard = s.core.lock_qp();
            let qp = s.qp();
            if qp.is_null() {
                let _ = add_peer(&peer.gid, peer.qpn, peer.endpoint);
                if s.transition(|p| p == Phase::ReqSent, Phase::ConnResponse).is_err() {
                    return;
                }
                s.post(RDMA_CM_EVENT_CONNECT_RESPONSE, 0, conn_param(&m, true), data, false);
                return;
            }
            // The REP's ECE goes on the QP before RTR, as on the kernel CM.
            let local = s.core.state().local_ece();
            let r = crate::ece::on_response(local, qp, m.ece_vendor, m.ece_options).and_then(|options| {
                add_peer(&peer.gid, peer.qpn, peer.endpoint)?;
                modify(s, qp, &[IBV_QPS_RTR, IBV_QPS_RTS])?;
                Ok(options)
            });
            match r {
                Ok(options) => {
                    s.core.state().set_local_ece(ibv_ece { options, ..local });
                    if s.transition(|p| p == Phase::ReqSent, Phase::Connected).is_err() {
                        return;
                    }
                    let _ = send(s, &Msg::new(Kind::Rtu));
                    s.post(RDMA_CM_EVENT_ESTABLISHED, 0, conn_param(&m, true), data, false);
                }
                Err(e) => {
                    // SAFETY: the id's live QP, not destroyed while we hold its lock.
                    unsafe { crate::qp::to_error(qp) };
                    drop(qp_guard);
                    if s.transition(|p| p == Phase::ReqSent, Phase::Disconnected).is_err() {
                        return;
                    }
                    let mut rej = Msg::new(Kind::Rej);
                    rej.status = REJ_CONSUMER;
                    let _ = send(s, &rej);
                    drop_conn(s);
                    s.post(RDMA_CM_EVENT_CONNECT_ERROR, -e.0, Param::zeroed(), Vec::new(), false);
                }
            }
        }
        // ReqSent: the passive side refused. RepSent: the active side could
        // not use our reply (its QP transition failed), as the kernel reports.
        (Kind::Rej, Phase::ReqSent | Phase::RepSent) => {
            if s.transition(|p| matches!(p, Phase::ReqSent | Phase::RepSent), Phase::Disconnected).is_err() {
                return;
            }
            error_qp(s);
            drop_conn(s);
            s.post(RDMA_CM_EVENT_REJECTED, m.status as i32, conn_param(&m, false), padded(&m.private, REJ_DATA), false);
        }
        // A disconnect under way keeps its DreqSent: no ESTABLISHED then.
        (Kind::Rtu, Phase::RepSent) => {
            if s.transition(|p| p == Phase::RepSent, Phase::Connected).is_ok() {
                s.post(RDMA_CM_EVENT_ESTABLISHED, 0, conn_param(&m, false), Vec::new(), false);
            }
        }
        (Kind::Dreq, _) => {
            let moved = {
                let mut st = s.st();
                st.phase.step(Phase::is_connected, Phase::DreqRcvd).or_else(|_| st.phase.step(|p| p == Phase::DreqSent, Phase::Disconnected))
            };
            match moved {
                Ok(Phase::DreqSent) => {
                    // Both sides disconnected at once: answer, and we are done.
                    let _ = send(s, &Msg::new(Kind::Drep));
                    disconnected(s, true);
                }
                Ok(_) => {
                    deliver_sent(s);
                    s.post(RDMA_CM_EVENT_DISCONNECTED, 0, Param::zeroed(), Vec::new(), false)
                }
                Err(_) => {}
            }
        }
        (Kind::Drep, Phase::DreqSent) => {
            if s.transition(|p| p == Phase::DreqSent, Phase::Disconnected).is_ok() {
                disconnected(s, true);
            }
        }
        _ => {}
    }
}

/// The CM connection closed without a goodbye: the peer died or went away.
/// Runs on the engine thread, and on a connect thread whose REQ could not be
/// sent: the move to Disconnected decides which of the two (or of this and
/// the application's disconnect) reports the end.
pub fn on_eof(s: &Arc<SoftId>, _c: &Arc<Conn>) {
    let moved = {
        let mut st = s.st();
        st.conn = None;
        let moved = st.phase.step(|p| p != Phase::Disconnected, Phase::Disconnected);
        if moved.is_ok() {
            st.peer_lost = true;
        }
        moved
    };
    match moved {
        Ok(Phase::Connected | Phase::RepSent | Phase::ConnResponse | Phase::DreqSent) => {
            deliver_sent(s);
            error_qp(s);
            s.post(RDMA_CM_EVENT_DISCONNECTED, 0, Param::zeroed(), Vec::new(), false);
            timewait(s);
        }
        Ok(Phase::ReqSent) => {
            s.post(RDMA_CM_EVENT_UNREACHABLE, -libc::ECONNRESET, Param::zeroed(), Vec::new(), false);
        }
        Ok(Phase::DreqRcvd) => {
            error_qp(s);
            timewait(s);
        }
        _ => {}
    }
}

pub(super) fn ud_param(gid: [u8; 16], sgid_index: u8, qpn: u32, qkey: u32) -> Param {
    let mut p = Param::zeroed();
    p.0.ud.ah_attr.is_global = 1;
    p.0.ud.ah_attr.port_num = 1;
    p.0.ud.ah_attr.grh.dgid.raw = gid;
    p.0.ud.ah_attr.grh.sgid_index = sgid_index;
    p.0.ud.ah_attr.grh.hop_limit = 64;
    p.0.ud.qp_num = qpn;
    p.0.ud.qkey = qkey;
    p
}

pub fn join(s: &Arc<SoftId>, group: SocketAddr, flags: u32, context: usize) -> Result<()> {
    let src = {
        let st = s.st();
        if !matches!(st.phase.get(), Phase::AddrResolved | Phase::RouteResolved | Phase::Bound) {
            return Err(Errno::EINVAL);
        }
        st.src.ok_or(Errno::EINVAL)?
    };
    if s.st().mcast.iter().any(|g| g.addr.ip() == group.ip()) {
        return Err(Errno(libc::EADDRINUSE));
    }
    // RoCE v2's group GID, as the kernel CM makes it (the soft device's GIDs are
    // RoCE v2's): an IPv4 group's IPv4-mapped address, an IPv6 group's itself.
    let mgid = net::gid_of(group.ip());
    let qp = s.qp();
    let send_only = flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
    let mut attached = false;
    let mut status = 0;
    if !qp.is_null() && !send_only {
        let g = ibv_gid { raw: mgid };
        // SAFETY: a live QP of this id, a valid gid.
        match unsafe { ibv_attach_mcast(qp, &g, 0) } {
            0 => attached = true,
            e => status = -e.abs(),
        }
    }
    s.st().mcast.push(super::Mcast { addr: group, mgid, attached, context });
    let sgid = dev()?.gid_index(src.ip());
    let mut p = ud_param(mgid, sgid, 0xFF_FFFF, RDMA_UDP_QKEY);
    p.0.ud.private_data = context as *const libc::c_void;
    let ev = if status == 0 { RDMA_CM_EVENT_MULTICAST_JOIN } else { RDMA_CM_EVENT_MULTICAST_ERROR };
    s.post(ev, status, p, Vec::new(), true);
    Ok(())
}

pub fn leave(s: &Arc<SoftId>, group: SocketAddr) -> Result<()> {
    let g = {
        let mut st = s.st();
        let i = st.mcast.iter().position(|g| g.addr.ip() == group.ip()).ok_or(Errno(libc::EADDRNOTAVAIL))?;
        st.mcast.remove(i)
    };
    s.core.drop_queued_mc(g.context);
    let qp = s.qp();
    if g.attached && !qp.is_null() {
        let gid = ibv_gid { raw: g.mgid };
        // SAFETY: a live QP of this id, a valid gid.
        unsafe { ibv_detach_mcast(qp, &gid, 0) };
    }
    Ok(())
}

/// The id is destroyed: say goodbye to the peer and release every socket.
pub fn teardown(s: &Arc<SoftId>) {
    // Disconnected at once, with `dead`: every transition racing this one
    // (a message, an EOF, a timer) now loses, so the goodbye below is the last word.
    let phase = {
        let mut st = s.st();
        st.dead = true;
        st.phase.step(|_| true, Phase::Disconnected).unwrap_or_else(|p| p)
    };
    if phase == Phase::Listening {
        super::ibcm::listening(s, false);
    }
    match phase {
        p if p.is_connected() => {
            let _ = send(s, &Msg::new(Kind::Dreq));
        }
        Phase::DreqRcvd => {
            let _ = send(s, &Msg::new(Kind::Drep));
        }
        Phase::ReqRcvd | Phase::Answering if !s.is_ud() => {
            let mut r = Msg::new(Kind::Rej);
            r.status = REJ_CONSUMER;
            let _ = send(s, &r);
        }
        _ => {}
    }
    let e = engine::get();
    let (listener, udp, conn, groups) = {
        let mut st = s.st();
        st.bound = None;
        st.claim = None;
        st.path = None;
        (st.listener.take(), st.udp.take(), st.conn.take(), std::mem::take(&mut st.mcast))
    };
    if let Some(t) = listener {
        e.remove(t);
    }
    if let Some((t, _)) = udp {
        if t != 0 {
            e.remove(t);
        }
    }
    if let Some(c) = conn {
        e.remove(c.token);
    }
    let qp = s.qp();
    for g in groups {
        if g.attached && !qp.is_null() {
            let gid = ibv_gid { raw: g.mgid };
            // SAFETY: a live QP of this id, a valid gid.
            unsafe { ibv_detach_mcast(qp, &gid, 0) };
        }
    }
    let _ = s.core.with_public(|p| {
        p.route.path_rec = std::ptr::null_mut();
        p.route.num_paths = 0;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_data_is_padded_to_the_message_size_and_never_longer() {
        assert_eq!(padded(b"ab", 4), b"ab\0\0");
        let long = [7u8; REQ_DATA + 200];
        let p = padded(&long, REQ_DATA);
        assert_eq!(p.len(), REQ_DATA, "a peer's oversized data is cut, not reported as length 0 (u8 wrap)");
        assert!(p.iter().all(|&b| b == 7));
    }
}
