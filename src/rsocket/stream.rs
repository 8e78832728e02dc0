//! Stream rsockets (SOCK_STREAM over an RC QP): the socket's life cycle
//! (bind, listen, connect through the CM with the connection data of
//! rsocket.md §3), sending and receiving over `conn::Conn`, shutdown and
//! close, and the blocking/non-blocking waits every call shares.
//!
//! Locking: one mutex per rsocket guards all its state and its verbs
//! objects; nobody sleeps holding it. A thread that must wait polls the
//! rsocket's CQ channel fd, its CM channel fd (the rsocket number) and its
//! `wake` flag; whoever changes the state while others sleep raises `wake`.

use super::cm::{self, Id};
use super::config::*;
use super::conn::Conn;
use super::iov::{Gather, Scatter, Seg, Segs};
use super::opts::Opts;
use super::poll::{self, Count, Sleepers, Sleepy};
use super::wire::*;
use crate::cm::registry::lock;
use crate::sys::{Errno, Flag, Result};
use rdma_abi::cma::*;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Init,
    Bound,
    Listening,
    ResolvingAddr,
    AddrResolved,
    ResolvingRoute,
    RouteResolved,
    Connecting,
    Open,
    ConnectError,
    Disconnected,
    Error,
    Closed,
}

impl Phase {
    pub fn opening(self) -> bool {
        matches!(
            self,
            Phase::ResolvingAddr
                | Phase::AddrResolved
                | Phase::ResolvingRoute
                | Phase::RouteResolved
                | Phase::Connecting
        )
    }
    /// Has (or had) a data path.
    pub fn connected(self) -> bool {
        matches!(self, Phase::Open | Phase::Disconnected | Phase::Error)
    }
}

/// The accept queue of a listening rsocket.
pub struct Listen {
    pub queue: VecDeque<Arc<Stream>>,
    pub flag: Flag,
}

pub struct St {
    pub id: Option<Id>,
    pub phase: Phase,
    pub readable: bool,
    pub writable: bool,
    /// SHUT_WR (or SHUT_RDWR) was called here: sends fail with EPIPE.
    pub shut_wr: bool,
    /// Pending error for SO_ERROR.
    pub err: i32,
    pub opts: Opts,
    pub nonblock: bool,
    pub cloexec: bool,
    retries: u32,
    dst: Vec<u8>,
    pub conn: Option<Conn>,
    pub listen: Option<Listen>,
    /// The sleepers and the wake flag.
    sl: Sleepers,
    /// Threads in raccept's `cond.wait_timeout`.
    cond_waiters: u32,
    /// The CM channel had an event at the last sleep (read it at the next progress).
    pub cm_pending: bool,
    last_cm_check: Instant,
    /// Progress passes left before the clock is read for the CM check.
    cm_check_in: u32,
    /// Bumped on every state change (repoll's edge-triggered mode).
    pub gen: u64,
    pub last_send: Instant,
}

pub struct Stream {
    pub fd: i32,
    pub domain: i32,
    st: Mutex<St>,
    pub cond: Condvar,
    pub wake: Flag,
}

/// How often a connected rsocket looks at its CM channel without sleeping.
const CM_CHECK_EVERY: Duration = Duration::from_millis(100);
const CM_CHECK_PASSES: u32 = 16;

fn eagain(e: Errno) -> bool {
    e == Errno::EAGAIN || e.0 == libc::EWOULDBLOCK
}

impl Sleepy for St {
    fn sleepers(&mut self) -> &mut Sleepers {
        &mut self.sl
    }
    fn moved_on(&self, gen: u64) -> bool {
        self.gen != gen || self.phase == Phase::Closed
    }
}

impl St {
    fn id(&self) -> Result<&Id> {
        self.id.as_ref().ok_or(Errno::EBADF)
    }

    pub fn can_send(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| c.can_send())
    }

    pub fn have_data(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| c.have_data())
    }

    /// Bytes queued for the application.
    fn queued(&self) -> usize {
        self.conn.as_ref().map_or(0, |c| c.queued())
    }

    fn fail_connect(&mut self, e: Errno) -> Errno {
        self.phase = Phase::ConnectError;
        self.err = e.0;
        self.readable = false;
        self.writable = false;
        self.gen += 1;
        e
    }

    fn timeout_ms(&self) -> i32 {
        1000 << self.retries.min(RS_CONN_RETRIES)
    }

    /// Advances a connection attempt as far as it goes without waiting.
    /// Ok: open; Err(EINPROGRESS): waiting for a CM event; other: failed.
    pub fn do_connect(&mut self) -> Result<()> {
        loop {
            let id = self.id()?.raw();
            match self.phase {
                Phase::Open => return Ok(()),
                Phase::Init | Phase::Bound => {
                    self.phase = Phase::ResolvingAddr;
                    let mut dst = self.dst.clone();
                    // SAFETY: our id; dst holds a socket address of its family's length.
                    let r = unsafe {
                        cm::rdma_resolve_addr(id, std::ptr::null_mut(), dst.as_mut_ptr().cast(), self.timeout_ms())
                    };
                    match cm::check(r) {
                        Ok(()) => self.phase = Phase::AddrResolved,
                        Err(e) if eagain(e) => return Err(Errno(libc::EINPROGRESS)),
                        Err(e) if e.0 == libc::ETIMEDOUT && self.retries < RS_CONN_RETRIES => {
                            self.retries += 1;
                            self.phase = Phase::Init;
                        }
                        Err(e) => return Err(self.fail_connect(e)),
                    }
                }
                Phase::ResolvingAddr | Phase::ResolvingRoute | Phase::Connecting => {
                    let Some((ev, status, data)) = self.id()?.next_event()? else {
                        return Err(Errno(libc::EINPROGRESS));
                    };
                    match (self.phase, ev) {
                        (Phase::ResolvingAddr, RDMA_CM_EVENT_ADDR_RESOLVED) if status == 0 => {
                            self.phase = Phase::AddrResolved
                        }
                        (Phase::ResolvingRoute, RDMA_CM_EVENT_ROUTE_RESOLVED) if status == 0 => {
                            self.phase = Phase::RouteResolved
                        }
                        (Phase::Connecting, RDMA_CM_EVENT_ESTABLISHED) => return self.established(&data),
                        (Phase::ResolvingAddr | Phase::ResolvingRoute, _)
                            if status == -libc::ETIMEDOUT && self.retries < RS_CONN_RETRIES =>
                        {
                            self.retries += 1;
                            self.phase =
                                if self.phase == Phase::ResolvingAddr { Phase::Init } else { Phase::AddrResolved };
                        }
                        (_, RDMA_CM_EVENT_TIMEWAIT_EXIT) => {}
                        _ => return Err(self.fail_connect(cm::event_errno(ev, status))),
                    }
                }
                Phase::AddrResolved => {
                    self.phase = Phase::ResolvingRoute;
                    let r = match self.opts.route {
                        Some(mut path) => {
                            // SAFETY: our id; the path data block lives across the call.
                            unsafe {
                                cm::rdma_set_option(
                                    id,
                                    RDMA_OPTION_IB,
                                    RDMA_OPTION_IB_PATH,
                                    path.as_mut_ptr().cast(),
                                    path.len(),
                                )
                            }
                        }
                        // SAFETY: our id.
                        None => unsafe { cm::rdma_resolve_route(id, self.timeout_ms()) },
                    };
                    match cm::check(r) {
                        Ok(()) => self.phase = Phase::RouteResolved,
                        Err(e) if eagain(e) => return Err(Errno(libc::EINPROGRESS)),
                        Err(e) if e.0 == libc::ETIMEDOUT && self.retries < RS_CONN_RETRIES => {
                            self.retries += 1;
                            self.phase = Phase::AddrResolved;
                        }
                        Err(e) => return Err(self.fail_connect(e)),
                    }
                }
                Phase::RouteResolved => {
                    let conn = match Conn::create(self.id()?, &self.opts) {
                        Ok(c) => c,
                        Err(e) => return Err(self.fail_connect(e)),
                    };
                    let cd = conn.conn_data().encode();
                    let iwarp = conn.msg_send;
                    self.conn = Some(conn);
                    self.phase = Phase::Connecting;
                    let mut p = rdma_conn_param {
                        private_data: cd.as_ptr().cast(),
                        private_data_len: cd.len() as u8,
                        responder_resources: 0,
                        initiator_depth: if iwarp { 1 } else { 0 },
                        flow_control: 1,
                        retry_count: 7,
                        rnr_retry_count: 7,
                        srq: 0,
                        qp_num: 0,
                    };
                    // SAFETY: our id; p and its private data live across the call.
                    match cm::check(unsafe { cm::rdma_connect(id, &mut p) }) {
                        Ok(()) => {
                            let data = self.id()?.stored_event().map(|e| e.2).unwrap_or_default();
                            return self.established(&data);
                        }
                        Err(e) if eagain(e) => return Err(Errno(libc::EINPROGRESS)),
                        Err(e) => return Err(self.fail_connect(e)),
                    }
                }
                Phase::ConnectError => return Err(Errno(if self.err != 0 { self.err } else { libc::ECONNREFUSED })),
                _ => return Err(Errno::EINVAL),
            }
        }
    }

    /// ESTABLISHED on the active side: the reply's connection data.
    fn established(&mut self, data: &[u8]) -> Result<()> {
        let Some(peer) = ConnData::decode(data).filter(|c| c.version == CONN_VERSION) else {
            return Err(self.fail_connect(Errno::ENOTSUP));
        };
        let Some(c) = self.conn.as_mut() else { return Err(self.fail_connect(Errno::EIO)) };
        c.save_peer(&peer);
        self.phase = Phase::Open;
        self.readable = true;
        self.writable = true;
        self.gen += 1;
        if let Some(c) = self.conn.as_mut() {
            c.update_credits(true);
        }
        Ok(())
    }

    /// Whether CM_CHECK_EVERY has passed; the clock is read once per
    /// CM_CHECK_PASSES calls (busy loops call this constantly).
    fn cm_check_due(&mut self) -> bool {
        self.cm_check_in = self.cm_check_in.saturating_sub(1);
        if self.cm_check_in > 0 {
            return false;
        }
        self.cm_check_in = CM_CHECK_PASSES;
        self.last_cm_check.elapsed() >= CM_CHECK_EVERY
    }

    /// Non-blocking progress: CM events of a connected rsocket, completions,
    /// credits. Returns whether anything changed.
    pub fn progress(&mut self) -> bool {
        let mut changed = false;
        if self.phase.opening() {
            let before = self.phase;
            let _ = self.do_connect();
            changed |= self.phase != before;
        }
        if self.phase.connected() && !self.cm_pending && self.cm_check_due() {
            // A caller that never sleeps (busy non-blocking loops) still
            // learns of a disconnect the CM reported.
            self.last_cm_check = Instant::now();
            self.cm_pending = self.id.as_ref().is_some_and(|id| crate::sys::readable_now(id.fd()));
        }
        if self.phase.connected() && self.cm_pending {
            self.cm_pending = false;
            changed |= self.cm_events();
        }
        if let Some(c) = self.conn.as_mut() {
            match c.process_cq() {
                Ok(f) => {
                    changed |= f.any;
                    if f.recv_flush && self.phase == Phase::Open {
                        // Our QP went to the error state: the CM says why.
                        changed |= self.cm_events();
                    }
                    if f.disconnect {
                        self.disconnected(false);
                    }
                    if f.shutdown {
                        if self.writable {
                            self.readable = false;
                        } else {
                            self.disconnected(false);
                        }
                    }
                    if f.send_error && self.phase == Phase::Open {
                        self.phase = Phase::Error;
                        self.err = libc::EIO;
                        self.readable = false;
                        self.writable = false;
                    }
                }
                Err(_) if self.phase == Phase::Open => {
                    self.phase = Phase::Error;
                    self.err = libc::EIO;
                    changed = true;
                }
                Err(_) => {}
            }
            let open = self.phase == Phase::Open;
            if let Some(c) = self.conn.as_mut() {
                c.update_credits(open);
            }
        }
        if changed {
            self.gen += 1;
        }
        changed
    }

    /// The peer is gone (DISCONNECT message or CM event): no more sends or
    /// receives; queued data stays readable. `flush`: move the QP to error
    /// so outstanding work completes.
    fn disconnected(&mut self, flush: bool) {
        if matches!(self.phase, Phase::Open) {
            self.phase = Phase::Disconnected;
        }
        self.readable = false;
        self.writable = false;
        self.gen += 1;
        if flush {
            if let Some(c) = self.conn.as_ref() {
                super::verbs::qp_to_error(c.qp);
            }
        }
    }

    fn cm_events(&mut self) -> bool {
        let mut changed = false;
        while let Some(Ok(Some(ev))) = self.id.as_ref().map(|id| id.next_event()) {
            match ev.0 {
                RDMA_CM_EVENT_DISCONNECTED | RDMA_CM_EVENT_DEVICE_REMOVAL => {
                    changed = true;
                    self.disconnected(true);
                }
                _ => {}
            }
        }
        changed
    }

    /// Sends what it can of `src` (at most `max` bytes per message).
    fn send_some(&mut self, src: &mut Gather) -> Result<usize> {
        let mut sent = 0;
        let c = self.conn.as_mut().ok_or(Errno(libc::ENOTCONN))?;
        let mut olen = c.first_chunk();
        if !c.iomap_pending.is_empty() && !c.send_iomaps()? {
            return Ok(0);
        }
        while src.left() > 0 && c.can_send() {
            let n = c.send_data(src, olen)?;
            if n == 0 {
                break;
            }
            sent += n;
            olen = (olen * 2).min(super::conn::RS_MAX_TRANSFER);
        }
        if sent > 0 {
            self.note_sent();
        }
        Ok(sent)
    }

    /// Data went out: keepalive's clock (only keepalive reads it: no clock read per
    /// send without it).
    #[inline]
    fn note_sent(&mut self) {
        if self.opts.keepalive {
            self.last_send = Instant::now();
        }
    }

    /// The error a send on a socket that cannot send gets.
    fn send_error(&self) -> Errno {
        match self.phase {
            Phase::Init | Phase::Bound | Phase::Listening => Errno(libc::ENOTCONN),
            _ if self.shut_wr => Errno(libc::EPIPE),
            Phase::Open if !self.writable => Errno(libc::EPIPE),
            _ => Errno(libc::ECONNRESET),
        }
    }
}

impl Stream {
    pub fn new(domain: i32) -> Result<Arc<Stream>> {
        let id = Id::new(RDMA_PS_TCP)?;
        // SAFETY: our fresh id; the family presets what rgetsockname reports before bind.
        unsafe { (*id.raw()).route.addr.src.addr.sa_family = domain as u16 };
        Self::from_id(id, domain, Opts::default(), false)
    }

    fn from_id(id: Id, domain: i32, opts: Opts, nonblock: bool) -> Result<Arc<Stream>> {
        let fd = id.fd();
        crate::sys::set_nonblock(fd, true)?;
        Ok(Arc::new(Stream {
            fd,
            domain,
            st: Mutex::new(St {
                id: Some(id),
                phase: Phase::Init,
                readable: false,
                writable: false,
                shut_wr: false,
                err: 0,
                opts,
                nonblock,
                cloexec: false,
                retries: 0,
                dst: Vec::new(),
                conn: None,
                listen: None,
                sl: Sleepers::default(),
                cond_waiters: 0,
                cm_pending: true,
                last_cm_check: Instant::now(),
                cm_check_in: CM_CHECK_PASSES,
                gen: 0,
                last_send: Instant::now(),
            }),
            cond: Condvar::new(),
            wake: Flag::new()?,
        }))
    }

    pub fn lock(&self) -> MutexGuard<'_, St> {
        lock(&self.st)
    }

    /// Runs progress and tells sleepers when something changed.
    pub fn progress(&self, st: &mut St) {
        if st.progress() {
            self.notify(st);
        }
    }

    /// Tells sleepers that the state changed: the wake flag, if anyone sleeps.
    /// A change of readiness also bumps `gen` (rpoll counts itself only on an
    /// unchanged generation; repoll's edges are generations), where it is made.
    pub fn notify(&self, st: &mut St) {
        // A notify is a futex syscall even with nobody waiting, and this runs on
        // every receive: only raccept and settling threads wait on the
        // condition variable.
        if st.sl.notify(&self.wake) || st.cond_waiters > 0 {
            self.cond.notify_all();
        }
    }

    /// Waits until `ready` holds (after progress), or fails with EAGAIN when
    /// non-blocking. `deadline` bounds the wait (then ETIMEDOUT).
    pub fn wait<'a>(
        &'a self,
        mut st: MutexGuard<'a, St>,
        nonblock: bool,
        deadline: Option<Instant>,
        ready: impl Fn(&St) -> bool,
    ) -> Result<MutexGuard<'a, St>> {
        let cfg = get_config();
        let mut spun = false;
        loop {
            self.progress(&mut st);
            if st.phase == Phase::Closed {
                return Err(Errno::EBADF);
            }
            if ready(&st) {
                return Ok(st);
            }
            if nonblock {
                return Err(Errno::EAGAIN);
            }
            if let Some(d) = deadline {
                if Instant::now() >= d {
                    return Err(Errno(libc::ETIMEDOUT));
                }
            }
            if !spun && st.conn.is_some() {
                spun = true;
                let mut spin = super::poll::Spin::new(cfg.polling_time_us);
                while spin.again() {
                    self.progress(&mut st);
                    if ready(&st) {
                        return Ok(st);
                    }
                }
                continue;
            }
            let mut fds = Vec::with_capacity(3);
            self.arm(&mut st, &mut fds)?;
            // Completions that came before the CQ was armed raise no event: look again.
            self.progress(&mut st);
            if ready(&st) || st.phase == Phase::Closed {
                continue;
            }
            let mut slice = cfg.wake_up_interval_ms;
            if let Some(d) = deadline {
                slice = slice.min(d.saturating_duration_since(Instant::now()).as_millis() as i32 + 1);
            }
            // Up for sleepers counted before this look: not for this one.
            if st.sl.up() {
                let gen = st.gen;
                st = poll::settle(&self.cond, st, gen, slice);
                continue;
            }
            // Counted only now, under the lock held since that look: a change made
            // by another thread after it raises the wake flag, and the progress
            // above did not raise it for this thread itself (a write and a read
            // of the flag, and a poll that returns at once, on every such race).
            let ticket = st.sl.count();
            drop(st);
            // SAFETY: a live pollfd array.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, slice) };
            let err = Errno::last();
            st = self.lock();
            self.finish(&mut st, ticket, (r >= 0).then_some(&fds[..]));
            // A signal ends the call as it would end upstream's blocking read
            // of the completion channel (sys::eintr_ends_call); other errors
            // (ENOMEM, too many fds) would fail every retry too.
            if r < 0 && crate::sys::poll_error_ends_wait(err) {
                return Err(err);
            }
        }
    }

    /// Counts a sleeper that armed with `arm`, unless the state changed since
    /// it read generation `gen`: look again instead. Busy: the wake flag is up
    /// for older sleepers (`settle_after`, then look again).
    pub fn count_waiter(&self, gen: u64) -> Count {
        let mut st = self.lock();
        // Another sleeper's finish may have read the event of the arming this
        // sleeper relied on: then arm again (and look again) first.
        if st.gen != gen || st.conn.as_ref().is_some_and(|c| !c.cq.armed()) {
            return Count::Changed;
        }
        st.sl.try_count()
    }

    /// `poll::settle` for rpoll and repoll, whose look read generation `gen`.
    pub fn settle_after(&self, gen: u64, ms: i32) {
        drop(poll::settle(&self.cond, self.lock(), gen, ms));
    }

    /// Adds the fds a sleeper on this rsocket polls, arming the CQ.
    /// A CQ that cannot be armed fails the wait with the verbs error, as a
    /// datagram rsocket's does (see `Dgram::arm_locked`): left out of the
    /// sleep, its completions would be seen only every wake_up_interval, and
    /// rpoll's count would refuse the unarmed CQ and look again in a loop.
    pub fn arm(&self, st: &mut St, fds: &mut Vec<libc::pollfd>) -> Result<()> {
        let ev = libc::POLLIN;
        fds.push(libc::pollfd { fd: self.wake.raw(), events: ev, revents: 0 });
        if st.phase == Phase::Listening {
            if let Some(l) = st.listen.as_ref() {
                fds.push(libc::pollfd { fd: l.flag.raw(), events: ev, revents: 0 });
            }
            return Ok(());
        }
        if let Some(c) = st.conn.as_mut() {
            c.cq.arm()?;
            fds.push(libc::pollfd { fd: c.cq.fd(), events: ev, revents: 0 });
        }
        if st.id.is_some() && (st.phase.opening() || st.phase.connected()) {
            fds.push(libc::pollfd { fd: self.fd, events: ev, revents: 0 });
        }
        Ok(())
    }

    /// `polled`: the entries `prepare` added, with the revents of the poll(2) that
    /// slept on them; None when the caller did not sleep. What that poll
    /// reported needs no second look (a `poll` of the CM fd, a `read` that
    /// finds no completion event): each costs a syscall on every sleep.
    /// `ticket`: what counting this sleeper returned.
    pub fn finish(&self, st: &mut St, ticket: u64, polled: Option<&[libc::pollfd]>) {
        if st.sl.finish(ticket, &self.wake) {
            self.cond.notify_all();
        }
        // A CQ event read here is processed here (see Dgram::finish_locked).
        if st.conn.as_mut().is_some_and(|c| c.cq.after_sleep(polled)) {
            self.progress(st);
        }
        let cm = match polled {
            Some(p) => p.iter().any(|p| p.fd == self.fd && p.revents != 0),
            None => crate::sys::readable_now(self.fd),
        };
        if st.id.is_some() && st.phase.connected() && cm {
            st.cm_pending = true;
        }
    }

    fn check_open(st: &St) -> Result<()> {
        if st.phase == Phase::Closed {
            Err(Errno::EBADF)
        } else {
            Ok(())
        }
    }

    // ---- setup ----

    pub fn bind(&self, addr: &[u8]) -> Result<()> {
        let mut st = self.lock();
        Self::check_open(&st)?;
        if st.phase != Phase::Init {
            return Err(Errno::EINVAL);
        }
        let mut a = addr.to_vec();
        // SAFETY: our id; a holds a socket address of its family's length.
        cm::check(unsafe { cm::rdma_bind_addr(st.id()?.raw(), a.as_mut_ptr().cast()) })?;
        st.phase = Phase::Bound;
        Ok(())
    }

    pub fn listen(self: &Arc<Self>, backlog: i32) -> Result<()> {
        let mut st = self.lock();
        Self::check_open(&st)?;
        match st.phase {
            Phase::Listening => return Ok(()),
            Phase::Init | Phase::Bound => {}
            _ => return Err(Errno::EINVAL),
        }
        // SAFETY: our id.
        cm::check(unsafe { cm::rdma_listen(st.id()?.raw(), backlog) })?;
        st.phase = Phase::Listening;
        st.listen = Some(Listen { queue: VecDeque::new(), flag: Flag::new()? });
        drop(st);
        super::listen::register(self);
        Ok(())
    }

    pub fn connect(&self, addr: &[u8]) -> Result<()> {
        let mut st = self.lock();
        Self::check_open(&st)?;
        match st.phase {
            Phase::Init | Phase::Bound => {
                st.dst = addr.to_vec();
                st.retries = 0;
            }
            p if p.opening() => {
                self.progress(&mut st);
                return match st.phase {
                    Phase::Open => Err(Errno(libc::EISCONN)),
                    p if p.opening() => Err(Errno(libc::EALREADY)),
                    _ => {
                        let e = std::mem::take(&mut st.err);
                        Err(Errno(if e != 0 { e } else { libc::ECONNREFUSED }))
                    }
                };
            }
            Phase::Open | Phase::Disconnected | Phase::Error => return Err(Errno(libc::EISCONN)),
            Phase::ConnectError if st.err != 0 => return Err(Errno(std::mem::take(&mut st.err))),
            _ => return Err(Errno::EINVAL),
        }
        let nonblock = st.nonblock;
        let r = st.do_connect();
        st.gen += 1; // Init/Bound left: what a sleeper polls changes
        self.notify(&mut st);
        match r {
            Ok(()) => Ok(()),
            Err(e) if e.0 == libc::EINPROGRESS && nonblock => Err(e),
            Err(e) if e.0 == libc::EINPROGRESS => {
                let st = self.wait(st, false, None, |s| !s.phase.opening())?;
                match st.phase {
                    Phase::Open => Ok(()),
                    _ => {
                        let mut st = st;
                        let e = std::mem::take(&mut st.err);
                        Err(Errno(if e != 0 { e } else { libc::ECONNREFUSED }))
                    }
                }
            }
            Err(e) => {
                st.err = 0;
                Err(e)
            }
        }
    }

    /// A connection the listen service accepted: `child` comes from
    /// rdma_get_request on the listener `l` (whose options it inherits).
    pub fn accept_child(l: &St, domain: i32, child: Id) -> Result<Arc<Stream>> {
        let req = child.stored_event();
        let param = child.stored_conn_param();
        let peer = req.as_ref().and_then(|r| ConnData::decode(&r.2)).filter(|c| c.version == CONN_VERSION);
        let Some(peer) = peer else {
            // SAFETY: the new id of a request; rejecting needs no data.
            unsafe { cm::rdma_reject(child.raw(), std::ptr::null(), 0) };
            return Err(Errno::ENOTSUP);
        };
        crate::sys::set_nonblock(child.fd(), true)?;
        let opts = l.opts.clone();
        let mut conn = match Conn::create(&child, &opts) {
            Ok(c) => c,
            Err(e) => {
                // SAFETY: as above.
                unsafe { cm::rdma_reject(child.raw(), std::ptr::null(), 0) };
                return Err(e);
            }
        };
        conn.save_peer(&peer);
        conn.mute = conn.msg_send;
        let cd = conn.conn_data().encode();
        // SAFETY: all-zero is a valid conn_param.
        let mut p: rdma_conn_param = param.unwrap_or(unsafe { std::mem::zeroed() });
        p.private_data = cd.as_ptr().cast();
        p.private_data_len = cd.len() as u8;
        p.flow_control = 1;
        p.retry_count = 7;
        p.rnr_retry_count = 7;
        p.srq = 0;
        p.qp_num = 0;
        if conn.msg_send && p.initiator_depth == 0 {
            p.initiator_depth = 1;
        }
        // SAFETY: the new id; p and its private data live across the call.
        match cm::check(unsafe { cm::rdma_accept(child.raw(), &mut p) }) {
            Ok(()) => {}
            Err(e) if eagain(e) => {}
            Err(e) => {
                conn.destroy(&child);
                return Err(e);
            }
        }
        let s = Stream::from_id(child, domain, opts, l.nonblock)?;
        {
            let mut st = s.lock();
            st.phase = Phase::Open;
            st.readable = true;
            st.writable = true;
            conn.update_credits(true);
            st.conn = Some(conn);
        }
        Ok(s)
    }

    pub fn accept(&self, nonblock_call: bool) -> Result<Arc<Stream>> {
        let mut st = self.lock();
        Self::check_open(&st)?;
        if st.phase != Phase::Listening {
            return Err(Errno::EINVAL);
        }
        let nonblock = st.nonblock || nonblock_call;
        loop {
            if st.phase != Phase::Listening {
                return Err(Errno::EBADF);
            }
            let l = st.listen.as_mut().ok_or(Errno::EINVAL)?;
            if let Some(s) = l.queue.pop_front() {
                if l.queue.is_empty() {
                    l.flag.lower();
                }
                return Ok(s);
            }
            if nonblock {
                return Err(Errno::EAGAIN);
            }
            st.cond_waiters += 1;
            st = self.cond.wait_timeout(st, Duration::from_millis(500)).unwrap_or_else(|e| e.into_inner()).0;
            st.cond_waiters -= 1;
        }
    }

    // ---- data ----

    /// rsend/rwrite/rsendmsg on a stream.
    pub fn send(&self, src: &mut Gather, flags: i32) -> Result<usize> {
        let total = src.left();
        let mut st = self.lock();
        Self::check_open(&st)?;
        let nonblock = st.nonblock || flags & libc::MSG_DONTWAIT != 0;
        if st.phase.opening() {
            st = self.finish_connect(st, nonblock)?;
        }
        if st.phase != Phase::Open || !st.writable {
            return Err(st.send_error());
        }
        if total == 0 {
            return Ok(0);
        }
        let mut sent = 0;
        let deadline = st.opts.sndtimeo.map(|t| Instant::now() + t);
        loop {
            let n = st.send_some(src)?;
            sent += n;
            if src.left() == 0 {
                break;
            }
            match self.wait(st, nonblock, deadline, |s| s.can_send() || s.phase != Phase::Open || !s.writable) {
                Ok(g) => st = g,
                // What went out is reported, whatever ended the wait (as a socket's send).
                Err(_) if sent > 0 => return Ok(sent),
                Err(e) if e.0 == libc::ETIMEDOUT => return Err(Errno::EAGAIN),
                Err(e) => return Err(e),
            }
            if st.phase != Phase::Open || !st.writable {
                if sent > 0 {
                    return Ok(sent);
                }
                return Err(st.send_error());
            }
        }
        Ok(sent)
    }

    /// `send` of one buffer in its common case, without the general path's waits
    /// and loop: an open stream whose lock is free, and `len` bytes (more than 0)
    /// that one message carries whole now. None: not that case (nothing was done),
    /// `send` decides; otherwise the result `send` would have given.
    ///
    /// # Safety
    /// `buf` is readable for `len` bytes.
    #[inline]
    pub unsafe fn send_now(&self, buf: *const u8, len: usize) -> Option<Result<usize>> {
        let mut st = self.st.try_lock().ok()?;
        if st.phase != Phase::Open || !st.writable || len == 0 {
            return None;
        }
        let c = st.conn.as_mut()?;
        let t = c.fits_one(len)?;
        // `send_some`'s one message, without its loop (it would end after this one).
        if let Err(e) = c.send_data_to(t, &mut Gather::new(Segs::One([Seg { ptr: buf as *mut u8, len }])), len) {
            return Some(Err(e));
        }
        st.note_sent();
        Some(Ok(len))
    }

    /// `recv` into one buffer, without MSG_PEEK or MSG_WAITALL, on an open stream
    /// whose lock is free, when its first look settles the call: data to copy, or
    /// none on a non-blocking call (EAGAIN). None: `recv` decides (nothing was
    /// consumed; a CQ poll it repeats finds at most more).
    ///
    /// # Safety
    /// `buf` is writable for `len` bytes.
    #[inline]
    pub unsafe fn recv_now(&self, buf: *mut u8, len: usize, flags: i32) -> Option<Result<usize>> {
        if flags & (libc::MSG_PEEK | libc::MSG_WAITALL) != 0 || len == 0 {
            return None;
        }
        let mut st = self.st.try_lock().ok()?;
        if st.phase != Phase::Open {
            return None;
        }
        // As `recv`'s first pass: no CQ poll when the first queued message fills the call.
        if !st.conn.as_ref().is_some_and(|c| c.fills(len)) {
            self.progress(&mut st);
        }
        if let Some(c) = st.conn.as_mut().filter(|c| c.have_data()) {
            // SAFETY: the caller's buffer of `len` bytes.
            let got = unsafe { c.take_into(buf, len) };
            if got > 0 {
                self.consumed(&mut st);
                return Some(Ok(got));
            }
        }
        let nonblock = st.nonblock || flags & libc::MSG_DONTWAIT != 0;
        (nonblock && st.phase == Phase::Open && st.readable).then_some(Err(Errno::EAGAIN))
    }

    /// Data left the receive queue (not a peek): the credits it frees go out, the last
    /// data of a closed connection read raises POLLHUP, sleepers are told.
    #[inline]
    fn consumed(&self, st: &mut St) {
        let open = st.phase == Phase::Open;
        if let Some(c) = st.conn.as_mut() {
            c.update_credits(open);
        }
        if !st.have_data() && !open {
            st.gen += 1;
        }
        self.notify(st);
    }

    /// Completes a connection attempt before a data call (EAGAIN while it
    /// is still in progress on a non-blocking rsocket).
    fn finish_connect<'a>(&'a self, mut st: MutexGuard<'a, St>, nonblock: bool) -> Result<MutexGuard<'a, St>> {
        self.progress(&mut st);
        if st.phase.opening() {
            if nonblock {
                return Err(Errno::EAGAIN);
            }
            st = self.wait(st, false, None, |s| !s.phase.opening())?;
        }
        Ok(st)
    }

    /// rrecv/rread/rrecvmsg on a stream.
    pub fn recv(&self, dst: &mut Scatter, flags: i32) -> Result<usize> {
        let mut st = self.lock();
        Self::check_open(&st)?;
        let nonblock = st.nonblock || flags & libc::MSG_DONTWAIT != 0;
        let peek = flags & libc::MSG_PEEK != 0;
        let waitall = flags & libc::MSG_WAITALL != 0 && !peek;
        if st.phase.opening() {
            st = self.finish_connect(st, nonblock)?;
        }
        if !st.phase.connected() {
            return Err(Errno(libc::ENOTCONN));
        }
        if dst.room == 0 {
            return Ok(0);
        }
        let mut got = 0;
        // One SO_RCVTIMEO for the whole call, however many pieces it gathers.
        let deadline = st.opts.rcvtimeo.map(|t| Instant::now() + t);
        if peek && flags & libc::MSG_WAITALL != 0 && !nonblock {
            st = self.wait_queued(st, dst.room, deadline)?;
        }
        loop {
            // A first queued message that fills the call is read without a CQ poll
            // first: after a wait that just found it, another poll would only delay
            // the answer. Otherwise poll, so that a caller asking for more (a repeated
            // MSG_PEEK above all) sees what arrived since.
            if !st.conn.as_ref().is_some_and(|c| c.fills(dst.room)) {
                self.progress(&mut st);
            }
            if let Some(c) = st.conn.as_mut().filter(|c| c.have_data()) {
                got += c.copy_out(dst, peek);
                if got > 0 && !peek {
                    self.consumed(&mut st);
                }
            }
            if dst.room == 0 || (got > 0 && !waitall) {
                return Ok(got);
            }
            if !st.readable || st.phase != Phase::Open {
                if got > 0 {
                    return Ok(got);
                }
                if st.phase == Phase::Error && st.err != 0 {
                    st.err = 0;
                    return Err(Errno(libc::ECONNRESET));
                }
                return Ok(0);
            }
            if nonblock {
                // Progress just ran (a busy caller repeats this call: one CQ poll
                // each). MSG_WAITALL does not make a non-blocking call wait (TCP).
                return if got > 0 { Ok(got) } else { Err(Errno::EAGAIN) };
            }
            match self.wait(st, false, deadline, |s| s.have_data() || !s.readable || s.phase != Phase::Open)
            {
                Ok(g) => st = g,
                Err(_) if got > 0 => return Ok(got),
                // SO_RCVTIMEO expired: EAGAIN, as a socket says.
                Err(e) if e.0 == libc::ETIMEDOUT => return Err(Errno::EAGAIN),
                Err(e) => return Err(e),
            }
        }
    }

    /// MSG_PEEK with MSG_WAITALL, as TCP: waits until `want` bytes are queued or the
    /// stream can bring no more. A wait that a signal or SO_RCVTIMEO ends lets the
    /// peek see what came meanwhile (TCP's peeks copy as data comes), and fails only
    /// when nothing did.
    fn wait_queued<'a>(
        &'a self,
        st: MutexGuard<'a, St>,
        want: usize,
        deadline: Option<Instant>,
    ) -> Result<MutexGuard<'a, St>> {
        match self.wait(st, false, deadline, |s| s.queued() >= want || !s.readable || s.phase != Phase::Open) {
            Ok(g) => Ok(g),
            Err(e) if e == Errno::EBADF => Err(e),
            Err(e) => {
                let st = self.lock();
                if st.have_data() {
                    Ok(st)
                } else if e.0 == libc::ETIMEDOUT {
                    Err(Errno::EAGAIN)
                } else {
                    Err(e)
                }
            }
        }
    }

    // ---- shutdown/close ----

    pub fn shutdown(&self, how: i32) -> Result<()> {
        if !matches!(how, libc::SHUT_RD | libc::SHUT_WR | libc::SHUT_RDWR) {
            return Err(Errno::EINVAL);
        }
        let mut st = self.lock();
        Self::check_open(&st)?;
        self.progress(&mut st);
        if !st.phase.connected() {
            return Err(Errno(libc::ENOTCONN));
        }
        drop(self.shutdown_locked(st, how));
        Ok(())
    }

    /// Tells the peer (rsocket.md §4 "Shutdown/close") and waits, bounded,
    /// until our sends completed.
    fn shutdown_locked<'a>(&'a self, mut st: MutexGuard<'a, St>, how: i32) -> MutexGuard<'a, St> {
        let ctrl = if st.phase == Phase::Open {
            match how {
                libc::SHUT_RDWR => {
                    st.readable = false;
                    st.writable = false;
                    st.shut_wr = true;
                    Some(CTRL_DISCONNECT)
                }
                libc::SHUT_WR => {
                    st.writable = false;
                    st.shut_wr = true;
                    Some(if st.readable { CTRL_SHUTDOWN } else { CTRL_DISCONNECT })
                }
                _ => {
                    st.readable = false;
                    if st.writable {
                        None
                    } else {
                        Some(CTRL_DISCONNECT)
                    }
                }
            }
        } else {
            if how != libc::SHUT_RD {
                st.shut_wr = true;
            }
            None
        };
        st.gen += 1;
        self.notify(&mut st);
        let deadline = Instant::now() + Duration::from_millis(2000);
        if let Some(ctrl) = ctrl {
            let r = self.wait(st, false, Some(deadline), |s| {
                s.conn.as_ref().is_none_or(|c| c.ctrl_ok(1)) || s.phase != Phase::Open
            });
            st = match r {
                Ok(g) => g,
                Err(_) => self.lock(),
            };
            if st.phase == Phase::Open {
                if let Some(c) = st.conn.as_mut() {
                    if c.ctrl_ok(1) && c.send_ctrl(ctrl).is_ok() && ctrl == CTRL_DISCONNECT {
                        st.phase = Phase::Disconnected;
                    }
                }
            }
        }
        if st.phase != Phase::Closed && st.conn.as_ref().is_some_and(|c| c.quiet_pending()) {
            let r = self.wait(st, false, Some(deadline), |s| s.conn.as_ref().is_none_or(|c| c.ctrl_ok(1)));
            st = match r {
                Ok(g) => g,
                Err(_) => self.lock(),
            };
            if let Some(c) = st.conn.as_mut() {
                c.fence();
            }
        }
        if st.conn.is_some() && st.phase != Phase::Closed {
            let r = self.wait(st, false, Some(deadline), |s| s.conn.as_ref().is_none_or(|c| c.all_sends_done()));
            st = match r {
                Ok(g) => g,
                Err(_) => self.lock(),
            };
        }
        if st.phase == Phase::Disconnected {
            if let Some(c) = st.conn.as_ref() {
                super::verbs::qp_to_error(c.qp);
            }
        }
        st.gen += 1;
        self.notify(&mut st);
        st
    }

    /// rclose: shuts the connection down, releases every resource, destroys
    /// the id (which closes the fd that was the rsocket number).
    pub fn close(&self) {
        let mut st = self.lock();
        if st.phase == Phase::Closed {
            return;
        }
        if st.phase == Phase::Open {
            self.progress(&mut st);
            if st.phase == Phase::Open {
                st = self.shutdown_locked(st, libc::SHUT_RDWR);
            }
        }
        let listen = st.listen.take();
        let conn = st.conn.take();
        let id = st.id.take();
        st.phase = Phase::Closed;
        st.gen += 1;
        self.notify(&mut st);
        drop(st);
        super::keepalive::unregister(self);
        if let Some(l) = listen {
            super::listen::unregister(self);
            for s in l.queue {
                s.close();
            }
        }
        if let (Some(c), Some(id)) = (conn, id.as_ref()) {
            c.destroy(id);
        }
        drop(id);
        self.wake.raise();
    }

    // ---- addresses ----

    pub fn name(&self, peer: bool) -> Result<Vec<u8>> {
        let st = self.lock();
        Self::check_open(&st)?;
        if peer && !st.phase.connected() {
            return Err(Errno(libc::ENOTCONN));
        }
        let id = st.id()?.raw();
        // SAFETY: a live id of ours; route.addr holds socket addresses.
        let sa = unsafe {
            if peer {
                (*id).route.addr.dst
            } else {
                (*id).route.addr.src
            }
        };
        // SAFETY: reading the family of the union.
        let fam = unsafe { sa.addr.sa_family } as i32;
        let len = match fam {
            libc::AF_INET => std::mem::size_of::<libc::sockaddr_in>(),
            libc::AF_INET6 => std::mem::size_of::<libc::sockaddr_in6>(),
            AF_IB => 48,
            _ => std::mem::size_of::<libc::sa_family_t>(),
        };
        // SAFETY: the union is 128 bytes; len ≤ 128.
        let bytes = unsafe { std::slice::from_raw_parts(&sa as *const rdma_sockaddr as *const u8, len) };
        Ok(bytes.to_vec())
    }

    // ---- readiness ----

    /// rpoll's view of this rsocket (after non-blocking progress).
    /// Readiness, and the state generation it was read at (under one lock: a
    /// change after it shows in the generation, so rpoll does not sleep on it).
    pub fn revents(&self, events: i16) -> (i16, u64) {
        let mut st = self.lock();
        self.progress(&mut st);
        let mut r: i16 = 0;
        match st.phase {
            Phase::Listening if st.listen.as_ref().is_some_and(|l| !l.queue.is_empty()) => r |= libc::POLLIN,
            Phase::ConnectError => r |= libc::POLLIN | libc::POLLOUT | libc::POLLERR,
            Phase::Open | Phase::Disconnected | Phase::Error => {
                if st.have_data() || !st.readable {
                    r |= libc::POLLIN;
                }
                if !st.writable || (st.phase == Phase::Open && st.can_send()) {
                    r |= libc::POLLOUT;
                }
                // Hang-up once the data the peer sent before leaving is read:
                // a reader polling for POLLIN gets all of it first.
                if st.phase == Phase::Disconnected && !st.have_data() {
                    r |= libc::POLLHUP;
                }
                if st.phase == Phase::Error {
                    r |= libc::POLLERR;
                }
            }
            Phase::Closed => r |= libc::POLLNVAL,
            _ => {}
        }
        (r & (events | libc::POLLERR | libc::POLLHUP | libc::POLLNVAL), st.gen)
    }

    pub fn with_st<R>(&self, f: impl FnOnce(&mut St) -> R) -> R {
        f(&mut self.lock())
    }
}
