//! `Channel::pop` on a channel with a source (what the kernel CM's channels
//! are), driven by a pipe: each byte written is one source event ('a': an
//! event that went elsewhere, so pop must read again).

use super::channel::{Source, Take};
use super::event::Param;
use super::tests::{readable, set_nonblock};
use super::*;
use crate::sys::{cerr, Epoll, Errno, Result};
use rdma_abi::cma::*;
use std::any::Any;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

struct PipeSource {
    rd: OwnedFd,
    /// Kept open for the test's writes (`Rig::wr`).
    _wr: OwnedFd,
    /// The fd the application is given: an epoll set of the pipe (and the
    /// queue flag, once watched), as the kernel CM's channels have.
    public: Epoll,
    owner: Arc<IdCore>,
    takes: Arc<AtomicUsize>,
}

impl Source for PipeSource {
    fn public(&self) -> &Epoll {
        &self.public
    }
    fn take(&self, _ch: &Arc<Channel>, _slot: &mut Option<Slot>) -> Result<Take> {
        self.takes.fetch_add(1, Ordering::Relaxed);
        let mut b = 0u8;
        // SAFETY: reads one byte into a live u8 from our non-blocking pipe.
        let n = unsafe { libc::read(self.rd.as_raw_fd(), (&mut b as *mut u8).cast(), 1) };
        Ok(match (n, b) {
            (1, b'a') => Take::Again,
            (1, b) => Take::Here(self.owner.pending(RDMA_CM_EVENT_USER, 0, Param::arg(b as u64)).handed_out()),
            _ => Take::Empty,
        })
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct Rig {
    ch: Arc<Channel>,
    /// Reads of the source so far.
    takes: Arc<AtomicUsize>,
    wr: i32,
    public: i32,
    id: *mut rdma_cm_id,
    plain: *mut rdma_event_channel,
}

impl Rig {
    fn new() -> Rig {
        let plain = ChannelBox::create().unwrap();
        let id = IdBox::create(plain, std::ptr::null_mut(), RDMA_PS_TCP, None).unwrap();
        let owner = IdBox::lookup(id).unwrap();
        let mut fds = [0; 2];
        // SAFETY: a live array of two fds.
        cerr(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) }).unwrap();
        // SAFETY: fresh fds owned by nobody else.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let public = Epoll::new().unwrap();
        public.ctl(libc::EPOLL_CTL_ADD, rd.as_raw_fd(), 0).unwrap();
        let (wr_raw, public_raw) = (wr.as_raw_fd(), public.raw());
        let takes = Arc::new(AtomicUsize::new(0));
        let src = PipeSource { rd, _wr: wr, public, owner, takes: takes.clone() };
        let ch = Channel::with_source(Some(Box::new(src))).unwrap();
        Rig { ch, takes, wr: wr_raw, public: public_raw, id, plain }
    }

    fn feed(&self, bytes: &[u8]) {
        // SAFETY: writes from a live slice to our pipe.
        assert_eq!(unsafe { libc::write(self.wr, bytes.as_ptr().cast(), bytes.len()) }, bytes.len() as isize);
    }

    /// The arg of the next event (acked at once); fails the test if `pop` has
    /// not returned within 5 s.
    fn pop_arg(&self) -> std::result::Result<u64, Errno> {
        let (tx, rx) = std::sync::mpsc::channel();
        let ch = self.ch.clone();
        std::thread::spawn(move || {
            let _ = tx.send(ch.next(Box::new_uninit()).map(|e| e as usize));
        });
        let ev = rx.recv_timeout(Duration::from_secs(5)).expect("pop returned")? as *mut rdma_cm_event;
        // SAFETY: the event just delivered; USER events carry `arg`.
        let arg = unsafe { (*ev).param.arg };
        EventBox::ack(ev).unwrap();
        Ok(arg)
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        IdBox::destroy(self.id).unwrap();
        ChannelBox::destroy(self.plain).unwrap();
    }
}

#[test]
fn queued_events_come_before_the_source_and_again_is_read_past() {
    let r = Rig::new();
    r.feed(b"a7");
    let owner = IdBox::lookup(r.id).unwrap();
    r.ch.push(owner.pending(RDMA_CM_EVENT_USER, 0, Param::arg(1)));
    assert_eq!(r.pop_arg(), Ok(1), "the queue first");
    assert_eq!(r.pop_arg(), Ok(b'7' as u64), "then the source, past the event that went elsewhere");
}

#[test]
fn non_blocking_follows_the_public_fd() {
    let r = Rig::new();
    set_nonblock(r.public);
    assert_eq!(r.pop_arg(), Err(Errno::EAGAIN), "empty source, nothing queued");
    r.feed(b"x");
    assert_eq!(r.pop_arg(), Ok(b'x' as u64), "a source that was empty last time is read before EAGAIN");
    assert_eq!(r.pop_arg(), Err(Errno::EAGAIN));
}

#[test]
fn blocking_pop_wakes_for_the_source_and_for_the_queue() {
    let r = Rig::new();
    let wr = r.wr;
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        // SAFETY: one byte from a live buffer to the pipe (alive until the Rig drops, after join).
        unsafe { libc::write(wr, b"s".as_ptr().cast(), 1) };
    });
    assert_eq!(r.pop_arg(), Ok(b's' as u64));
    // Spinning would read many times; reading before the wait (the source was
    // empty when the channel was made) twice.
    assert_eq!(r.takes.load(Ordering::Relaxed), 1, "it slept until the source had the byte, then read once");
    t.join().unwrap();

    let ch = r.ch.clone();
    let owner = IdBox::lookup(r.id).unwrap();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        ch.push(owner.pending(RDMA_CM_EVENT_USER, 0, Param::arg(2)));
    });
    assert_eq!(r.pop_arg(), Ok(2), "a queued event wakes a pop waiting on the source");
    t.join().unwrap();
}

#[test]
fn the_public_fd_reports_the_source_and_the_queue() {
    let r = Rig::new();
    assert!(!readable(r.public));
    r.feed(b"q");
    assert!(readable(r.public), "a source event");
    assert_eq!(r.pop_arg(), Ok(b'q' as u64));
    assert!(!readable(r.public));
    let owner = IdBox::lookup(r.id).unwrap();
    r.ch.push(owner.pending(RDMA_CM_EVENT_USER, 0, Param::arg(3)));
    assert!(readable(r.public), "the first queued event (its flag made on the spot)");
    assert_eq!(r.pop_arg(), Ok(3));
    assert!(!readable(r.public), "the flag is lowered with the queue empty");
    r.ch.push(owner.pending(RDMA_CM_EVENT_USER, 0, Param::arg(4)));
    assert!(readable(r.public), "and raised again");
    assert_eq!(r.pop_arg(), Ok(4));
}
