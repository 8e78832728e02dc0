//! The IB CM over RoCEv2: how a soft-fabric id connects to (and accepts connections
//! from) a kernel rdma_cm on rxe or a RoCE NIC.
//!
//! The messages are MADs on QP1 of the device context's RoCEv2 endpoint (softverbs'
//! `mad_*` hook calls); their layouts are `mad`'s. Everything above the wire is the stream
//! CM's (`conn`): this module turns its [`Msg`]s into MADs and MADs back into `Msg`s, and
//! adds what a datagram wire needs: comm IDs to match messages to ids, transaction IDs,
//! retransmission of REQ, REP and DREQ until answered, and answers to duplicates (a
//! duplicate REP gets the RTU again, a DREQ for a connection we no longer have gets a DREP,
//! a duplicate REQ is dropped: our REP is being resent until the RTU comes).
//!
//! When: an active id uses it when its destination is an IPv4 address of another host
//! and its TCP connect is refused (no soft-fabric listener there) while the context has a
//! RoCEv2 endpoint on the source address, or always with `SOFTVERBS_WIRE=roce`
//! (softverbs' `roce_mode`). A listener takes REQs from either wire.
//!
//! PSNs: an IB CM message carries the PSN its sender will *receive* first, the stream CM's
//! the one it will send first; so for these ids `init_qp_attr` swaps `my_psn`/`peer.psn`.

use super::conn::{self, REJ_DATA, REP_DATA};
use super::mad::{self, cma, CmMsg, MAD_LEN};
use super::wire::{Kind, Msg};
use super::{dev, engine, Phase, SoftId};
use crate::cm::event::Param;
use crate::cm::registry::lock;
use crate::sys::{Errno, Result};
use rdma_abi::cma::*;
use rdma_abi::verbs::ibv_context;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

/// How long REQ, REP and DREQ wait for their answer before they are sent again, and how
/// many times. The kernel waits 4-6 s between tries; a shorter first wait recovers a lost
/// packet sooner, and duplicates are harmless.
const RESEND: Duration = Duration::from_millis(1000);
const TRIES: u32 = 15;
const DREQ_TRIES: u32 = 5;
/// A SIDR client gives up after 4 s, as the stream CM's does.
const SIDR_TRIES: u32 = 3;
/// `ack_timeout` the kernel's rdma_cm carries for RoCE (packet life 18 + 1).
const ACK_TIMEOUT: u8 = 19;
const CM_RESPONSE_TIMEOUT: u8 = 20;
const MAX_CM_RETRIES: u8 = 15;

/// An id's IB CM connection.
#[derive(Clone, Debug)]
pub struct RoceConn {
    pub local: Ipv4Addr,
    pub remote: Ipv4Addr,
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// REQ's transaction ID (REP, RTU and REJ carry it too).
    pub tid: u64,
    /// The last DREQ's (a DREP echoes it).
    pub dreq_tid: u64,
    pub remote_qpn: u32,
    /// Bumped whenever an answer arrives, so a pending resend knows it is obsolete.
    gen: u64,
    /// Our REQ (or SIDR REP) to send again, and how often a missing listener refused
    /// the REQ (see `refused_retry`).
    sent: Option<Box<[u8; MAD_LEN]>>,
    refused: u32,
    /// SIDR: the service ID requested.
    service_id: u64,
    /// We answered the peer's REQ (a REJ from us then refuses a REQ, else a REP).
    passive: bool,
}

#[derive(Default)]
struct Registry {
    /// Our comm ID → id.
    ids: HashMap<u32, Weak<SoftId>>,
    /// (peer address, its comm ID) → our comm ID: a duplicate REQ finds its id.
    remote: HashMap<(Ipv4Addr, u32), u32>,
}

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(Mutex::default)
}

fn ca_guid() -> u64 {
    static G: OnceLock<u64> = OnceLock::new();
    *G.get_or_init(|| (super::random_u32() as u64) << 32 | super::random_u32() as u64 | 0x0200_0000_0000_0000)
}

/// A comm ID of ours: the context's port in the high 16 bits, so that another soft-fabric
/// process owning UDP 4791 here knows to hand us the answers (softverbs' roce/share.rs).
fn fresh_comm_id() -> u32 {
    let port = context_port();
    loop {
        let c = if port != 0 { (port as u32) << 16 | (super::random_u32() & 0xffff) } else { super::random_u32() };
        if c != 0 && !lock(registry()).ids.contains_key(&c) {
            return c;
        }
    }
}

/// The device context's port (its soft-fabric endpoint), 0 if unknown.
fn context_port() -> u16 {
    static P: OnceLock<u16> = OnceLock::new();
    *P.get_or_init(|| {
        let (Some(f), Ok(c)) = (super::hook::ctx_endpoint(), ctx()) else { return 0 };
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        // SAFETY: the soft device's context; ss is live for the call.
        if unsafe { f(c, std::ptr::null(), &mut ss) } != 0 {
            return 0;
        }
        // SAFETY: ss holds a sockaddr_in or sockaddr_in6; both keep the port at offset 2.
        u16::from_be(unsafe { (*(&ss as *const libc::sockaddr_storage as *const libc::sockaddr_in)).sin_port })
    })
}

/// A listener starts (or stops) taking REQs for its service ID over RoCEv2.
pub fn listening(s: &SoftId, on: bool) {
    let Some(port) = s.st().src.map(|a| a.port()) else { return };
    let (Some(f), Ok(c)) = (super::hook::roce().and_then(|o| o.roce_service), ctx()) else { return };
    // SAFETY: the soft device's context.
    unsafe { f(c, cma::service_id(s.ps() as u16, port), on as i32) };
}

fn ctx() -> Result<*mut ibv_context> {
    Ok(dev()?.ctx as *mut ibv_context)
}

fn sockaddr_v4(ip: Ipv4Addr) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr { s_addr: u32::from(ip).to_be() },
        sin_zero: [0; 8],
    }
}

/// softverbs' RoCEv2 mode for our address `ip`: 0 none, 1 when the peer has no
/// soft-fabric listener, 2 always.
pub fn mode(ip: IpAddr) -> i32 {
    let (Some(ops), IpAddr::V4(v4)) = (super::hook::roce(), ip.to_canonical()) else { return 0 };
    let (Some(f), Ok(c)) = (ops.roce_mode, ctx()) else { return 0 };
    let sa = sockaddr_v4(v4);
    let mut m = 0;
    // SAFETY: the soft device's context; sa and m are live for the call.
    let r = unsafe { f(c, (&sa as *const libc::sockaddr_in).cast(), std::mem::size_of::<libc::sockaddr_in>() as u32, &mut m) };
    if r == 0 {
        start();
        m
    } else {
        0
    }
}

/// Watches the context's MAD queue from the CM engine (once).
pub fn start() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let (Some(ops), Ok(c)) = (super::hook::roce(), ctx()) else { return };
        let Some(f) = ops.mad_fd else { return };
        let mut fd = -1;
        // SAFETY: the soft device's context; fd is live for the call.
        if unsafe { f(c, &mut fd) } == 0 && fd >= 0 {
            engine::get().add_mad_fd(fd);
        }
    });
}

fn mad_send(from: Ipv4Addr, to: Ipv4Addr, m: &[u8; MAD_LEN]) -> Result<()> {
    let f = super::hook::roce().and_then(|o| o.mad_send).ok_or(Errno(libc::ENETUNREACH))?;
    let (a, b) = (sockaddr_v4(from), sockaddr_v4(to));
    // SAFETY: the soft device's context; the addresses and the MAD are live for the call.
    let r = unsafe { f(ctx()?, (&a as *const libc::sockaddr_in).cast(), (&b as *const libc::sockaddr_in).cast(), std::mem::size_of::<libc::sockaddr_in>() as u32, m.as_ptr()) };
    crate::verbs::verr(r)
}

fn random_tid() -> u64 {
    (super::random_u32() as u64) << 32 | super::random_u32() as u64
}

/// The IB MTU code that fits the route to `dst` (1024 on a 1500-byte link), at most 4096.
fn mtu_code(dst: Ipv4Addr) -> u8 {
    let Ok(s) = std::net::UdpSocket::bind("0.0.0.0:0") else { return 3 };
    if s.connect((dst, 4791)).is_err() {
        return 3;
    }
    let mut mtu: i32 = 0;
    let mut len = 4u32;
    // SAFETY: a live int of `len` bytes.
    let r = unsafe { libc::getsockopt(std::os::fd::AsRawFd::as_raw_fd(&s), libc::IPPROTO_IP, libc::IP_MTU, (&mut mtu as *mut i32).cast(), &mut len) };
    if r != 0 {
        return 3;
    }
    match mtu - 80 {
        m if m >= 4096 => 5,
        m if m >= 2048 => 4,
        m if m >= 1024 => 3,
        m if m >= 512 => 2,
        _ => 1,
    }
}

/// Sends `m` (our comm IDs and TIDs filled in) and, for REQ/REP/DREQ, resends it until
/// an answer bumps the connection's generation or the tries run out.
fn transmit(s: &Arc<SoftId>, tid: u64, msg: CmMsg) -> Result<()> {
    let (rc, wants_answer) = {
        let st = s.st();
        let rc = st.roce.clone().ok_or(Errno(libc::ENOTCONN))?;
        (rc, matches!(msg, CmMsg::Req(_) | CmMsg::Rep(_) | CmMsg::Dreq(_) | CmMsg::SidrReq(_)))
    };
    let bytes = mad::encode(tid, 0, &msg);
    if matches!(msg, CmMsg::Req(_) | CmMsg::SidrReq(_) | CmMsg::SidrRep(_)) {
        if let Some(r) = s.st().roce.as_mut() {
            r.sent = Some(Box::new(bytes));
        }
    }
    mad_send(rc.local, rc.remote, &bytes)?;
    if wants_answer {
        let tries = match msg {
            CmMsg::Dreq(_) => DREQ_TRIES,
            CmMsg::SidrReq(_) => SIDR_TRIES,
            _ => TRIES,
        };
        resend_later(Arc::downgrade(s), rc.gen, bytes, tries);
    }
    Ok(())
}

fn resend_later(w: Weak<SoftId>, gen: u64, bytes: [u8; MAD_LEN], left: u32) {
    engine::get().after(RESEND, move || {
        let Some(s) = w.upgrade() else { return };
        let (rc, phase) = {
            let st = s.st();
            (st.roce.clone(), st.phase.get())
        };
        let Some(rc) = rc.filter(|rc| rc.gen == gen) else { return };
        let awaiting = matches!(phase, Phase::ReqSent | Phase::RepSent | Phase::DreqSent);
        if !awaiting {
            return;
        }
        if left > 0 {
            let _ = mad_send(rc.local, rc.remote, &bytes);
            resend_later(w, gen, bytes, left - 1);
            return;
        }
        gave_up(&s, phase);
    });
}

/// No answer after every try: the peer is unreachable (REQ, REP) or gone (DREQ).
fn gave_up(s: &Arc<SoftId>, phase: Phase) {
    if s.transition(|p| p == phase, Phase::Disconnected).is_err() {
        return;
    }
    forget(s);
    match phase {
        Phase::DreqSent => {
            s.post(RDMA_CM_EVENT_DISCONNECTED, 0, Param::zeroed(), Vec::new(), false);
        }
        _ => {
            conn::error_qp(s);
            s.post(RDMA_CM_EVENT_UNREACHABLE, -libc::ETIMEDOUT, Param::zeroed(), Vec::new(), s.is_ud());
        }
    }
}

/// The connection is over on our side: its id no longer answers to its comm ID.
pub fn forget(s: &SoftId) {
    let rc = s.st().roce.take();
    if let Some(rc) = rc {
        let mut r = lock(registry());
        r.ids.remove(&rc.local_comm_id);
        r.remote.remove(&(rc.remote, rc.remote_comm_id));
    }
}

/// Starts an active connection: `m` is the stream CM's REQ for it.
pub fn connect(s: &Arc<SoftId>, m: &Msg, src: SocketAddr, dst: SocketAddr) -> Result<()> {
    let (IpAddr::V4(local), IpAddr::V4(remote)) = (src.ip().to_canonical(), dst.ip().to_canonical()) else {
        return Err(Errno(libc::ENETUNREACH));
    };
    let ps = s.ps() as u16;
    let hdr = cma::CmaHdr::new(src.port(), IpAddr::V4(local), IpAddr::V4(remote));
    let private = cma::req_private_data(&hdr, &m.private).ok_or(Errno::EINVAL)?;
    let comm = fresh_comm_id();
    let tid = random_tid();
    let ack_timeout = s.core.state().options.ack_timeout.unwrap_or(ACK_TIMEOUT);
    let req = mad::Req {
        local_comm_id: comm,
        vendor_id: m.ece_vendor & 0x00ff_ffff,
        service_id: cma::service_id(ps, dst.port()),
        local_ca_guid: ca_guid(),
        local_qpn: m.qp_num,
        responder_resources: m.responder_resources,
        initiator_depth: m.initiator_depth,
        remote_cm_response_timeout: CM_RESPONSE_TIMEOUT,
        transport_type: mad::transport::RC,
        e2e_flow_control: m.flow_control != 0,
        starting_psn: m.psn,
        local_cm_response_timeout: CM_RESPONSE_TIMEOUT,
        retry_count: m.retry_count.min(7),
        pkey: 0xffff,
        path_mtu: mtu_code(remote),
        rnr_retry_count: m.rnr_retry_count.min(7),
        max_cm_retries: MAX_CM_RETRIES,
        srq: m.srq != 0,
        primary: mad::Path {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: mad::gid_of_v4(local),
            remote_gid: mad::gid_of_v4(remote),
            flow_label: mad::flow_label(src.port(), dst.port()),
            traffic_class: m.tclass,
            hop_limit: 64,
            local_ack_timeout: ack_timeout,
            ..mad::Path::default()
        },
        private_data: private,
        ..mad::Req::default()
    };
    {
        let mut st = s.st();
        if st.dead || st.phase.get() != Phase::ReqSent {
            return Ok(());
        }
        st.roce = Some(RoceConn { local, remote, local_comm_id: comm, remote_comm_id: 0, tid, dreq_tid: 0, remote_qpn: 0, gen: 0, sent: None, refused: 0, service_id: 0, passive: false });
    }
    lock(registry()).ids.insert(comm, Arc::downgrade(s));
    transmit(s, tid, CmMsg::Req(req))
}

/// The stream CM sends `m` on an id whose connection is an IB CM one.
pub fn send(s: &Arc<SoftId>, m: &Msg) -> Result<()> {
    let rc = s.st().roce.clone().ok_or(Errno(libc::ENOTCONN))?;
    let (lc, rcid) = (rc.local_comm_id, rc.remote_comm_id);
    match m.kind {
        Kind::Rep => {
            let mut private = [0u8; REP_DATA];
            private[..m.private.len().min(REP_DATA)].copy_from_slice(&m.private[..m.private.len().min(REP_DATA)]);
            let rep = mad::Rep {
                local_comm_id: lc,
                remote_comm_id: rcid,
                local_qpn: m.qp_num,
                vendor_id: m.ece_vendor & 0x00ff_ffff,
                starting_psn: m.psn,
                responder_resources: m.responder_resources,
                initiator_depth: m.initiator_depth,
                target_ack_delay: 15,
                e2e_flow_control: m.flow_control != 0,
                rnr_retry_count: m.rnr_retry_count.min(7),
                srq: m.srq != 0,
                local_ca_guid: ca_guid(),
                private_data: private,
                ..mad::Rep::default()
            };
            transmit(s, rc.tid, CmMsg::Rep(rep))
        }
        Kind::Rtu => transmit(s, rc.tid, CmMsg::Rtu(mad::Rtu { local_comm_id: lc, remote_comm_id: rcid, ..mad::Rtu::default() })),
        Kind::Rej => {
            let mut private = [0u8; REJ_DATA];
            private[..m.private.len().min(REJ_DATA)].copy_from_slice(&m.private[..m.private.len().min(REJ_DATA)]);
            let msg_rejected = if rc.passive { mad::msg_kind::REQ } else { mad::msg_kind::REP };
            let rej = mad::Rej { local_comm_id: lc, remote_comm_id: rcid, msg_rejected, reason: m.status as u16, private_data: private, ..mad::Rej::default() };
            transmit(s, rc.tid, CmMsg::Rej(rej))
        }
        Kind::Dreq => {
            let tid = random_tid();
            if let Some(r) = s.st().roce.as_mut() {
                r.dreq_tid = tid;
            }
            transmit(s, tid, CmMsg::Dreq(mad::Dreq { local_comm_id: lc, remote_comm_id: rcid, remote_qpn: rc.remote_qpn, ..mad::Dreq::default() }))
        }
        Kind::Drep => transmit(s, rc.dreq_tid, CmMsg::Drep(mad::Drep { local_comm_id: lc, remote_comm_id: rcid, ..mad::Drep::default() })),
        _ => Err(Errno::EINVAL),
    }
}

/// MADs arrived: handle every waiting one.
pub fn on_mads() {
    let (Some(f), Ok(c)) = (super::hook::roce().and_then(|o| o.mad_recv), ctx()) else { return };
    for _ in 0..256 {
        let mut buf = [0u8; MAD_LEN];
        // SAFETY: all-zero sockaddr_storage values are valid.
        let (mut from, mut to): (libc::sockaddr_storage, libc::sockaddr_storage) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        // SAFETY: the soft device's context; buffers live and sized as the hook says.
        if unsafe { f(c, buf.as_mut_ptr(), &mut from, &mut to) } != 0 {
            return;
        }
        let v4 = |ss: &libc::sockaddr_storage| {
            // SAFETY: softverbs wrote an AF_INET sockaddr.
            let sin = unsafe { &*(ss as *const libc::sockaddr_storage as *const libc::sockaddr_in) };
            Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))
        };
        let Ok((h, msg)) = mad::decode(&buf) else { continue };
        on_mad(v4(&from), v4(&to), h.tid, msg);
    }
}

/// The id a message names by our comm ID, if it came from that connection's peer.
fn id_of(comm: u32, from: Ipv4Addr) -> Option<Arc<SoftId>> {
    let s = lock(registry()).ids.get(&comm)?.upgrade()?;
    let ok = s.st().roce.as_ref().is_some_and(|r| r.remote == from);
    ok.then_some(s)
}

/// Records the peer's side of the connection from its REP (or REQ) and invalidates pending
/// resends.
fn answered(s: &SoftId, remote_comm_id: Option<u32>, remote_qpn: Option<u32>) {
    let mut st = s.st();
    if let Some(r) = st.roce.as_mut() {
        r.gen += 1;
        if let Some(c) = remote_comm_id {
            r.remote_comm_id = c;
        }
        if let Some(q) = remote_qpn {
            r.remote_qpn = q;
        }
    }
}

fn reply_unknown(from: Ipv4Addr, to: Ipv4Addr, tid: u64, msg: CmMsg) {
    let _ = mad_send(to, from, &mad::encode(tid, 0, &msg));
}

fn on_mad(from: Ipv4Addr, to: Ipv4Addr, tid: u64, msg: CmMsg) {
    match msg {
        CmMsg::Req(req) => on_req(from, to, tid, &req),
        CmMsg::Rep(rep) => {
            let Some(s) = id_of(rep.remote_comm_id, from) else { return };
            match s.phase() {
                Phase::ReqSent => {
                    answered(&s, Some(rep.local_comm_id), Some(rep.local_qpn));
                    let mut m = Msg::new(Kind::Rep);
                    m.qp_num = rep.local_qpn;
                    m.psn = rep.starting_psn;
                    m.responder_resources = rep.responder_resources;
                    m.initiator_depth = rep.initiator_depth;
                    m.rnr_retry_count = rep.rnr_retry_count;
                    m.flow_control = rep.e2e_flow_control as u8;
                    m.srq = rep.srq as u8;
                    m.ece_vendor = rep.vendor_id;
                    m.private = rep.private_data.to_vec();
                    conn::on_msg(&s, m);
                }
                // Our RTU was lost: the passive side resent its REP.
                Phase::Connected | Phase::ConnResponse => {
                    let _ = send(&s, &Msg::new(Kind::Rtu));
                }
                _ => {}
            }
        }
        CmMsg::Rtu(rtu) => {
            if let Some(s) = id_of(rtu.remote_comm_id, from) {
                answered(&s, None, None);
                conn::on_msg(&s, Msg::new(Kind::Rtu));
            }
        }
        CmMsg::Rej(rej) => {
            let Some(s) = id_of(rej.remote_comm_id, from) else { return };
            if refused_retry(&s, &rej) {
                return;
            }
            answered(&s, None, None);
            let mut m = Msg::new(Kind::Rej);
            m.status = rej.reason as u32;
            m.private = rej.private_data.to_vec();
            conn::on_msg(&s, m);
            forget(&s);
        }
        // The peer needs more time: our resends go on (a duplicate costs it nothing).
        CmMsg::Mra(_) => {}
        CmMsg::Dreq(dreq) => {
            let Some(s) = id_of(dreq.remote_comm_id, from) else {
                // Not (or no longer) ours: the kernel answers DREP all the same.
                let drep = mad::Drep { local_comm_id: dreq.remote_comm_id, remote_comm_id: dreq.local_comm_id, ..mad::Drep::default() };
                return reply_unknown(from, to, tid, CmMsg::Drep(drep));
            };
            if let Some(r) = s.st().roce.as_mut() {
                r.dreq_tid = tid;
            }
            answered(&s, None, None);
            conn::on_msg(&s, Msg::new(Kind::Dreq));
        }
        CmMsg::Drep(drep) => {
            if let Some(s) = id_of(drep.remote_comm_id, from) {
                answered(&s, None, None);
                conn::on_msg(&s, Msg::new(Kind::Drep));
            }
        }
        CmMsg::SidrReq(req) => on_sidr_req(from, to, tid, &req),
        CmMsg::SidrRep(rep) => {
            let Some(s) = id_of(rep.request_id, from) else { return };
            // No listener (yet): the same gap as a REJ 8 (perftest -R's UD mode listens again).
            if rep.status == mad::sidr_status::NO_LISTENER && ask_again(&s) {
                return;
            }
            answered(&s, None, None);
            let mut m = Msg::new(Kind::SidrRep);
            m.status = rep.status as u32;
            m.qp_num = rep.qpn;
            m.qkey = rep.qkey;
            m.tid = s.st().peer.tid;
            m.private = rep.private_data.to_vec();
            super::sidr::on_reply(&s, m);
        }
    }
}

/// Starts a SIDR (UD) query from `src` to `dst` with the IB CM.
pub fn sidr_connect(s: &Arc<SoftId>, private: &[u8], src: SocketAddr, dst: SocketAddr) -> Result<()> {
    let (IpAddr::V4(local), IpAddr::V4(remote)) = (src.ip().to_canonical(), dst.ip().to_canonical()) else {
        return Err(Errno(libc::ENETUNREACH));
    };
    let hdr = cma::CmaHdr::new(src.port(), IpAddr::V4(local), IpAddr::V4(remote));
    let private_data = cma::sidr_req_private_data(&hdr, private).ok_or(Errno::EINVAL)?;
    let (rid, tid) = (fresh_comm_id(), random_tid());
    let service_id = cma::service_id(s.ps() as u16, dst.port());
    {
        let mut st = s.st();
        st.phase.step(|p| p == Phase::RouteResolved, Phase::ReqSent).map_err(|_| Errno::EINVAL)?;
        st.peer.tid = tid;
        st.roce = Some(RoceConn { local, remote, local_comm_id: rid, remote_comm_id: 0, tid, dreq_tid: 0, remote_qpn: 0, gen: 0, sent: None, refused: 0, service_id, passive: false });
    }
    lock(registry()).ids.insert(rid, Arc::downgrade(s));
    transmit(s, tid, CmMsg::SidrReq(mad::SidrReq { request_id: rid, pkey: 0xffff, service_id, private_data }))
}

/// A UD listener's answer to a SIDR request that came over RoCEv2.
pub fn sidr_reply(s: &Arc<SoftId>, status: u32, qpn: u32, data: &[u8]) -> Result<()> {
    if data.len() > super::conn::SIDR_REP_DATA {
        return Err(Errno::EINVAL);
    }
    let rc = {
        let mut st = s.st();
        let rc = st.roce.clone().ok_or(Errno::EINVAL)?;
        st.phase.step(|p| p == Phase::ReqRcvd, Phase::Answering).map_err(|_| Errno::EINVAL)?;
        rc
    };
    let mut private_data = [0u8; super::conn::SIDR_REP_DATA];
    private_data[..data.len()].copy_from_slice(data);
    let rep = mad::SidrRep { request_id: rc.remote_comm_id, status: status as u8, qpn, service_id: rc.service_id, qkey: RDMA_UDP_QKEY, private_data, ..mad::SidrRep::default() };
    let r = transmit(s, rc.tid, CmMsg::SidrRep(rep));
    let to = if r.is_ok() && status == 0 { Phase::Connected } else if r.is_ok() { Phase::Disconnected } else { Phase::ReqRcvd };
    let _ = s.transition(|p| p == Phase::Answering, to);
    r
}

fn on_sidr_req(from: Ipv4Addr, to: Ipv4Addr, tid: u64, req: &mad::SidrReq) {
    // A copy: the client did not get our reply (resend it), or we have not answered yet.
    let known = lock(registry()).remote.get(&(from, req.request_id)).copied();
    if let Some(comm) = known {
        let child = lock(registry()).ids.get(&comm).and_then(Weak::upgrade);
        if let Some(sent) = child.and_then(|c| c.st().roce.as_ref().and_then(|r| r.sent.clone())) {
            let _ = mad_send(to, from, &sent);
        }
        return;
    }
    let answer = |status: u8| {
        let rep = mad::SidrRep { request_id: req.request_id, status, service_id: req.service_id, ..mad::SidrRep::default() };
        reply_unknown(from, to, tid, CmMsg::SidrRep(rep));
    };
    let Some((ps, port)) = cma::split_service_id(req.service_id) else { return answer(mad::sidr_status::NO_LISTENER) };
    let (Some(l), Some(hdr)) = (listener(ps, port, to), cma::decode_hdr(&req.private_data)) else { return answer(mad::sidr_status::NO_LISTENER) };
    let mut m = Msg::new(Kind::SidrReq);
    m.port_space = ps;
    m.tid = tid;
    m.private = req.private_data[cma::CMA_HDR_LEN..].to_vec();
    let local = SocketAddr::new(IpAddr::V4(to), port);
    let remote = SocketAddr::new(IpAddr::V4(from), hdr.port);
    let comm = fresh_comm_id();
    let rc = RoceConn { local: to, remote: from, local_comm_id: comm, remote_comm_id: req.request_id, tid, dreq_tid: 0, remote_qpn: 0, gen: 0, sent: None, refused: 0, service_id: req.service_id, passive: true };
    let child = super::sidr::sidr_request(&l, &m, Some(local), Some(remote), |child, st| {
        st.roce = Some(rc.clone());
        let mut r = lock(registry());
        r.ids.insert(comm, Arc::downgrade(child));
        r.remote.insert((from, req.request_id), comm);
    });
    if child.is_none() {
        answer(mad::sidr_status::REJECTED);
    }
}

/// How many times a REQ refused for want of a listener is sent again, 40 ms apart: for
/// about a second, since a kernel listener under load shows in `rdma resource` a moment
/// before its CM takes REQs.
const REFUSED_RETRIES: u32 = 25;
const REFUSED_GAP: Duration = Duration::from_millis(40);

/// A REQ refused because nobody listens (REJ 8) is tried again for a moment before the
/// refusal counts: programs that tear a listener down and listen again on the same port
/// (perftest's two rdma_cm phases) race their peer by a few milliseconds, as the stream
/// CM's `connect_local` knows.
fn refused_retry(s: &Arc<SoftId>, rej: &mad::Rej) -> bool {
    if rej.reason != mad::rej_reason::INVALID_SERVICE_ID || rej.msg_rejected != mad::msg_kind::REQ {
        return false;
    }
    ask_again(s)
}

/// Sends our REQ (or SIDR_REQ) again after `REFUSED_GAP`, unless that was done
/// `REFUSED_RETRIES` times already. True if it will be.
fn ask_again(s: &Arc<SoftId>) -> bool {
    let (rc, gen) = {
        let mut st = s.st();
        if st.phase.get() != Phase::ReqSent {
            return false;
        }
        let Some(r) = st.roce.as_mut() else { return false };
        if r.refused >= REFUSED_RETRIES || r.sent.is_none() {
            return false;
        }
        r.refused += 1;
        r.gen += 1;
        (r.clone(), r.gen)
    };
    let w = Arc::downgrade(s);
    engine::get().after(REFUSED_GAP, move || {
        let Some(s) = w.upgrade() else { return };
        let still = s.st().roce.as_ref().is_some_and(|r| r.gen == gen) && s.phase() == Phase::ReqSent;
        if let (true, Some(bytes)) = (still, rc.sent.as_deref()) {
            if mad_send(rc.local, rc.remote, bytes).is_ok() {
                resend_later(w, gen, *bytes, TRIES);
            }
        }
    });
    true
}

/// A listening id of ours for `(ps, port)` that takes requests to `dst`.
fn listener(ps: u16, port: u16, dst: Ipv4Addr) -> Option<Arc<SoftId>> {
    engine::get().listeners().into_iter().filter_map(|w| w.upgrade()).find(|l| {
        if l.ps() != ps as u32 || l.phase() != Phase::Listening {
            return false;
        }
        let Some(a) = l.st().src else { return false };
        a.port() == port && (a.ip().is_unspecified() || a.ip().to_canonical() == IpAddr::V4(dst))
    })
}

fn on_req(from: Ipv4Addr, to: Ipv4Addr, tid: u64, req: &mad::Req) {
    // A copy of a REQ we know: our REP, if sent, is being resent until the RTU comes.
    if lock(registry()).remote.contains_key(&(from, req.local_comm_id)) {
        return;
    }
    let reject = |reason: u16| {
        let rej = mad::Rej { local_comm_id: 0, remote_comm_id: req.local_comm_id, msg_rejected: mad::msg_kind::REQ, reason, ..mad::Rej::default() };
        reply_unknown(from, to, tid, CmMsg::Rej(rej));
    };
    let Some((ps, port)) = cma::split_service_id(req.service_id) else { return reject(mad::rej_reason::INVALID_SERVICE_ID) };
    let Some(l) = listener(ps, port, to) else { return reject(mad::rej_reason::INVALID_SERVICE_ID) };
    let Some(hdr) = cma::decode_hdr(&req.private_data) else { return reject(mad::rej_reason::CONSUMER_DEFINED) };
    if req.transport_type != mad::transport::RC || req.pkey != 0xffff {
        return reject(mad::rej_reason::CONSUMER_DEFINED);
    }
    let mut m = Msg::new(Kind::Req);
    m.port_space = ps;
    m.qp_num = req.local_qpn;
    m.psn = req.starting_psn;
    m.responder_resources = req.responder_resources;
    m.initiator_depth = req.initiator_depth;
    m.retry_count = req.retry_count;
    m.rnr_retry_count = req.rnr_retry_count;
    m.flow_control = req.e2e_flow_control as u8;
    m.srq = req.srq as u8;
    m.tclass = req.primary.traffic_class;
    m.ece_vendor = req.vendor_id;
    m.private = req.private_data[cma::CMA_HDR_LEN..].to_vec();
    let local = SocketAddr::new(IpAddr::V4(to), port);
    let remote = SocketAddr::new(IpAddr::V4(from), hdr.port);
    let comm = fresh_comm_id();
    let rc = RoceConn { local: to, remote: from, local_comm_id: comm, remote_comm_id: req.local_comm_id, tid, dreq_tid: 0, remote_qpn: req.local_qpn, gen: 0, sent: None, refused: 0, service_id: 0, passive: true };
    let made = conn::request_id(&l, &m, Some(local), Some(remote), |child, st| {
        st.roce = Some(rc.clone());
        let mut r = lock(registry());
        r.ids.insert(comm, Arc::downgrade(child));
        r.remote.insert((from, req.local_comm_id), comm);
    });
    if let Err(reason) = made {
        reject(reason as u16);
    }
}

