//! Races between the application's calls and the peer's messages, forced by
//! calling the handlers directly: the first call is held inside its send on
//! a CM connection whose socket buffers are full, the second runs meanwhile.
//! (Two rdma_resolve_addr calls: the first is held by a host that never
//! answers its probe.) No device is needed (the ids have no QP).
//!
//! The CM connection is a Unix socket pair dressed as a TcpStream (the
//! engine's setsockopt calls fail harmlessly on it): unlike TCP on loopback,
//! where ACKs still trickle in, its buffer space frees only when the peer
//! reads, so a send into a full one blocks every time.

use super::conn::{self, REJ_CONSUMER};
use super::engine::{self, Conn, Owner};
use super::{soft_id, Phase, SoftId};
use crate::cm::{Channel, ChannelBox, IdBox};
use crate::sys::Errno;
use rdma_abi::cma::*;
use std::io::{ErrorKind, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

struct Rig {
    s: Arc<SoftId>,
    ch: Arc<Channel>,
    chp: *mut rdma_event_channel,
    id: *mut rdma_cm_id,
    conn: Arc<Conn>,
    /// The peer's end: never read, so that our sends block.
    peer: Option<UnixStream>,
}

impl Rig {
    /// An id in `phase` whose CM connection cannot take another byte.
    fn new(phase: Phase) -> Rig {
        let chp = ChannelBox::create().unwrap();
        let ch = ChannelBox::lookup(chp).unwrap();
        let (id, core) = IdBox::create_core(chp, std::ptr::null_mut(), RDMA_PS_TCP, None).unwrap();
        let s = soft_id(&core);
        let (ours, peer) = UnixStream::pair().unwrap();
        fill(&ours);
        // Owner::Closed: the engine watches it but never calls a handler.
        let conn = engine::get().add_conn(TcpStream::from(OwnedFd::from(ours)), Owner::Closed);
        {
            let mut st = s.st();
            st.phase.step(|_| true, phase).unwrap();
            st.conn = Some(conn.clone());
            st.src = Some(SocketAddr::from(([127, 0, 0, 1], 1)));
        }
        Rig { s, ch, chp, id, conn, peer: Some(peer) }
    }

    /// Lets the blocked send fail (EPIPE), as when the peer is gone.
    fn unblock(&mut self) {
        let _ = self.conn.sock.shutdown(Shutdown::Both);
        self.peer = None;
    }

    fn count(&self, event: u32) -> usize {
        self.ch.take_where(|p| p.event == event).len()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.unblock();
        conn::teardown(&self.s);
        let _ = IdBox::destroy(self.id);
        let _ = ChannelBox::destroy(self.chp);
    }
}

/// Writes until the socket takes nothing more (not even one byte).
fn fill(sock: &UnixStream) {
    sock.set_nonblocking(true).unwrap();
    for chunk in [&[0u8; 4096][..], &[0u8; 1][..]] {
        loop {
            match (&*sock).write(chunk) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("filling the CM connection: {e}"),
            }
        }
    }
    sock.set_nonblocking(false).unwrap();
}

/// Waits until `done` holds, at most `limit`; says whether it did.
fn wait_for(limit: Duration, done: impl Fn() -> bool) -> bool {
    let end = Instant::now() + limit;
    while !done() {
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
    std::thread::spawn(f)
}

/// The peer's socket closes while rdma_disconnect is sending its DREQ: the
/// EOF reports the end, and the failed DREQ must not report it again.
#[test]
fn eof_during_our_dreq_reports_disconnected_once() {
    let mut r = Rig::new(Phase::Connected);
    let s = r.s.clone();
    let t = spawn(move || conn::disconnect(&s));
    // DreqSent comes before the DREQ is sent, which now blocks.
    assert!(wait_for(Duration::from_secs(5), || r.s.phase() == Phase::DreqSent));
    // The peer's EOF, seen while the DREQ is blocked (or before it is tried:
    // then it finds no connection). Either way the DREQ fails after this.
    let c = r.conn.clone();
    conn::on_eof(&r.s, &c);
    r.unblock();
    assert_eq!(t.join().unwrap(), Ok(()));
    assert_eq!(r.s.phase(), Phase::Disconnected);
    assert_eq!(r.count(RDMA_CM_EVENT_DISCONNECTED), 1);
    // And one timewait.
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(r.count(RDMA_CM_EVENT_TIMEWAIT_EXIT), 1);
}

/// rdma_accept while rdma_reject of the same request is sending its REJ:
/// the request has one answer, so the accept is refused (and sends no REP).
#[test]
fn accept_during_a_reject_is_refused() {
    let mut r = Rig::new(Phase::ReqRcvd);
    let s = r.s.clone();
    let rej = spawn(move || conn::reject(&s, b"", REJ_CONSUMER));
    // The reject claims the request before its REJ leaves. (Were it not
    // claimed, the accept below would get past its check and block in its REP.)
    wait_for(Duration::from_millis(300), || r.s.phase() != Phase::ReqRcvd);
    let s = r.s.clone();
    let acc = spawn(move || conn::accept(&s, None));
    wait_for(Duration::from_millis(300), || acc.is_finished());
    r.unblock();
    assert_eq!(acc.join().unwrap(), Err(Errno::EINVAL));
    assert!(rej.join().unwrap().is_err(), "the REJ could not be sent");
    assert_eq!(r.s.phase(), Phase::Disconnected);
}

/// A host that takes no TCP handshake: a listener at 127.0.0.2 (routed to
/// this host, but no interface's address, so the soft CM probes it as a
/// remote host) whose accept queue is full, so SYNs to it are dropped and a
/// probe waits out its timeout.
fn silent_host() -> (std::net::TcpListener, TcpStream) {
    let l = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
    // SAFETY: listen on a listening socket we own only sets its backlog.
    assert_eq!(unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&l), 0) }, 0);
    let filler = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    assert!(!super::net::is_local(l.local_addr().unwrap().ip()), "127.0.0.2 must be probed as a remote host");
    let late = TcpStream::connect_timeout(&l.local_addr().unwrap(), Duration::from_millis(300));
    assert!(late.is_err(), "the accept queue is full: a handshake goes unanswered");
    (l, filler)
}

/// rdma_resolve_addr while the id's first resolution is under way (here,
/// its probe of a remote host): refused at once, as the kernel CM refuses
/// an id in ADDR_QUERY (EINVAL), and the first ends with one event. It used
/// to start a second resolution: two events, one of them ADDR_ERROR. Debian's
/// library on rxe, for an address nothing answers: the second call EINVAL,
/// rdma_bind_addr meanwhile EINVAL, one ADDR_ERROR (-ETIMEDOUT).
#[test]
fn a_second_resolve_addr_during_the_first_is_refused() {
    use super::Soft;
    use crate::backend::Backend;
    let (host, _filler) = silent_host();
    let chp = ChannelBox::create().unwrap();
    let ch = ChannelBox::lookup(chp).unwrap();
    let (id, core) = IdBox::create_core(chp, std::ptr::null_mut(), RDMA_PS_TCP, None).unwrap();
    let mut dst = [0u8; 128];
    super::net::to_storage(&host.local_addr().unwrap(), &mut dst);
    assert_eq!(Soft.resolve_addr(&core, None, &dst[..16], 500), Ok(()));
    assert_eq!(Soft.resolve_addr(&core, None, &dst[..16], 500), Err(Errno::EINVAL));
    let mut any = [0u8; 128];
    super::net::to_storage(&SocketAddr::from(([0, 0, 0, 0], 0)), &mut any);
    assert_eq!(Soft.bind(&core, &any[..16]), Err(Errno::EINVAL), "nor may the id be bound meanwhile");
    let ended = |p: &crate::cm::Pending| matches!(p.event, RDMA_CM_EVENT_ADDR_RESOLVED | RDMA_CM_EVENT_ADDR_ERROR);
    let events = std::cell::RefCell::new(Vec::new());
    let collect = || events.borrow_mut().extend(ch.take_where(ended).into_iter().map(|p| p.event));
    wait_for(Duration::from_secs(5), || {
        collect();
        !events.borrow().is_empty()
    });
    // A second resolution, had one started, would end about when the first did.
    std::thread::sleep(Duration::from_millis(300));
    collect();
    let events = events.into_inner();
    assert_eq!(events, [RDMA_CM_EVENT_ADDR_ERROR], "one event: the probe timed out");
    Soft.destroy(&core);
    let _ = IdBox::destroy(id);
    let _ = ChannelBox::destroy(chp);
}
