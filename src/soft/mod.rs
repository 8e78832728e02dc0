//! The soft backend: the CM in userspace over ordinary sockets, for our
//! software RDMA device (softverbs). Chosen when the loaded libibverbs
//! exports the softverbs hook (see `hook`).
//!
//! Model: an RDMA port is a TCP port (UDP for RDMA_PS_UDP/IPOIB) on the same
//! IP; the CM messages of `wire` travel on a TCP connection per connected id
//! (SIDR over UDP datagrams); the QP transport itself is softverbs', and the
//! CM tells it where the peer QP lives (`hook::add_peer`).

pub mod conn;
pub mod engine;
pub mod hook;
pub mod ibcm;
pub mod mad;
pub mod net;
pub mod phase;
pub mod ports;
pub mod sidr;
pub mod sock;
pub mod wire;

#[cfg(test)]
mod port_tests;
#[cfg(test)]
mod mad_tests;
#[cfg(test)]
mod race_tests;

pub use phase::{Phase, PhaseCell};

use crate::backend::{Backend, ConnParam};
use crate::cm::event::Param;
use crate::cm::options::Opt;
use crate::cm::registry::lock;
use crate::cm::IdCore;
use crate::sys::{Errno, Result};
use crate::verbs::*;
use rdma_abi::cma::*;
use rdma_abi::verbs::*;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// What the peer told us about its side of the connection.
#[derive(Clone, Debug, Default)]
pub struct Peer {
    pub qpn: u32,
    pub psn: u32,
    pub qkey: u32,
    pub gid: [u8; 16],
    pub endpoint: Option<SocketAddr>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub rnr_retry: u8,
    pub retry: u8,
    pub udp: Option<SocketAddr>,
    pub tid: u64,
}

pub struct St {
    pub phase: PhaseCell,
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    /// Reserved port / listener socket (bound at bind time).
    pub bound: Option<std::os::fd::OwnedFd>,
    /// The id's hold on its bound port, from bind to teardown.
    pub claim: Option<ports::PortClaim>,
    pub listener: Option<u64>,
    pub conn: Option<Arc<engine::Conn>>,
    pub udp: Option<(u64, Arc<std::net::UdpSocket>)>,
    pub peer: Peer,
    pub my_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry: u8,
    pub rnr_retry: u8,
    pub qp_num: u32,
    /// The connection's traffic class: the active side's TOS option, the
    /// passive side's from the REQ (the kernel CM carries it in the path).
    pub tclass: u8,
    pub path: Option<PathRec>,
    pub mcast: Vec<Mcast>,
    /// Set once the id is torn down: nothing may be posted for it after that.
    pub dead: bool,
    /// The CM connection ended without a goodbye (the peer died).
    pub peer_lost: bool,
    /// A listener's latest SIDR requests (client address, transaction id,
    /// the new id): a client retransmits until answered, and a copy must not
    /// make another CONNECT_REQUEST while the first is unanswered.
    pub sidr_seen: std::collections::VecDeque<(SocketAddr, u64, std::sync::Weak<SoftId>)>,
    /// The connection runs the IB CM over RoCEv2 (`ibcm`) instead of the stream CM.
    pub roce: Option<ibcm::RoceConn>,
    /// A SIDR client's private data (sent again if it moves to RoCEv2).
    pub peer_private: Vec<u8>,
}

pub struct Mcast {
    pub addr: SocketAddr,
    pub mgid: [u8; 16],
    pub attached: bool,
    /// The join's context (its events carry it).
    pub context: usize,
}

/// A path record allocated with libc (the app reads it through route.path_rec).
pub struct PathRec(pub *mut ibv_sa_path_rec);
// SAFETY: plain heap memory owned by the id.
unsafe impl Send for PathRec {}
impl Drop for PathRec {
    fn drop(&mut self) {
        // SAFETY: allocated by calloc in resolve_route, freed once.
        unsafe { libc::free(self.0.cast()) };
    }
}

pub struct SoftId {
    pub core: Arc<IdCore>,
    st: Mutex<St>,
}

impl SoftId {
    pub fn st(&self) -> MutexGuard<'_, St> {
        lock(&self.st)
    }
    /// The phase now: a hint for choosing what to try, which the `step`
    /// or `transition` that acts on it confirms.
    pub fn phase(&self) -> Phase {
        self.st().phase.get()
    }
    /// `PhaseCell::step` under one hold of the id's lock.
    pub fn transition(&self, from: impl FnOnce(Phase) -> bool, to: Phase) -> std::result::Result<Phase, Phase> {
        self.st().phase.step(from, to)
    }
    pub fn ps(&self) -> u32 {
        self.core.with_public(|p| p.ps).unwrap_or(0)
    }
    pub fn is_ud(&self) -> bool {
        matches!(self.ps(), RDMA_PS_UDP | RDMA_PS_IPOIB)
    }
    pub fn qp(&self) -> *mut ibv_qp {
        self.core.with_public(|p| p.qp).unwrap_or(std::ptr::null_mut())
    }
    pub fn post(&self, event: u32, status: i32, param: Param, private: Vec<u8>, ud: bool) {
        let mut p = self.core.pending(event, status, param);
        p.private = private;
        p.ud = ud;
        self.post_pending(p);
    }

    /// Queues an event unless the id is being destroyed. The check and the
    /// push happen under the id's lock, which teardown takes to set `dead`:
    /// so no event can slip in after destroy dropped the unread ones. An
    /// event that cannot be queued is discarded: a connect request's new id
    /// goes with it (its teardown rejects the peer, who would wait forever).
    pub fn post_pending(&self, p: crate::cm::Pending) {
        let st = self.st();
        if !st.dead {
            self.core.post(p);
            return;
        }
        drop(st);
        p.discard();
    }
}

/// The SoftId of an id, made on first use.
pub fn soft_id(core: &Arc<IdCore>) -> Arc<SoftId> {
    let mut st = core.state();
    if let Some(e) = st.extra().and_then(|x| x.ext.as_ref()) {
        if let Ok(s) = e.clone().downcast::<SoftId>() {
            return s;
        }
    }
    let s = Arc::new(SoftId {
        core: core.clone(),
        st: Mutex::new(St {
            phase: PhaseCell::default(),
            src: None,
            dst: None,
            bound: None,
            claim: None,
            listener: None,
            conn: None,
            udp: None,
            peer: Peer::default(),
            my_psn: random_u32() & 0xff_ffff,
            responder_resources: 0,
            initiator_depth: 0,
            retry: 7,
            rnr_retry: 7,
            qp_num: 0,
            tclass: 0,
            path: None,
            mcast: Vec::new(),
            dead: false,
            peer_lost: false,
            sidr_seen: std::collections::VecDeque::new(),
            roce: None,
            peer_private: Vec::new(),
        }),
    });
    st.extra_mut().ext = Some(s.clone());
    s
}

pub fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: getrandom into a live 4-byte buffer.
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), 4, 0) };
    u32::from_ne_bytes(b)
}

/// The soft device: its context, the PD shared by every id, its GID table.
pub struct Dev {
    pub ctx: usize,
    pub pd: usize,
    pub gids: Vec<[u8; 16]>,
}

static DEV: OnceLock<std::result::Result<Dev, Errno>> = OnceLock::new();

pub fn dev() -> Result<&'static Dev> {
    DEV.get_or_init(|| {
        let ctx = *crate::devices::contexts()?.first().ok_or(Errno::ENODEV)?;
        // SAFETY: an open device context.
        let pd = unsafe { ibv_alloc_pd(ctx) };
        if pd.is_null() {
            return Err(Errno::last());
        }
        // SAFETY: ctx is open.
        let pa = unsafe { crate::verbs::port_attr(ctx, 1) }.ok_or(Errno::ENODEV)?;
        let mut gids = Vec::new();
        for i in 0..pa.gid_tbl_len.max(0) {
            // SAFETY: all-zero is a valid ibv_gid.
            let mut g: ibv_gid = unsafe { std::mem::zeroed() };
            // SAFETY: ctx is open; g is writable.
            if unsafe { ibv_query_gid(ctx, 1, i, &mut g) } != 0 {
                break;
            }
            // SAFETY: reading the raw bytes of the union.
            gids.push(unsafe { g.raw });
        }
        Ok(Dev { ctx: ctx as usize, pd: pd as usize, gids })
    })
    .as_ref()
    .map_err(|e| *e)
}

impl Dev {
    pub fn gid_index(&self, ip: IpAddr) -> u8 {
        let g = net::gid_of(ip);
        self.gids.iter().position(|x| *x == g).unwrap_or(0) as u8
    }
}

/// Attaches the id to the device for a specific local address and fills route.addr.
pub fn set_addrs(s: &SoftId, src: Option<SocketAddr>, dst: Option<SocketAddr>) -> Result<()> {
    let attach = src.map(|a| !a.ip().is_unspecified()).unwrap_or(false);
    let d = if attach { Some(dev()?) } else { None };
    s.core.with_public(|p| {
        if let Some(a) = src {
            // SAFETY: writing the storage member of a union we own.
            net::to_storage(&a, unsafe { &mut *(std::ptr::addr_of_mut!(p.route.addr.src.storage) as *mut [u8; 128]) });
            p.route.addr.addr.ibaddr.sgid.raw = net::gid_of(a.ip());
        }
        if let Some(a) = dst {
            // SAFETY: as above.
            net::to_storage(&a, unsafe { &mut *(std::ptr::addr_of_mut!(p.route.addr.dst.storage) as *mut [u8; 128]) });
            p.route.addr.addr.ibaddr.dgid.raw = net::gid_of(a.ip());
        }
        if let Some(d) = d {
            p.verbs = d.ctx as *mut ibv_context;
            p.port_num = 1;
            if p.pd.is_null() {
                p.pd = d.pd as *mut ibv_pd;
            }
            p.route.addr.addr.ibaddr.pkey = 0xffffu16.to_be();
        }
    })
}

pub struct Soft;

static SOFT: Soft = Soft;

pub fn backend() -> &'static dyn Backend {
    &SOFT
}

/// The id's REUSEADDR and AFONLY for a bind to `a` (ports.rs).
fn sharing(s: &SoftId, a: &SocketAddr) -> (bool, bool) {
    let st = s.core.state();
    (st.options.reuseaddr == Some(true), st.options.afonly.unwrap_or_else(|| ports::default_afonly(a)))
}

/// How many ports a bind to port 0 tries before it gives up with
/// EADDRNOTAVAIL, the kernel CM's answer when it finds no free port.
const PICKS: usize = 16;

/// A socket bound for `a` and the id's claim on its port (ports.rs): the
/// port `a` gives, or one the system picks (port 0).
fn bind_claim(s: &SoftId, a: SocketAddr) -> Result<(std::os::fd::OwnedFd, SocketAddr, ports::PortClaim)> {
    let (ps, udp) = (s.ps(), s.is_ud());
    let (reuse, afonly) = sharing(s, &a);
    if a.port() != 0 {
        // Claimed before the socket takes it: the sockets share any port
        // (sock::bind), and where TCP does refuse it says EADDRINUSE for
        // what the kernel CM calls EADDRNOTAVAIL.
        let claim = ports::PortClaim::take(ps, a, reuse, afonly)?;
        let fd = sock::bind(&a, udp, afonly)?;
        return Ok((fd, a, claim));
    }
    // The system's pick may be a port another id of ours holds (UDP takes a
    // port that only SO_REUSEADDR sockets hold for free, and every socket
    // of ours sets it), so a pick whose claim is refused is passed over, as
    // the kernel CM's cma_alloc_any_port moves on to the next port. Passed
    // over, not closed yet: a socket kept bound keeps TCP from picking its
    // port again.
    let mut passed = Vec::new();
    for _ in 0..PICKS {
        let fd = sock::bind(&a, udp, afonly)?;
        let real = sock::local_addr_for(&fd, &a)?;
        match ports::PortClaim::pick(ps, real, reuse, afonly) {
            Ok(claim) => return Ok((fd, real, claim)),
            Err(_) => passed.push(fd),
        }
    }
    Err(sock::unavailable())
}

/// Binds an id's RDMA port: reserves the TCP (or UDP) port now. The id must
/// be in `from`: Idle, which it leaves for Bound, or AddrQuery, which it
/// keeps (rdma_resolve_addr binding the source address it was given).
fn do_bind(s: &SoftId, a: SocketAddr, from: Phase) -> Result<()> {
    if !net::is_local(a.ip()) {
        return Err(sock::unavailable());
    }
    let (fd, real, claim) = bind_claim(s, a)?;
    // Checked, recorded and moved under one hold: of two racing binds the
    // loser changes nothing (set_addrs takes the core's lock after ours, as
    // posting an event does).
    let mut st = s.st();
    if st.phase.get() != from {
        return Err(Errno::EINVAL);
    }
    set_addrs(s, Some(real), None)?;
    // Checked above in this hold: cannot fail.
    let to = if from == Phase::Idle { Phase::Bound } else { from };
    st.phase.step(|p| p == from, to).map_err(|_| Errno::EINVAL)?;
    st.bound = Some(fd);
    st.claim = Some(claim);
    st.src = Some(real);
    Ok(())
}

impl Backend for Soft {
    fn bind(&self, id: &Arc<IdCore>, addr: &[u8]) -> Result<()> {
        let s = soft_id(id);
        let a = net::from_bytes(addr)?;
        // Also checked in do_bind; here first, so that a wrong state is told before an address error.
        if s.phase() != Phase::Idle {
            return Err(Errno::EINVAL);
        }
        do_bind(&s, a, Phase::Idle)
    }

    fn resolve_addr(&self, id: &Arc<IdCore>, src: Option<&[u8]>, dst: &[u8], timeout_ms: i32) -> Result<()> {
        let s = soft_id(id);
        let dst = net::from_bytes(dst)?;
        let src = src.map(net::from_bytes).transpose()?;
        start_query(&s, src, &dst)?;
        let bound_ip = s.st().src.map(|a| a.ip()).filter(|ip| !ip.is_unspecified());
        let route = match bound_ip {
            // A multicast group is reached from the address the id is bound to.
            Some(ip) if dst.ip().is_multicast() => Ok(ip),
            _ => net::route_source(&dst),
        };
        if route.is_ok() && !net::is_local(dst.ip()) && !dst.ip().is_multicast() {
            // A remote host: answer once it proved reachable (what ARP tells the kernel).
            let s2 = s.clone();
            let wait = Duration::from_millis(timeout_ms.clamp(100, 60_000) as u64);
            let _ = common::thread::spawn("rdmacm-resolve", move || {
                let probe = SocketAddr::new(dst.ip(), if dst.port() == 0 { 9 } else { dst.port() });
                let r = match std::net::TcpStream::connect_timeout(&probe, wait) {
                    Ok(_) => Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Ok(()),
                    Err(e) => Err(Errno::from(e)),
                };
                post_resolved(&s2, r.and_then(|()| resolved(&s2, dst, route)));
            });
        } else {
            post_resolved(&s, route.and_then(|ip| resolved(&s, dst, Ok(ip))));
        }
        if id.is_sync() {
            id.complete()?;
        }
        Ok(())
    }

    fn resolve_route(&self, id: &Arc<IdCore>, _timeout_ms: i32) -> Result<()> {
        let s = soft_id(id);
        route_resolved(&s)?;
        if id.is_sync() {
            id.complete()?;
        }
        Ok(())
    }

    fn listen(&self, id: &Arc<IdCore>, backlog: i32) -> Result<()> {
        let s = soft_id(id);
        if s.phase() == Phase::Idle {
            let any = SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);
            do_bind(&s, any, Phase::Idle)?;
        }
        let mut st = s.st();
        if st.phase.get() != Phase::Bound {
            return Err(Errno::EINVAL);
        }
        // The socket must hear what the listener will be asked for. Where
        // AFONLY changed after bind and set_option could not refit it (a
        // socket of another process holds the port in the other family),
        // the listen is refused as the kernel CM's port check refuses it.
        let afonly = sharing(&s, &st.src.ok_or(Errno::EINVAL)?).1;
        refit(&mut st, s.is_ud(), afonly).map_err(|e| if e.0 == libc::EADDRINUSE { sock::unavailable() } else { e })?;
        // The kernel CM's rule for a listener's port (ports.rs), which TCP's
        // listen would not apply.
        let claim = st.claim.as_ref().ok_or(Errno::EINVAL)?;
        let had_reuse = claim.listen()?;
        if !s.is_ud() {
            if let Err(e) = sock::listen(st.bound.as_ref().ok_or(Errno::EINVAL)?, backlog) {
                claim.unlisten(had_reuse); // a failed listen leaves the id as it was
                return Err(e);
            }
        }
        let fd = st.bound.take().ok_or(Errno::EINVAL)?;
        let e = engine::get();
        if s.is_ud() {
            st.udp = Some(e.add_udp(sock::udp(fd), &s));
        } else {
            st.listener = Some(e.add_listener(std::net::TcpListener::from(fd), &s));
        }
        // Requests may come over RoCEv2 too (from a kernel rdma_cm).
        ibcm::start();
        // The check above, in the same hold: cannot fail.
        st.phase.step(|p| p == Phase::Bound, Phase::Listening).map_err(|_| Errno::EINVAL)?;
        drop(st);
        ibcm::listening(&s, true);
        Ok(())
    }

    fn connect(&self, id: &Arc<IdCore>, p: ConnParam) -> Result<()> {
        let s = soft_id(id);
        conn::connect(&s, p)?;
        if id.is_sync() {
            id.complete()?;
        }
        Ok(())
    }

    fn accept(&self, id: &Arc<IdCore>, p: Option<ConnParam>) -> Result<()> {
        let s = soft_id(id);
        conn::accept(&s, p)?;
        if id.is_sync() {
            if s.is_ud() {
                id.ack_stored_event()?;
            } else {
                id.complete()?;
            }
        }
        Ok(())
    }

    fn reject(&self, id: &Arc<IdCore>, data: &[u8], vendor_reason: bool) -> Result<()> {
        conn::reject(&soft_id(id), data, if vendor_reason { 35 } else { 28 })
    }

    fn establish(&self, id: &Arc<IdCore>) -> Result<()> {
        conn::establish(&soft_id(id))
    }

    fn notify(&self, id: &Arc<IdCore>, _event: u32) -> Result<()> {
        match soft_id(id).phase() {
            Phase::Connected | Phase::RepSent => Ok(()),
            _ => Err(Errno::EINVAL),
        }
    }

    fn disconnect(&self, id: &Arc<IdCore>) -> Result<()> {
        conn::disconnect(&soft_id(id))?;
        Ok(())
    }

    fn init_qp_attr(&self, id: &Arc<IdCore>, attr: &mut ibv_qp_attr, mask: &mut i32) -> Result<()> {
        conn::init_qp_attr(&soft_id(id), attr, mask)
    }

    fn join_multicast(&self, id: &Arc<IdCore>, addr: &[u8], join_flags: u32, context: usize) -> Result<()> {
        let s = soft_id(id);
        conn::join(&s, net::from_bytes(addr)?, join_flags, context)?;
        if id.is_sync() {
            id.complete()?;
        }
        Ok(())
    }

    fn leave_multicast(&self, id: &Arc<IdCore>, addr: &[u8]) -> Result<()> {
        conn::leave(&soft_id(id), net::from_bytes(addr)?)
    }

    fn set_option(&self, id: &Arc<IdCore>, opt: &Opt) -> Result<()> {
        let s = soft_id(id);
        match opt {
            // The kernel CM's states for each: a listener's port cannot be
            // shared again, and a bound id cannot stop sharing its port. The
            // state is checked and the claim changed under one hold of the
            // id's lock, which rdma_listen takes too: a listen cannot come
            // between them.
            Opt::ReuseAddr(_) | Opt::AfOnly(_) => {
                let udp = s.is_ud();
                let mut st = s.st();
                let phase = st.phase.get();
                match *opt {
                    Opt::ReuseAddr(true) if phase == Phase::Listening => Err(Errno::EINVAL),
                    Opt::ReuseAddr(false) if phase != Phase::Idle => Err(Errno::EINVAL),
                    Opt::AfOnly(_) if !matches!(phase, Phase::Idle | Phase::Bound) => Err(Errno::EINVAL),
                    // A bound id's claim follows, as the kernel CM reads both live.
                    Opt::ReuseAddr(v) => {
                        if let Some(c) = &st.claim {
                            c.set_reuse(v);
                        }
                        Ok(())
                    }
                    Opt::AfOnly(v) => {
                        if let Some(c) = &st.claim {
                            c.set_afonly(v);
                        }
                        // The bound socket follows at once, so that other processes
                        // meet the id's new hold. A socket that cannot follow is
                        // refused by rdma_listen, where the kernel CM would refuse it.
                        if phase == Phase::Bound {
                            let _ = refit(&mut st, udp, v);
                        }
                        Ok(())
                    }
                    _ => Ok(()),
                }
            }
            Opt::IbPath(_) => {
                route_resolved(&s)?;
                if id.is_sync() {
                    id.complete()?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn destroy(&self, id: &Arc<IdCore>) {
        let ext = id.state().take_extra(|x| x.ext.take());
        if let Some(e) = ext {
            if let Ok(s) = e.downcast::<SoftId>() {
                conn::teardown(&s);
            }
        }
    }
}

/// rdma_resolve_addr's start: the id moves to AddrQuery under its lock, so
/// that of two calls (two threads, or one while the other's probe of a
/// remote host runs) the second is refused at once, as the kernel CM
/// refuses it. An idle id is bound here, as the kernel CM binds it (its
/// resolve_prepare_src): to the source address it was given, else to the
/// wildcard of the destination's family on a port the system picks, which
/// it keeps whatever the resolution's end (the route's source address
/// replaces the wildcard once resolved).
fn start_query(s: &SoftId, src: Option<SocketAddr>, dst: &SocketAddr) -> Result<()> {
    let was = s.transition(|p| matches!(p, Phase::Idle | Phase::Bound), Phase::AddrQuery).map_err(|_| Errno::EINVAL)?;
    if was == Phase::Idle {
        let any = match dst {
            SocketAddr::V4(_) => SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 0)),
            SocketAddr::V6(_) => SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0)),
        };
        if let Err(e) = do_bind(s, src.unwrap_or(any), Phase::AddrQuery) {
            // No query then, and no event: the id is as it was (unless destroyed meanwhile).
            let _ = s.transition(|p| p == Phase::AddrQuery, Phase::Idle);
            return Err(e);
        }
    }
    // A destination of another family than the source address the id is
    // bound to is refused, and the id stays bound (the kernel CM's
    // resolve_prepare_src, after its bind). Resolved, it would hold a
    // source address of the destination's family on a socket of the other.
    let family = s.st().src.map(|a| a.is_ipv4());
    if family.is_some_and(|v4| v4 != dst.is_ipv4()) {
        let _ = s.transition(|p| p == Phase::AddrQuery, Phase::Bound);
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// Makes a bound id's socket hear the families `afonly` says (sock::fits).
/// IPV6_V6ONLY cannot change on a bound socket, so a new one takes the same
/// address and port (SO_REUSEADDR lets both hold it while neither listens)
/// and the old one goes; on failure the old one stays.
fn refit(st: &mut St, udp: bool, afonly: bool) -> Result<()> {
    let (Some(fd), Some(src)) = (&st.bound, st.src) else { return Ok(()) };
    if !sock::fits(fd, &src, afonly) {
        st.bound = Some(sock::bind(&src, udp, afonly)?);
    }
    Ok(())
}

/// The end of an address query: ADDR_RESOLVED (`resolved` moved the id),
/// or ADDR_ERROR with the id back to Bound (`start_query` bound it, if it
/// was not), where a new rdma_resolve_addr may start. Nothing for an id destroyed
/// meanwhile (its teardown moved it).
fn post_resolved(s: &SoftId, r: Result<()>) {
    match r {
        Ok(()) => s.post(RDMA_CM_EVENT_ADDR_RESOLVED, 0, Param::zeroed(), Vec::new(), false),
        Err(e) => {
            let back = {
                let mut st = s.st();
                st.phase.step(|p| p == Phase::AddrQuery, Phase::Bound)
            };
            if back.is_ok() {
                s.post(RDMA_CM_EVENT_ADDR_ERROR, -e.0, Param::zeroed(), Vec::new(), false);
            }
        }
    }
}

/// Records a resolved destination with the source address its route gives
/// to an id bound to the wildcard (`start_query` bound every id).
fn resolved(s: &SoftId, dst: SocketAddr, route: Result<IpAddr>) -> Result<()> {
    let ip = route?;
    let bound = s.st().src.ok_or(Errno::EINVAL)?;
    let src = if bound.ip().is_unspecified() { SocketAddr::new(ip, bound.port()) } else { bound };
    // Under one hold, as in do_bind: an id destroyed meanwhile stays so
    // (and gets no event).
    let mut st = s.st();
    if st.phase.get() != Phase::AddrQuery {
        return Err(Errno::EINVAL);
    }
    set_addrs(s, Some(src), Some(dst))?;
    // Checked above in this hold: cannot fail.
    st.phase.step(|p| p == Phase::AddrQuery, Phase::AddrResolved).map_err(|_| Errno::EINVAL)?;
    if let Some(c) = &st.claim {
        c.set_addr(src); // a wildcard-bound id now has the route's source, which the kernel CM checks
    }
    st.src = Some(src);
    st.dst = Some(dst);
    Ok(())
}

/// One RoCE-style path record from `src` to `dst` with traffic class
/// `tclass`; an ACK timeout set on the id makes the packet life time one
/// less, as the kernel CM's RoCE routes do.
pub(crate) fn path_rec(src: SocketAddr, dst: SocketAddr, tclass: u8, ack_timeout: Option<u8>) -> Result<PathRec> {
    // SAFETY: calloc of one record; checked; owned by PathRec (freed if we return early).
    let rec = unsafe { libc::calloc(1, std::mem::size_of::<ibv_sa_path_rec>()) } as *mut ibv_sa_path_rec;
    if rec.is_null() {
        return Err(Errno::ENOMEM);
    }
    let owned = PathRec(rec);
    // SAFETY: a zeroed record we own.
    let r = unsafe { &mut *rec };
    r.dgid.raw = net::gid_of(dst.ip());
    r.sgid.raw = net::gid_of(src.ip());
    r.pkey = 0xffffu16.to_be();
    r.hop_limit = 64;
    r.traffic_class = tclass;
    r.reversible = 1;
    r.numb_path = 1;
    r.mtu_selector = 2;
    r.mtu = IBV_MTU_4096 as u8;
    r.rate_selector = 2;
    r.rate = 3;
    r.packet_life_time_selector = 2;
    // As the kernel's RoCE routes: an ACK timeout of 0 leaves the default.
    r.packet_life_time = ack_timeout.filter(|&t| t > 0).map_or(14, |t| t - 1);
    Ok(owned)
}

/// ROUTE_RESOLVED with one RoCE-style path record.
fn route_resolved(s: &SoftId) -> Result<()> {
    let (src, dst) = {
        let st = s.st();
        if st.phase.get() != Phase::AddrResolved {
            return Err(Errno::EINVAL);
        }
        (st.src.ok_or(Errno::EINVAL)?, st.dst.ok_or(Errno::EINVAL)?)
    };
    let (tos, ack_timeout) = {
        let o = &s.core.state().options;
        (o.tos.unwrap_or(0), o.ack_timeout)
    };
    let owned = path_rec(src, dst, tos, ack_timeout)?;
    let rec = owned.0;
    // One winner of two racing route resolutions: one record, one event.
    let mut st = s.st();
    st.phase.step(|p| p == Phase::AddrResolved, Phase::RouteResolved).map_err(|_| Errno::EINVAL)?;
    s.core.with_public(|p| {
        p.route.path_rec = rec;
        p.route.num_paths = 1;
    })?;
    st.path = Some(owned);
    st.tclass = tos;
    drop(st);
    s.post(RDMA_CM_EVENT_ROUTE_RESOLVED, 0, Param::zeroed(), Vec::new(), false);
    Ok(())
}
