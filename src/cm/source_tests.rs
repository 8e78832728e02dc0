//! `Channel::next` on a channel with a source (what the kernel CM's channels
//! are), driven by a model of the kernel's rdma_cm file: a list of tokens
//! (source events and doorbells) and an eventfd counting them, which is the
//! public fd; reading it blocks unless it is non-blocking.

use super::channel::{Source, Take};
use super::event::Param;
use super::tests::{readable, set_nonblock};
use super::*;
use crate::sys::{cerr, Errno, Result};
use rdma_abi::cma::*;
use std::any::Any;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Token {
    /// An event for the channel being read, with this arg.
    Event(u8),
    /// An event that went elsewhere.
    Away,
    Bell(u64),
}

struct ModelSource {
    /// Counts the tokens (EFD_SEMAPHORE: one read takes one).
    public: OwnedFd,
    tokens: Mutex<VecDeque<Token>>,
    owner: Arc<IdCore>,
    takes: Arc<AtomicUsize>,
    next_bell: AtomicU64,
}

impl ModelSource {
    fn add(&self, t: Token) {
        self.tokens.lock().unwrap().push_back(t);
        let one = 1u64;
        // SAFETY: 8 bytes from a live u64 to our eventfd.
        assert_eq!(unsafe { libc::write(self.public.as_raw_fd(), (&one as *const u64).cast(), 8) }, 8);
    }

    /// Takes one from the counter (the caller knows it is positive).
    fn count_down(&self) {
        let mut v = 0u64;
        // SAFETY: 8 bytes into a live u64 from our eventfd.
        assert_eq!(unsafe { libc::read(self.public.as_raw_fd(), (&mut v as *mut u64).cast(), 8) }, 8);
    }
}

impl Source for ModelSource {
    fn public_fd(&self) -> i32 {
        self.public.as_raw_fd()
    }
    fn take(&self, _ch: &Arc<Channel>, _slot: &mut Option<Slot>) -> Result<Take> {
        self.takes.fetch_add(1, Ordering::Relaxed);
        loop {
            {
                let mut q = self.tokens.lock().unwrap();
                if let Some(t) = q.pop_front() {
                    self.count_down();
                    return Ok(match t {
                        Token::Event(b) => Take::Here(self.owner.pending(RDMA_CM_EVENT_USER, 0, Param::arg(b as u64)).handed_out()),
                        Token::Away => Take::Again,
                        Token::Bell(k) => Take::Bell(k),
                    });
                }
            }
            if crate::sys::nonblocking(self.public_fd()) {
                return Ok(Take::Empty);
            }
            crate::sys::wait_readable(self.public_fd())?;
        }
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn ring(&self) -> Option<u64> {
        let k = self.next_bell.fetch_add(1, Ordering::Relaxed);
        self.add(Token::Bell(k));
        Some(k)
    }
    fn unring(&self, bell: u64) {
        let mut q = self.tokens.lock().unwrap();
        if let Some(i) = q.iter().position(|&t| t == Token::Bell(bell)) {
            q.remove(i);
            self.count_down();
        }
    }
}

struct Rig {
    ch: Arc<Channel>,
    src: *const ModelSource,
    /// Reads of the source so far.
    takes: Arc<AtomicUsize>,
    public: i32,
    id: *mut rdma_cm_id,
    plain: *mut rdma_event_channel,
}

impl Rig {
    fn new() -> Rig {
        let plain = ChannelBox::create().unwrap();
        let id = IdBox::create(plain, std::ptr::null_mut(), RDMA_PS_TCP, None).unwrap();
        let owner = IdBox::lookup(id).unwrap();
        // SAFETY: plain syscall; checked.
        let fd = cerr(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) }).unwrap();
        // SAFETY: a fresh fd owned by nobody else.
        let public = unsafe { OwnedFd::from_raw_fd(fd) };
        let takes = Arc::new(AtomicUsize::new(0));
        let src = Box::new(ModelSource {
            public,
            tokens: Mutex::new(VecDeque::new()),
            owner,
            takes: takes.clone(),
            next_bell: AtomicU64::new(1),
        });
        let srcp: *const ModelSource = &*src;
        let ch = Channel::with_source(Some(src)).unwrap();
        Rig { ch, src: srcp, takes, public: fd, id, plain }
    }

    fn src(&self) -> &ModelSource {
        // SAFETY: owned by `ch`, which lives as long as the rig.
        unsafe { &*self.src }
    }

    fn feed(&self, tokens: &[Token]) {
        for &t in tokens {
            self.src().add(t);
        }
    }

    fn push(&self, arg: u64) {
        let owner = IdBox::lookup(self.id).unwrap();
        self.ch.push(owner.pending(RDMA_CM_EVENT_USER, 0, Param::arg(arg)));
    }

    /// The arg of the next event (acked at once); fails the test if `next` has
    /// not returned within 5 s.
    fn next_arg(&self) -> std::result::Result<u64, Errno> {
        let (tx, rx) = std::sync::mpsc::channel();
        let ch = self.ch.clone();
        std::thread::spawn(move || {
            let _ = tx.send(ch.next(Slot::new()).map(|e| e as usize));
        });
        let ev = rx.recv_timeout(Duration::from_secs(5)).expect("next returned")? as *mut rdma_cm_event;
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
    r.feed(&[Token::Away, Token::Event(7)]);
    r.push(1);
    assert_eq!(r.next_arg(), Ok(1), "the queue first");
    assert_eq!(r.next_arg(), Ok(7), "then the source, past the event that went elsewhere");
}

#[test]
fn non_blocking_follows_the_public_fd() {
    let r = Rig::new();
    set_nonblock(r.public);
    assert_eq!(r.next_arg(), Err(Errno::EAGAIN), "empty source, nothing queued");
    r.feed(&[Token::Event(b'x')]);
    assert_eq!(r.next_arg(), Ok(b'x' as u64));
    assert_eq!(r.next_arg(), Err(Errno::EAGAIN));
    r.push(5);
    assert_eq!(r.next_arg(), Ok(5), "a queued event before EAGAIN");
    assert_eq!(r.next_arg(), Err(Errno::EAGAIN), "its doorbell went with it");
}

#[test]
fn blocking_next_waits_in_the_source_and_a_queued_event_rings_it() {
    let r = Rig::new();
    let src = r.src as usize;
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        // SAFETY: the rig (and its source) lives until after join.
        unsafe { &*(src as *const ModelSource) }.add(Token::Event(b's'));
    });
    assert_eq!(r.next_arg(), Ok(b's' as u64));
    assert_eq!(r.takes.load(Ordering::Relaxed), 1, "one read of the source, which waited");
    t.join().unwrap();

    let ch = r.ch.clone();
    let owner = IdBox::lookup(r.id).unwrap();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        ch.push(owner.pending(RDMA_CM_EVENT_USER, 0, Param::arg(2)));
    });
    assert_eq!(r.next_arg(), Ok(2), "a queued event's doorbell wakes a reader waiting in the source");
    t.join().unwrap();
    assert!(!readable(r.public), "and nothing is left");
}

#[test]
fn the_public_fd_is_readable_exactly_while_events_wait() {
    let r = Rig::new();
    assert!(!readable(r.public));
    r.feed(&[Token::Event(b'q')]);
    assert!(readable(r.public), "a source event");
    assert_eq!(r.next_arg(), Ok(b'q' as u64));
    assert!(!readable(r.public));
    r.push(3);
    assert!(readable(r.public), "a queued event (its doorbell)");
    assert_eq!(r.next_arg(), Ok(3));
    assert!(!readable(r.public), "its doorbell went when it was taken");
    r.push(4);
    r.push(5);
    assert_eq!(r.next_arg(), Ok(4));
    assert!(readable(r.public), "the second one's doorbell stays");
    assert_eq!(r.next_arg(), Ok(5));
    assert!(!readable(r.public));
}

#[test]
fn taking_queued_events_away_takes_their_doorbells() {
    let r = Rig::new();
    r.push(8);
    r.push(9);
    // rdma_destroy_id / rdma_migrate_id take an id's unread events.
    let owner = IdBox::lookup(r.id).unwrap();
    let gone = r.ch.take_where(|p| Arc::ptr_eq(&p.owner, &owner));
    assert_eq!(gone.len(), 2);
    assert!(!readable(r.public), "taken events take their doorbells along");
    drop(gone);
    r.push(10);
    r.feed(&[Token::Event(11)]);
    assert_eq!(r.next_arg(), Ok(10));
    assert_eq!(r.next_arg(), Ok(11));
}
