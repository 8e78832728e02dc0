//! Event channels: a FIFO of pending events and an fd that `poll()` reports
//! readable while the FIFO is not empty. A channel may also have a `Source`
//! (the kernel CM's rdma_cm file): then the fd the application sees is the
//! source's own, as upstream's is, `next` reads the source in the caller's
//! thread (blocking in it unless the application made the fd non-blocking),
//! and each event the library queues itself rings the source's doorbell, an
//! event of the source's own that makes the fd readable and wakes a reader,
//! until the queued event is taken.

use super::event::{EventBox, Pending, Slot};
use super::registry::{self, lock, Kind};
use crate::sys::{Errno, Flag, Result};
use rdma_abi::cma::{rdma_cm_event, rdma_event_channel};
use std::any::Any;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// What reading a channel's source gave.
pub enum Take {
    /// An event for the channel being read.
    Here(Pending),
    /// An event for the channel being read, delivered into the reader's slot.
    Delivered(*mut rdma_cm_event),
    /// A doorbell (`Source::ring`) rang: the queued event it stands for, if
    /// nobody took it yet.
    Bell(u64),
    /// Something that went elsewhere (another channel's queue, or dropped): read again.
    Again,
    /// Nothing queued (the fd is non-blocking).
    Empty,
}

/// Events that come from outside the library's queues.
pub trait Source: Send + Sync {
    /// The fd the application is given (the source's own).
    fn public_fd(&self) -> i32;
    /// One event; blocks while there is none unless the public fd is
    /// non-blocking (then `Empty`). A `Here` or `Delivered` event is handed
    /// out already (`Pending::handed_out`, under the lock that stops its
    /// id's events); `Delivered` filled `slot` (or an allocation of its own
    /// when `slot` is None).
    fn take(&self, ch: &Arc<Channel>, slot: &mut Option<Slot>) -> Result<Take>;
    fn as_any(&self) -> &dyn Any;
    /// A doorbell for one queued event: an event of the source's own, so the
    /// public fd is readable and a blocked `take` returns (`Take::Bell`).
    /// None if the source could not make one (the queued event is still
    /// found by the next `next`).
    fn ring(&self) -> Option<u64>;
    /// The doorbell is not needed any more (its event unread or read).
    fn unring(&self, bell: u64);
    /// Waits (boundedly) until the public fd is readable after a `ring`, as
    /// a queued event is when the call that queued it returns.
    fn settle(&self) {}
}

/// An event `get` found.
enum Got {
    Queued(Pending),
    Delivered(*mut rdma_cm_event),
}

/// A queued event and the doorbell that stands for it (channels with a source).
struct Queued {
    p: Pending,
    bell: Option<u64>,
}

pub struct Channel {
    /// Raised while the queue holds events: the fd of a channel without a source.
    flag: Option<Flag>,
    source: Option<Box<dyn Source>>,
    queue: Mutex<VecDeque<Queued>>,
    /// The queue's length, written under its lock: `next` looks here before
    /// taking the lock (nearly every kernel channel's queue stays empty).
    queued: AtomicUsize,
}

/// What C sees: the public struct first, so `&public` is the handle.
#[repr(C)]
pub struct ChannelBox {
    pub public: rdma_event_channel,
    pub inner: Arc<Channel>,
}

impl Channel {
    pub fn new() -> Result<Arc<Channel>> {
        Self::with_source(crate::backend::channel_source())
    }

    /// A channel with `source`, if any.
    pub fn with_source(source: Option<Box<dyn Source>>) -> Result<Arc<Channel>> {
        let flag = if source.is_none() { Some(Flag::public()?) } else { None };
        Ok(Arc::new(Channel { flag, source, queue: Mutex::new(VecDeque::new()), queued: AtomicUsize::new(0) }))
    }

    pub fn fd(&self) -> i32 {
        match (&self.source, &self.flag) {
            (Some(s), _) => s.public_fd(),
            (None, Some(f)) => f.raw(),
            (None, None) => -1,
        }
    }

    pub fn source(&self) -> Option<&dyn Source> {
        self.source.as_deref()
    }

    /// Queues an event (a source's doorbell rung for it, or the flag raised).
    pub fn push(&self, p: Pending) {
        let mut q = lock(&self.queue);
        let bell = match &self.source {
            Some(s) => s.ring(),
            None => {
                if q.is_empty() {
                    self.raise();
                }
                None
            }
        };
        q.push_back(Queued { p, bell });
        self.queued.store(q.len(), Ordering::Release);
    }

    /// After `push` from a call the application made (rdma_write_cm_event,
    /// rdma_resolve_addrinfo): the fd is readable when it returns.
    pub fn settle(&self) {
        if let Some(s) = &self.source {
            s.settle();
        }
    }

    /// The next event, delivered into `slot` (the application's event). A
    /// channel with a source blocks in it (unless the application made the
    /// fd non-blocking), as upstream's blocks in its write(2): a signal
    /// handler ends the wait with EINTR as signal(7) says. One without waits
    /// in poll() of its fd, readable while the queue has an event, and a
    /// signal handler ends that wait with EINTR as `sys::eintr_ends_call` says.
    pub fn next(self: &Arc<Self>, slot: Slot) -> Result<*mut rdma_cm_event> {
        let mut slot = Some(slot);
        match self.get(&mut slot)? {
            Got::Queued(p) => Ok(EventBox::deliver_in(slot.take().unwrap_or_default(), p)),
            Got::Delivered(e) => Ok(e),
        }
    }

    /// `next` for the tests that hold an event between the queue and its
    /// delivery (a source that delivers itself is given no slot: it makes one).
    #[cfg(test)]
    pub fn pop(self: &Arc<Self>) -> Result<Pending> {
        match self.get(&mut None)? {
            Got::Queued(p) => Ok(p),
            Got::Delivered(_) => panic!("pop on a source that delivers"),
        }
    }

    fn get(self: &Arc<Self>, slot: &mut Option<Slot>) -> Result<Got> {
        loop {
            if let Some(p) = self.try_pop() {
                return Ok(Got::Queued(p));
            }
            let Some(src) = &self.source else {
                let fd = self.fd();
                if crate::sys::nonblocking(fd) {
                    return Err(Errno::EAGAIN);
                }
                crate::sys::wait_readable(fd)?;
                continue;
            };
            match src.take(self, slot)? {
                Take::Here(p) => return Ok(Got::Queued(p)),
                Take::Delivered(e) => return Ok(Got::Delivered(e)),
                Take::Bell(b) => {
                    let p = self.take_bell(b);
                    src.unring(b);
                    if let Some(p) = p {
                        return Ok(Got::Queued(p));
                    }
                }
                Take::Again => {}
                Take::Empty => return Err(Errno::EAGAIN),
            }
        }
    }

    /// Raises the queue flag (a channel without a source).
    fn raise(&self) {
        if let Some(f) = &self.flag {
            f.raise();
        }
    }

    fn lower(&self) {
        if let Some(f) = &self.flag {
            f.lower();
        }
    }

    /// The queue's first event (its doorbell given back).
    fn try_pop(&self) -> Option<Pending> {
        if self.queued.load(Ordering::Acquire) == 0 {
            return None;
        }
        let q = self.take_queued(|q| q.pop_front())?;
        Some(self.unring_taken(q).p.handed_out())
    }

    /// The queued event doorbell `bell` stands for, if still queued.
    fn take_bell(&self, bell: u64) -> Option<Pending> {
        let q = self.take_queued(|q| {
            let i = q.iter().position(|e| e.bell == Some(bell))?;
            q.remove(i)
        })?;
        debug_assert_eq!(q.bell, Some(bell));
        Some(q.p.handed_out())
    }

    /// Takes one entry out of the queue under its lock.
    fn take_queued(&self, f: impl FnOnce(&mut VecDeque<Queued>) -> Option<Queued>) -> Option<Queued> {
        let mut q = lock(&self.queue);
        let e = f(&mut q)?;
        self.queued.store(q.len(), Ordering::Release);
        if q.is_empty() {
            self.lower();
        }
        Some(e)
    }

    /// An entry just taken from the queue: its doorbell (if any) is rung off.
    fn unring_taken(&self, e: Queued) -> Queued {
        if let (Some(b), Some(src)) = (e.bell, &self.source) {
            src.unring(b);
        }
        Queued { p: e.p, bell: e.bell }
    }

    /// Takes out every queued event that `pred` selects (an id being destroyed
    /// or migrated loses its unread events, as with the kernel).
    pub fn take_where(&self, pred: impl Fn(&Pending) -> bool) -> Vec<Pending> {
        if self.queued.load(Ordering::Acquire) == 0 {
            return Vec::new(); // the usual case for rdma_destroy_id: no lock either
        }
        let taken: Vec<Queued> = {
            let mut q = lock(&self.queue);
            let mut out = Vec::new();
            let mut keep = VecDeque::with_capacity(q.len());
            for e in q.drain(..) {
                if pred(&e.p) {
                    out.push(e);
                } else {
                    keep.push_back(e);
                }
            }
            *q = keep;
            self.queued.store(q.len(), Ordering::Release);
            if q.is_empty() {
                self.lower();
            }
            out
        };
        taken.into_iter().map(|e| self.unring_taken(e).p).collect()
    }
}

impl ChannelBox {
    /// Allocates a channel and registers its public handle.
    pub fn create() -> Result<*mut rdma_event_channel> {
        let inner = Channel::new()?;
        let b = Box::new(ChannelBox { public: rdma_event_channel { fd: inner.fd() }, inner });
        let ptr = Box::into_raw(b);
        // `public` is the first field of a repr(C) struct: same address.
        let public = ptr as *mut rdma_event_channel;
        registry::register(public, Kind::Channel);
        Ok(public)
    }

    pub fn lookup(public: *const rdma_event_channel) -> Result<Arc<Channel>> {
        // SAFETY: a live channel handle points at a ChannelBox from `create`,
        // not freed while the registry's lock is held.
        registry::with_live(public, Kind::Channel, || unsafe { (*(public as *const ChannelBox)).inner.clone() })
            .ok_or(Errno::EINVAL)
    }

    /// Unregisters and frees a channel made by `create`.
    pub fn destroy(public: *mut rdma_event_channel) -> Result<()> {
        if !registry::unregister(public, Kind::Channel) {
            return Err(Errno::EINVAL);
        }
        // SAFETY: the registry held this pointer, so it came from Box::into_raw
        // in `create` and has not been freed (unregistering makes this the only free).
        drop(unsafe { Box::from_raw(public as *mut ChannelBox) });
        Ok(())
    }
}
