//! Datagram rsockets (rsocket.md §8): a real UDP socket (its fd is the
//! rsocket number) plus one UD QP per local address in use. Datagrams to a
//! peer whose QP is not known yet go over the UDP socket behind a
//! `ds_udp_header` carrying our QPN; the peer's service thread answers with
//! its own QPN, resolves an address handle and hands the payload to its
//! application through its own UD QP. Once the address handle is known,
//! datagrams go over UD behind a `ds_header` naming the sender's UDP address.

use common::sock::from_bytes;
use super::cm::{self, Id};
use super::config::*;
use super::iov::{Gather, Scatter};
use super::opts::{self, Opts, SOL_RDMA};
use super::poll::{self, Count, Sleepers, Sleepy};
use super::verbs::*;
use super::wire::*;
use crate::cm::registry::lock;
use crate::sys::{cerr, Errno, Flag, Result};
use crate::verbs::ibv_query_gid;
use rdma_abi::cma::*;
use rdma_abi::verbs::*;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, Weak};

const GRH_LEN: usize = 40;
const SLOT: usize = RS_SNDLOWAT;
const RSLOT: usize = GRH_LEN + SLOT;
const WR_RECV: u64 = 1 << 63;

/// An address handle, destroyed on drop.
struct Ah(*mut ibv_ah);
// SAFETY: an AH handle; verbs calls on it are thread-safe.
unsafe impl Send for Ah {}
impl Drop for Ah {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_ah, destroyed once.
        unsafe { ibv_destroy_ah(self.0) };
    }
}

/// One UD QP, bound to one local address.
struct DQp {
    local: IpAddr,
    cq: Cq,
    qpn: u32,
    sbuf: RegBuf,
    rbuf: RegBuf,
    sfree: Vec<usize>,
    /// Largest payload one datagram carries from here: a slot, or less when the
    /// port's MTU is smaller (rxe over a 1500-byte netdev: 1024).
    max_payload: usize,
    self_ah: Option<Ah>,
    // Last: destroyed after the buffers' registrations are gone (drop order).
    id: Id,
}

struct Dest {
    qp: usize,
    qpn: u32,
    ah: Option<Ah>,
}

pub struct DSt {
    udp: Option<OwnedFd>,
    closed: bool,
    pub nonblock: bool,
    pub cloexec: bool,
    opts: Opts,
    qps: Vec<DQp>,
    dests: HashMap<SocketAddr, Dest>,
    conn_dest: Option<SocketAddr>,
    /// Received datagrams: (qp, slot, bytes incl. GRH).
    rmsgs: VecDeque<(usize, usize, usize)>,
    /// The sleepers and the wake flag.
    sl: Sleepers,
    gen: u64,
    /// The UDP socket's port once bound (a port never changes after that):
    /// a send needs it for its header, without a getsockname each time.
    port: u16,
}

pub struct Dgram {
    pub fd: i32,
    pub domain: i32,
    st: Mutex<DSt>,
    cond: Condvar,
    wake: Flag,
}

/// v4-mapped IPv6 addresses become IPv4: one key per peer.
fn canon(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), v6.port()),
            None => a,
        },
        _ => a,
    }
}

fn canon_ip(ip: IpAddr) -> IpAddr {
    canon(SocketAddr::new(ip, 0)).ip()
}

/// A socket address as C bytes in `domain`'s family (v4-mapped for AF_INET6).
pub fn sockaddr_bytes(a: SocketAddr, domain: i32) -> Vec<u8> {
    let a = match (a, domain) {
        (SocketAddr::V4(v4), libc::AF_INET6) => SocketAddr::new(IpAddr::V6(v4.ip().to_ipv6_mapped()), v4.port()),
        _ => a,
    };
    match a {
        SocketAddr::V4(v4) => {
            // SAFETY: all-zero is a valid sockaddr_in.
            let mut s: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            s.sin_family = libc::AF_INET as u16;
            s.sin_port = v4.port().to_be();
            s.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            // SAFETY: bytes of a plain struct.
            unsafe { std::slice::from_raw_parts(&s as *const _ as *const u8, std::mem::size_of_val(&s)) }.to_vec()
        }
        SocketAddr::V6(v6) => {
            // SAFETY: all-zero is a valid sockaddr_in6.
            let mut s: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            s.sin6_family = libc::AF_INET6 as u16;
            s.sin6_port = v6.port().to_be();
            s.sin6_addr.s6_addr = v6.ip().octets();
            s.sin6_flowinfo = v6.flowinfo().to_be();
            s.sin6_scope_id = v6.scope_id();
            // SAFETY: bytes of a plain struct.
            unsafe { std::slice::from_raw_parts(&s as *const _ as *const u8, std::mem::size_of_val(&s)) }.to_vec()
        }
    }
}

/// The local address a datagram to `dst` leaves from.
fn route_to(dst: SocketAddr) -> Result<IpAddr> {
    let bind: SocketAddr =
        if dst.is_ipv4() { "0.0.0.0:0".parse().unwrap_or(dst) } else { "[::]:0".parse().unwrap_or(dst) };
    let s = std::net::UdpSocket::bind(bind)?;
    let target = SocketAddr::new(dst.ip(), if dst.port() == 0 { 9 } else { dst.port() });
    s.connect(target)?;
    Ok(canon_ip(s.local_addr()?.ip()))
}

/// Resolves a path from `local` to `peer` with a temporary id and makes an
/// address handle for it on `pd` (rsocket.md §8: GRH when hop_limit > 1,
/// source GID index searched in the first 16 entries).
fn resolve_ah(local: IpAddr, peer: IpAddr, pd: *mut ibv_pd) -> Result<Ah> {
    let tid = Id::new(RDMA_PS_UDP)?;
    let mut src =
        sockaddr_bytes(SocketAddr::new(local, 0), if local.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 });
    let mut dst = sockaddr_bytes(SocketAddr::new(peer, 0), if peer.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 });
    // SAFETY: our temporary id; addresses of their family's length.
    cm::check(unsafe { cm::rdma_resolve_addr(tid.raw(), src.as_mut_ptr().cast(), dst.as_mut_ptr().cast(), 2000) })?;
    // SAFETY: as above.
    cm::check(unsafe { cm::rdma_resolve_route(tid.raw(), 2000) })?;
    // SAFETY: a resolved id: path_rec holds num_paths records.
    let (path, verbs, port) = unsafe {
        let r = (*tid.raw()).route;
        if r.path_rec.is_null() || r.num_paths < 1 {
            return Err(Errno(libc::EHOSTUNREACH));
        }
        (*r.path_rec, tid.verbs(), tid.port_num())
    };
    // SAFETY: all-zero is a valid ah attribute block.
    let mut attr: ibv_ah_attr = unsafe { std::mem::zeroed() };
    attr.dlid = u16::from_be(path.dlid);
    attr.sl = path.sl;
    attr.port_num = port.max(1);
    // RoCE carries every packet in a GRH, so its address handles need one even
    // for a neighbour (hop limit ≤ 1): without it rxe refuses the AH (EINVAL),
    // which is why upstream's datagram rsockets fail there.
    if path.hop_limit > 1 || is_roce(verbs, attr.port_num) {
        attr.is_global = 1;
        attr.grh.dgid = path.dgid;
        attr.grh.flow_label = u32::from_be(path.flow_label);
        attr.grh.hop_limit = path.hop_limit;
        attr.grh.traffic_class = path.traffic_class;
        // SAFETY: reading the raw bytes of GIDs.
        let want = unsafe { path.sgid.raw };
        for i in 0..16 {
            // SAFETY: all-zero is a valid gid.
            let mut g: ibv_gid = unsafe { std::mem::zeroed() };
            // SAFETY: an open context; g is writable.
            if unsafe { ibv_query_gid(verbs, attr.port_num, i, &mut g) } != 0 {
                break;
            }
            // SAFETY: as above.
            if unsafe { g.raw } == want {
                attr.grh.sgid_index = i as u8;
                break;
            }
        }
    }
    // SAFETY: the QP's PD and a filled attribute block.
    let ah = unsafe { ibv_create_ah(pd, &mut attr) };
    if ah.is_null() {
        return Err(Errno::last());
    }
    Ok(Ah(ah))
}

impl DQp {
    fn create(local: IpAddr, o: &Opts) -> Result<DQp> {
        let id = Id::new(RDMA_PS_UDP)?;
        let mut a =
            sockaddr_bytes(SocketAddr::new(local, 0), if local.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 });
        // SAFETY: our id; an address of its family's length.
        cm::check(unsafe { cm::rdma_bind_addr(id.raw(), a.as_mut_ptr().cast()) })?;
        let verbs = id.verbs();
        if verbs.is_null() {
            return Err(Errno::ENODEV);
        }
        let max = match max_qp_wr(verbs) {
            0 => RS_QP_MAX_SIZE,
            m => m.min(RS_QP_MAX_SIZE),
        };
        let sq = o.sq_size.min((o.sbuf_size / SLOT) as u32).clamp(1, max.max(1));
        let rq = o.rq_size.min((o.rbuf_size / SLOT) as u32).clamp(1, max.max(1));
        let cq = Cq::new(verbs, sq + rq, std::ptr::null_mut())?;
        // SAFETY: all-zero is a valid init attribute block.
        let mut attr: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        attr.send_cq = cq.cq;
        attr.recv_cq = cq.cq;
        attr.cap =
            ibv_qp_cap { max_send_wr: sq, max_recv_wr: rq, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        attr.qp_type = IBV_QPT_UD;
        attr.sq_sig_all = 1;
        // SAFETY: our id; attr lives across the call.
        if let Err(e) = cm::check(unsafe { cm::rdma_create_qp(id.raw(), std::ptr::null_mut(), &mut attr) }) {
            cq.destroy();
            return Err(e);
        }
        let pd = id.pd();
        let bufs = RegBuf::new(pd, sq as usize * SLOT, IBV_ACCESS_LOCAL_WRITE)
            .and_then(|s| RegBuf::new(pd, rq as usize * RSLOT, IBV_ACCESS_LOCAL_WRITE).map(|r| (s, r)));
        let (sbuf, rbuf) = match bufs {
            Ok(b) => b,
            Err(e) => {
                // SAFETY: the QP we just made on our id.
                unsafe { cm::rdma_destroy_qp(id.raw()) };
                cq.destroy();
                return Err(e);
            }
        };
        // SAFETY: a live QP.
        let qpn = unsafe { (*id.qp()).qp_num };
        let hdr = if local.is_ipv4() { DS_IPV4_HDR_LEN } else { DS_IPV6_HDR_LEN };
        let max_payload = match ud_mtu(verbs, id.port_num()) {
            0 => SLOT,
            m => m.min(SLOT),
        } - hdr;
        let sfree = (0..sq as usize).rev().collect();
        let mut q = DQp { local, cq, qpn, sbuf, rbuf, sfree, max_payload, self_ah: None, id };
        for i in 0..rq as usize {
            if let Err(e) = q.post_recv(i) {
                q.destroy();
                return Err(e);
            }
        }
        match resolve_ah(local, local, pd) {
            Ok(ah) => q.self_ah = Some(ah),
            Err(e) => {
                q.destroy();
                return Err(e);
            }
        }
        Ok(q)
    }

    fn post_recv(&mut self, slot: usize) -> Result<()> {
        let mut sge =
            ibv_sge { addr: self.rbuf.addr() + (slot * RSLOT) as u64, length: RSLOT as u32, lkey: self.rbuf.mr.lkey() };
        let mut wr =
            ibv_recv_wr { wr_id: WR_RECV | slot as u64, next: std::ptr::null_mut(), sg_list: &mut sge, num_sge: 1 };
        post_recv(self.id.qp(), &mut wr)
    }

    /// Sends `hdr` + `payload` from a free slot to (ah, qpn). False: no slot free.
    fn send(
        &mut self,
        ah: *mut ibv_ah,
        qpn: u32,
        hdr: &DsHdr,
        payload: &mut dyn FnMut(*mut u8) -> usize,
    ) -> Result<bool> {
        let Some(slot) = self.sfree.pop() else { return Ok(false) };
        // SAFETY: slot < sq: SLOT bytes inside sbuf.
        let p = unsafe { self.sbuf.ptr().add(slot * SLOT) };
        let mut h = [0u8; DS_IPV6_HDR_LEN];
        let hl = hdr.encode(&mut h);
        // SAFETY: hl ≤ 24 bytes at the slot's start; payload fills the rest (≤ SLOT - hl).
        unsafe { std::ptr::copy_nonoverlapping(h.as_ptr(), p, hl) };
        // SAFETY: as above.
        let n = payload(unsafe { p.add(hl) });
        let mut sge = ibv_sge { addr: p as u64, length: (hl + n) as u32, lkey: self.sbuf.mr.lkey() };
        // SAFETY: all-zero is a valid work request.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = slot as u64;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.wr.ud = ibv_send_wr_ud { ah, remote_qpn: qpn, remote_qkey: RDMA_UDP_QKEY };
        if let Err(e) = post_send(self.id.qp(), &mut wr) {
            self.sfree.push(slot);
            return Err(e);
        }
        Ok(true)
    }

    fn destroy(self) {
        let DQp { cq, sbuf, rbuf, self_ah, id, .. } = self;
        drop(self_ah);
        if !id.qp().is_null() {
            // SAFETY: our id's QP, destroyed once.
            unsafe { cm::rdma_destroy_qp(id.raw()) };
        }
        drop((sbuf, rbuf));
        cq.destroy();
        drop(id);
    }
}

impl Sleepy for DSt {
    fn sleepers(&mut self) -> &mut Sleepers {
        &mut self.sl
    }
    fn moved_on(&self, gen: u64) -> bool {
        self.gen != gen || self.closed
    }
}

impl DSt {
    fn udp_fd(&self) -> Result<i32> {
        self.udp.as_ref().map(|f| f.as_raw_fd()).ok_or(Errno::EBADF)
    }

    fn local_addr(&self) -> Result<SocketAddr> {
        Ok(canon(common::sock::local_addr(self.udp_fd()?)?))
    }

    /// Binds the UDP socket to the wildcard address when the application did not.
    fn ensure_bound(&mut self, domain: i32) -> Result<SocketAddr> {
        let a = self.local_addr()?;
        if a.port() != 0 {
            return Ok(a);
        }
        let any = if domain == libc::AF_INET6 { "[::]:0" } else { "0.0.0.0:0" };
        let b = sockaddr_bytes(any.parse().map_err(|_| Errno::EINVAL)?, domain);
        // SAFETY: our UDP socket; b is a socket address of its length.
        cerr(unsafe { libc::bind(self.udp_fd()?, b.as_ptr().cast(), b.len() as libc::socklen_t) })?;
        self.local_addr()
    }

    /// `ensure_bound`'s port, remembered.
    fn bound_port(&mut self, domain: i32) -> Result<u16> {
        if self.port == 0 {
            self.port = self.ensure_bound(domain)?.port();
        }
        Ok(self.port)
    }

    /// The QP for local address `ip`, made on first use.
    fn qp_for(&mut self, ip: IpAddr) -> Result<usize> {
        if let Some(i) = self.qps.iter().position(|q| q.local == ip) {
            return Ok(i);
        }
        let q = DQp::create(ip, &self.opts)?;
        self.qps.push(q);
        self.gen += 1;
        Ok(self.qps.len() - 1)
    }

    /// The destination entry for `to` (its QP chosen by the route to it).
    fn dest(&mut self, to: SocketAddr) -> Result<&mut Dest> {
        if !self.dests.contains_key(&to) {
            let bound = self.local_addr()?.ip();
            let ip = if bound.is_unspecified() { route_to(to)? } else { bound };
            let qp = self.qp_for(ip)?;
            self.dests.insert(to, Dest { qp, qpn: 0, ah: None });
        }
        self.dests.get_mut(&to).ok_or(Errno::EIO)
    }

    /// Polls every QP's CQ: queues received datagrams, frees send slots.
    fn progress(&mut self) -> bool {
        let mut any = false;
        let mut wcs = [std::mem::MaybeUninit::<ibv_wc>::uninit(); 32];
        for qi in 0..self.qps.len() {
            loop {
                let got = self.qps[qi].cq.poll(&mut wcs).unwrap_or(&[]);
                if got.is_empty() {
                    break;
                }
                any = true;
                for wc in got {
                    let slot = (wc.wr_id & 0xFFFF_FFFF) as usize;
                    if wc.wr_id & WR_RECV != 0 {
                        if wc.status == IBV_WC_SUCCESS && wc.byte_len as usize > GRH_LEN {
                            self.rmsgs.push_back((qi, slot, wc.byte_len as usize));
                        } else if wc.status == IBV_WC_SUCCESS {
                            let _ = self.qps[qi].post_recv(slot);
                        }
                    } else {
                        self.qps[qi].sfree.push(slot);
                    }
                }
            }
        }
        if any {
            self.gen += 1;
        }
        any
    }

    fn can_send(&self) -> bool {
        self.qps.is_empty() || self.qps.iter().any(|q| !q.sfree.is_empty())
    }
}

impl Dgram {
    pub fn new(domain: i32) -> Result<Arc<Dgram>> {
        // SAFETY: plain socket syscall.
        let fd = cerr(unsafe { libc::socket(domain, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
        // SAFETY: a new fd nobody else owns.
        let udp = unsafe { OwnedFd::from_raw_fd(fd) };
        let d = Arc::new(Dgram {
            fd,
            domain,
            st: Mutex::new(DSt {
                udp: Some(udp),
                closed: false,
                nonblock: false,
                cloexec: false,
                opts: Opts::default(),
                qps: Vec::new(),
                dests: HashMap::new(),
                conn_dest: None,
                rmsgs: VecDeque::new(),
                sl: Sleepers::default(),
                gen: 0,
                port: 0,
            }),
            cond: Condvar::new(),
            wake: Flag::new()?,
        });
        svc_register(&d);
        Ok(d)
    }

    fn lock(&self) -> MutexGuard<'_, DSt> {
        lock(&self.st)
    }

    fn open(&self) -> Result<MutexGuard<'_, DSt>> {
        let st = self.lock();
        if st.closed {
            return Err(Errno::EBADF);
        }
        Ok(st)
    }

    /// The QP, peer QPN and address handle for `to`, making its entry (and
    /// its QP, on first use of a local address). A new QP wakes the sleepers:
    /// they poll every QP's CQ and must arm and add this one.
    fn dest_of(&self, st: &mut DSt, to: SocketAddr) -> Result<(usize, u32, Option<*mut ibv_ah>)> {
        let qps = st.qps.len();
        let d = st.dest(to)?;
        let r = (d.qp, d.qpn, d.ah.as_ref().map(|a| a.0));
        if st.qps.len() != qps {
            self.notify(st);
        }
        Ok(r)
    }

    /// Tells the sleepers that the state changed (the caller bumped `gen`).
    fn notify(&self, st: &mut DSt) {
        // A notify is a futex syscall even with nobody waiting, and this runs on
        // every completion a look processes.
        if st.sl.notify(&self.wake) {
            self.cond.notify_all();
        }
    }

    /// `settle` for rpoll and repoll, whose look read generation `gen`.
    pub fn settle_after(&self, gen: u64, ms: i32) {
        drop(poll::settle(&self.cond, self.lock(), gen, ms));
    }

    pub fn set_flags(&self, nonblock: bool, cloexec: bool) {
        let mut st = self.lock();
        st.nonblock = nonblock;
        st.cloexec = cloexec;
    }

    pub fn bind(&self, addr: &[u8]) -> Result<()> {
        let st = self.open()?;
        // SAFETY: our UDP socket; addr is a checked socket address.
        cerr(unsafe { libc::bind(st.udp_fd()?, addr.as_ptr().cast(), addr.len() as libc::socklen_t) })?;
        Ok(())
    }

    pub fn connect(&self, addr: &[u8]) -> Result<()> {
        let to = canon(from_bytes(addr)?);
        let mut st = self.open()?;
        st.ensure_bound(self.domain)?;
        self.dest_of(&mut st, to)?;
        st.conn_dest = Some(to);
        Ok(())
    }

    pub fn shutdown(&self, how: i32) -> Result<()> {
        if !matches!(how, libc::SHUT_RD | libc::SHUT_WR | libc::SHUT_RDWR) {
            return Err(Errno::EINVAL);
        }
        let st = self.open()?;
        if st.conn_dest.is_none() {
            return Err(Errno(libc::ENOTCONN));
        }
        Ok(())
    }

    pub fn close(&self) {
        let (qps, udp) = {
            let mut st = self.lock();
            if st.closed {
                return;
            }
            st.closed = true;
            st.dests.clear();
            st.rmsgs.clear();
            st.gen += 1;
            self.notify(&mut st);
            (std::mem::take(&mut st.qps), st.udp.take())
        };
        svc_unregister(self);
        for q in qps {
            q.destroy();
        }
        drop(udp);
        self.wake.raise();
    }

    fn wait<'a>(
        &'a self,
        mut st: MutexGuard<'a, DSt>,
        nonblock: bool,
        ready: impl Fn(&DSt) -> bool,
    ) -> Result<MutexGuard<'a, DSt>> {
        let cfg = get_config();
        let mut spin = poll::Spin::new(cfg.polling_time_us);
        loop {
            if st.progress() {
                self.notify(&mut st);
            }
            if st.closed {
                return Err(Errno::EBADF);
            }
            if ready(&st) {
                return Ok(st);
            }
            if nonblock {
                return Err(Errno::EAGAIN);
            }
            if spin.again() {
                continue;
            }
            let mut fds = Vec::new();
            Self::arm_locked(&self.wake, &mut st, &mut fds)?;
            // Completions that came before the CQs were armed raise no event: look again.
            if st.progress() {
                self.notify(&mut st);
            }
            if ready(&st) || st.closed {
                continue;
            }
            // Up for sleepers counted before this look: not for this one.
            if st.sl.up() {
                let gen = st.gen;
                st = poll::settle(&self.cond, st, gen, cfg.wake_up_interval_ms);
                continue;
            }
            // Counted only now, under the lock held since that look: a change made
            // by another thread after it raises the wake flag, and the look's own
            // progress did not raise it for this thread (a write, a poll that
            // returns at once and a read, for nothing).
            let ticket = st.sl.count();
            drop(st);
            // SAFETY: a live pollfd array.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, cfg.wake_up_interval_ms) };
            let err = Errno::last();
            st = self.lock();
            self.finish_locked(&mut st, ticket, (r >= 0).then_some(&fds[..]));
            if r < 0 && crate::sys::poll_error_ends_wait(err) {
                return Err(err);
            }
        }
    }

    /// Adds what a sleeper polls: the wake flag and each QP's CQ, armed. The
    /// sleeper is counted (so that changes raise the flag) only after its last
    /// look: by `wait` under the lock of that look, by rpoll in `count_waiter`.
    /// A CQ that cannot be armed fails the wait with the verbs error: its
    /// completions would raise no event, so a sleep would miss them, and
    /// rpoll's count refuses an unarmed CQ (it would look and arm again in a
    /// loop). Upstream ignores the error and sleeps through them.
    fn arm_locked(wake: &Flag, st: &mut DSt, fds: &mut Vec<libc::pollfd>) -> Result<()> {
        fds.push(libc::pollfd { fd: wake.raw(), events: libc::POLLIN, revents: 0 });
        for q in st.qps.iter_mut() {
            q.cq.arm()?;
            fds.push(libc::pollfd { fd: q.cq.fd(), events: libc::POLLIN, revents: 0 });
        }
        Ok(())
    }

    /// Undoes the count of a sleeper (`ticket`: what its count returned).
    /// `polled`: the entries `arm_locked` added, after the poll(2) that slept
    /// on them (None: no sleep).
    /// A CQ event it read is processed here: another thread asleep on the same
    /// CQ no longer sees the fd readable, and this one (rpoll, repoll) may
    /// return for another rsocket without looking at this one again.
    fn finish_locked(&self, st: &mut DSt, ticket: u64, polled: Option<&[libc::pollfd]>) {
        if st.sl.finish(ticket, &self.wake) {
            self.cond.notify_all();
        }
        let mut read = false;
        for q in st.qps.iter_mut() {
            read |= q.cq.after_sleep(polled);
        }
        if read && st.progress() {
            self.notify(st);
        }
    }

    pub fn arm(&self, fds: &mut Vec<libc::pollfd>) -> Result<()> {
        let mut st = self.lock();
        Self::arm_locked(&self.wake, &mut st, fds)
    }

    /// Counts a sleeper that armed with `arm`, unless the state changed since
    /// its look read generation `gen` (a new QP bumps it too: its CQ is not in
    /// the sleeper's fds) or a CQ's event was read by another sleeper's finish
    /// since (it would not wake this one): look again instead. Busy: the wake
    /// flag is up for older sleepers (`settle_after`, then look again).
    pub fn count_waiter(&self, gen: u64) -> Count {
        let mut st = self.lock();
        if st.gen != gen || st.qps.iter().any(|q| !q.cq.armed()) {
            return Count::Changed;
        }
        st.sl.try_count()
    }

    pub fn finish(&self, ticket: u64, polled: Option<&[libc::pollfd]>) {
        let mut st = self.lock();
        self.finish_locked(&mut st, ticket, polled);
    }

    pub fn revents(&self, events: i16) -> (i16, u64) {
        let mut st = self.lock();
        if st.progress() {
            self.notify(&mut st);
        }
        if st.closed {
            return (libc::POLLNVAL, st.gen);
        }
        let mut r = 0;
        if !st.rmsgs.is_empty() {
            r |= libc::POLLIN;
        }
        if st.can_send() {
            r |= libc::POLLOUT;
        }
        (r & events, st.gen)
    }

    pub fn send(&self, src: &mut Gather, flags: i32, dest: Option<&[u8]>) -> Result<usize> {
        let len = src.left();
        let mut st = self.open()?;
        let to = match dest {
            Some(b) => {
                super::addr_arg(b)?;
                canon(from_bytes(b)?)
            }
            None => st.conn_dest.ok_or(Errno(libc::EDESTADDRREQ))?,
        };
        let nonblock = st.nonblock || flags & libc::MSG_DONTWAIT != 0;
        let port = st.bound_port(self.domain)?;
        // A datagram must fit one receive slot behind the largest header.
        if len + DS_IPV6_HDR_LEN > SLOT {
            return Err(Errno(libc::EMSGSIZE));
        }
        let (qi, qpn, ah) = self.dest_of(&mut st, to)?;
        // Larger ones would vanish on the wire: say so, as a UDP socket does.
        if len > st.qps[qi].max_payload {
            return Err(Errno(libc::EMSGSIZE));
        }
        let local = st.qps[qi].local;
        let Some(ah) = ah.filter(|_| qpn != 0) else {
            // The peer's QP is not known yet: over UDP, with our QPN.
            let hdr = UdpHdr { op: OP_DATA as u8, qpn: st.qps[qi].qpn, addr: local }.encode();
            let mut payload = vec![0u8; len];
            // SAFETY: payload is writable for len bytes; src holds len bytes.
            unsafe { src.copy_to(payload.as_mut_ptr(), len) };
            udp_send(st.udp_fd()?, &hdr, &payload, to, self.domain, nonblock)?;
            return Ok(len);
        };
        let hdr = DsHdr { port, addr: local, flowinfo: 0 };
        loop {
            let q = &mut st.qps[qi];
            let mut fill = |p: *mut u8| {
                // SAFETY: the slot has room for len bytes after the header (checked above).
                unsafe { src.copy_to(p, len) };
                len
            };
            if q.send(ah, qpn, &hdr, &mut fill)? {
                return Ok(len);
            }
            st = self.wait(st, nonblock, move |s| s.qps.get(qi).is_some_and(|q| !q.sfree.is_empty()))?;
        }
    }

    pub fn recv(&self, dst: &mut Scatter, flags: i32) -> Result<(usize, Option<Vec<u8>>)> {
        let mut st = self.open()?;
        let nonblock = st.nonblock || flags & libc::MSG_DONTWAIT != 0;
        loop {
            st = self.wait(st, nonblock, |s| !s.rmsgs.is_empty())?;
            let Some(&(qi, slot, bytes)) = st.rmsgs.front() else { continue };
            let q = &mut st.qps[qi];
            // SAFETY: slot < rq: RSLOT bytes inside rbuf, `bytes` of them written.
            let data = unsafe {
                std::slice::from_raw_parts(q.rbuf.ptr().add(slot * RSLOT + GRH_LEN), bytes.min(RSLOT) - GRH_LEN)
            };
            let parsed = DsHdr::decode(data);
            let Some((hdr, hl)) = parsed else {
                st.rmsgs.pop_front();
                let _ = st.qps[qi].post_recv(slot);
                continue;
            };
            let payload = &data[hl..];
            let n = payload.len().min(dst.room);
            // SAFETY: n bytes of the received payload.
            unsafe { dst.copy_from(payload.as_ptr(), n) };
            let full = payload.len();
            let from = SocketAddr::new(canon_ip(hdr.addr), hdr.port);
            if flags & libc::MSG_PEEK == 0 {
                st.rmsgs.pop_front();
                let _ = st.qps[qi].post_recv(slot);
            }
            let ret = if flags & libc::MSG_TRUNC != 0 { full } else { n };
            return Ok((ret, Some(sockaddr_bytes(from, self.domain))));
        }
    }

    pub fn name(&self, peer: bool) -> Result<Vec<u8>> {
        let st = self.open()?;
        if peer {
            return Ok(sockaddr_bytes(st.conn_dest.ok_or(Errno(libc::ENOTCONN))?, self.domain));
        }
        common::sock::local_name(st.udp_fd()?)
    }

    pub fn setsockopt(&self, level: i32, name: i32, val: &[u8]) -> Result<()> {
        let mut st = self.open()?;
        if level == SOL_RDMA {
            if !st.qps.is_empty() {
                return Err(Errno::EINVAL);
            }
            return opts::set_rdma(&mut st.opts, name, val);
        }
        if level == libc::SOL_SOCKET && st.qps.is_empty() {
            match name {
                libc::SO_RCVBUF => st.opts.rbuf_size = (opts::int(val)?.max(0) as usize * 2).max(SLOT * 2),
                libc::SO_SNDBUF => st.opts.sbuf_size = (opts::int(val)?.max(0) as usize * 2).max(SLOT * 2),
                _ => {}
            }
        }
        // SAFETY: our UDP socket; val is a readable option of its length.
        cerr(unsafe {
            libc::setsockopt(st.udp_fd()?, level, name, val.as_ptr().cast(), val.len() as libc::socklen_t)
        })?;
        Ok(())
    }

    pub fn getsockopt(&self, level: i32, name: i32) -> Result<Vec<u8>> {
        let st = self.open()?;
        if level == SOL_RDMA {
            return opts::get_rdma(&st.opts, name);
        }
        let mut buf = vec![0u8; 256];
        let mut len = buf.len() as libc::socklen_t;
        // SAFETY: our UDP socket; buf writable for len bytes.
        cerr(unsafe { libc::getsockopt(st.udp_fd()?, level, name, buf.as_mut_ptr().cast(), &mut len) })?;
        buf.truncate(len as usize);
        Ok(buf)
    }

    pub fn fcntl(&self, cmd: i32, arg: i64) -> Result<i32> {
        let mut st = self.open()?;
        let (mut nb, mut ce) = (st.nonblock, st.cloexec);
        let r = opts::fcntl(&mut nb, &mut ce, cmd, arg)?;
        st.nonblock = nb;
        st.cloexec = ce;
        Ok(r)
    }

    // ---- the service side (runs on the datagram service thread) ----

    /// Reads every datagram waiting on the UDP socket.
    fn svc_read(&self) {
        let mut buf = vec![0u8; 65536];
        loop {
            let fd = {
                let st = self.lock();
                match st.udp_fd() {
                    Ok(fd) if !st.closed => fd,
                    _ => return,
                }
            };
            // SAFETY: all-zero is a valid sockaddr_storage.
            let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            let mut sl = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            // SAFETY: our UDP socket (checked open under its lock just above;
            // close() unregisters before closing); buf and ss writable.
            let n = unsafe {
                libc::recvfrom(
                    fd,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    &mut ss as *mut _ as *mut libc::sockaddr,
                    &mut sl,
                )
            };
            if n < 0 {
                return;
            }
            // SAFETY: bytes of the filled storage.
            let sb = unsafe { std::slice::from_raw_parts(&ss as *const _ as *const u8, sl as usize) };
            let Ok(from) = from_bytes(sb).map(canon) else { continue };
            if let Some((hdr, hl)) = UdpHdr::decode(&buf[..n as usize]) {
                self.svc_datagram(hdr, &buf[hl..n as usize], from);
            }
        }
    }

    fn svc_datagram(&self, hdr: UdpHdr, payload: &[u8], from: SocketAddr) {
        let mut st = self.lock();
        if st.closed {
            return;
        }
        let Ok((qi, old_qpn, ah)) = self.dest_of(&mut st, from) else { return };
        let known = ah.is_some();
        let (local, my_qpn, pd) = {
            let q = &st.qps[qi];
            (q.local, q.qpn, q.id.pd())
        };
        if hdr.op == OP_DATA as u8 {
            let reply = UdpHdr { op: OP_CTRL as u8, qpn: my_qpn, addr: local }.encode();
            if let Ok(fd) = st.udp_fd() {
                let _ = udp_send(fd, &reply, &[], from, self.domain, true);
            }
        }
        if !known || old_qpn != hdr.qpn {
            drop(st);
            let ah = resolve_ah(local, canon_ip(hdr.addr), pd);
            st = self.lock();
            if st.closed {
                return;
            }
            if let (Ok(ah), Some(d)) = (ah, st.dests.get_mut(&from)) {
                d.ah = Some(ah);
                d.qpn = hdr.qpn;
            }
        }
        if hdr.op != OP_DATA as u8 || payload.len() + DS_IPV6_HDR_LEN > SLOT {
            return;
        }
        // Hand the payload to our application through our own QP.
        let q = &mut st.qps[qi];
        let Some(self_ah) = q.self_ah.as_ref().map(|a| a.0) else { return };
        let h = DsHdr { port: from.port(), addr: from.ip(), flowinfo: 0 };
        let mut fill = |p: *mut u8| {
            // SAFETY: the slot has room for the payload after the header (checked above).
            unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), p, payload.len()) };
            payload.len()
        };
        let qpn = q.qpn;
        if !matches!(q.send(self_ah, qpn, &h, &mut fill), Ok(true)) {
            // No send slot: reap completions once and retry, else drop the datagram.
            st.progress();
            let q = &mut st.qps[qi];
            let _ = q.send(self_ah, qpn, &h, &mut fill);
        }
        st.gen += 1;
        self.notify(&mut st);
    }
}

/// Sends `hdr` + `payload` over the UDP socket to `to`.
fn udp_send(fd: i32, hdr: &[u8], payload: &[u8], to: SocketAddr, domain: i32, nonblock: bool) -> Result<()> {
    let mut name = sockaddr_bytes(to, domain);
    let mut iov = [
        libc::iovec { iov_base: hdr.as_ptr() as *mut _, iov_len: hdr.len() },
        libc::iovec { iov_base: payload.as_ptr() as *mut _, iov_len: payload.len() },
    ];
    // SAFETY: all-zero is a valid msghdr.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_name = name.as_mut_ptr().cast();
    m.msg_namelen = name.len() as libc::socklen_t;
    m.msg_iov = iov.as_mut_ptr();
    m.msg_iovlen = 2;
    let flags = if nonblock { libc::MSG_DONTWAIT } else { 0 };
    // SAFETY: our UDP socket; the message and its buffers live across the call.
    let n = unsafe { libc::sendmsg(fd, &m, flags) };
    if n < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

// ---- the datagram service thread (upstream's udp_svc) ----

struct Svc {
    list: Mutex<Vec<Weak<Dgram>>>,
    cmd: Flag,
    pid: Mutex<u32>,
}

static SVC: LazyLock<Option<Svc>> =
    LazyLock::new(|| Some(Svc { list: Mutex::new(Vec::new()), cmd: Flag::new().ok()?, pid: Mutex::new(0) }));

fn svc_register(d: &Arc<Dgram>) {
    let Some(svc) = SVC.as_ref() else { return };
    lock(&svc.list).push(Arc::downgrade(d));
    {
        let mut pid = lock(&svc.pid);
        let me = std::process::id();
        if *pid != me {
            *pid = me;
            let _ = common::thread::spawn("rsocket-udp", svc_run);
        }
    }
    svc.cmd.raise();
}

fn svc_unregister(d: &Dgram) {
    let Some(svc) = SVC.as_ref() else { return };
    lock(&svc.list).retain(|w| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), d));
    svc.cmd.raise();
}

fn svc_run() {
    let Some(svc) = SVC.as_ref() else { return };
    loop {
        let ds: Vec<Arc<Dgram>> = {
            let mut list = lock(&svc.list);
            list.retain(|w| w.strong_count() > 0);
            list.iter().filter_map(|w| w.upgrade()).filter(|d| !d.lock().closed).collect()
        };
        let mut fds = vec![libc::pollfd { fd: svc.cmd.raw(), events: libc::POLLIN, revents: 0 }];
        fds.extend(ds.iter().map(|d| libc::pollfd { fd: d.fd, events: libc::POLLIN, revents: 0 }));
        // SAFETY: a live pollfd array.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 1000) };
        svc.cmd.lower();
        for (d, p) in ds.iter().zip(&fds[1..]) {
            if p.revents & libc::POLLIN != 0 {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| d.svc_read()));
            }
        }
    }
}
