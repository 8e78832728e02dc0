//! Event channels: a FIFO of pending events and an fd that `poll()` reports
//! readable while the FIFO is not empty. A channel may also have a `Source`
//! (the kernel CM's rdma_cm file): then `pop` reads the source itself in the
//! caller's thread, as upstream's rdma_get_cm_event does, and the fd the
//! application sees reports both.

use super::event::{EventBox, Pending, Slot};
use super::registry::{self, lock, Kind};
use crate::sys::{Epoll, Errno, Flag, Result};
use rdma_abi::cma::{rdma_cm_event, rdma_event_channel};
use std::any::Any;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// What reading a channel's source gave.
pub enum Take {
    /// An event for the channel being read.
    Here(Pending),
    /// An event for the channel being read, delivered into the reader's slot.
    Delivered(*mut rdma_cm_event),
    /// Something that went elsewhere (another channel's queue, or dropped): read again.
    Again,
    /// Nothing queued.
    Empty,
}

/// Events that come from outside the library's queues.
pub trait Source: Send + Sync {
    /// The fd the application is given: an epoll set of the source, and of the
    /// queue flag once `watch` added it, so it is readable while either has an
    /// event.
    fn public(&self) -> &Epoll;
    /// One event, without blocking. A `Here` or `Delivered` event is handed
    /// out already (`Pending::handed_out`, under the lock that stops its
    /// id's events); `Delivered` filled `slot` (or an allocation of its own
    /// when `slot` is None).
    fn take(&self, ch: &Arc<Channel>, slot: &mut Option<Slot>) -> Result<Take>;
    fn as_any(&self) -> &dyn Any;

    fn public_fd(&self) -> i32 {
        self.public().raw()
    }
    /// From now on the public fd also reports `flag` (the channel's queue).
    fn watch(&self, flag: i32) -> Result<()> {
        self.public().ctl(libc::EPOLL_CTL_ADD, flag, 0)
    }
}

/// An event `get` found.
enum Got {
    Queued(Pending),
    Delivered(*mut rdma_cm_event),
}

pub struct Channel {
    /// Raised while the queue holds events. A channel without a source is
    /// this fd; a channel with one makes it for its first queued event (most
    /// kernel channels never queue one: one fd less each) and has the source
    /// watch it.
    flag: OnceLock<Flag>,
    source: Option<Box<dyn Source>>,
    queue: Mutex<VecDeque<Pending>>,
    /// The queue's length, written under its lock: `pop` looks here before
    /// taking the lock (nearly every kernel channel's queue stays empty).
    queued: AtomicUsize,
    /// The last `take` of the source found nothing.
    source_empty: AtomicBool,
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
        let flag = OnceLock::new();
        if source.is_none() {
            let _ = flag.set(Flag::public()?);
        }
        Ok(Arc::new(Channel {
            flag,
            source,
            queue: Mutex::new(VecDeque::new()),
            queued: AtomicUsize::new(0),
            source_empty: AtomicBool::new(true),
        }))
    }

    pub fn fd(&self) -> i32 {
        match &self.source {
            Some(s) => s.public_fd(),
            None => self.flag.get().map_or(-1, Flag::raw),
        }
    }

    pub fn source(&self) -> Option<&dyn Source> {
        self.source.as_deref()
    }

    pub fn push(&self, p: Pending) {
        let mut q = lock(&self.queue);
        if q.is_empty() {
            self.raise();
        }
        q.push_back(p);
        self.queued.store(q.len(), Ordering::Release);
    }

    /// The next event, delivered into `slot` (the application's event);
    /// blocks unless the application made the fd non-blocking. Every wait is
    /// a poll() of the fd the application has, as its own would be: readable
    /// while the queue (or the source) has an event. A signal handler ends
    /// it with EINTR as upstream's blocking write would (`sys::eintr_ends_call`).
    pub fn next(self: &Arc<Self>, slot: Slot) -> Result<*mut rdma_cm_event> {
        let mut slot = Some(slot);
        match self.get(&mut slot)? {
            Got::Queued(p) => Ok(EventBox::deliver_in(slot.take().unwrap_or_else(Box::new_uninit), p)),
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
        let fd = self.fd();
        // A source that was empty last time is likely empty now: skip the
        // read that would fail and go straight to the wait (one syscall less).
        let mut tried_empty = self.source_empty.load(Ordering::Relaxed);
        loop {
            if let Some(p) = self.try_pop() {
                return Ok(Got::Queued(p));
            }
            match &self.source {
                // Read the source when it may have something, or when the
                // caller does not wait anyway (a non-blocking fd).
                Some(src) if !tried_empty || crate::sys::nonblocking(fd) => {
                    let t = src.take(self, slot)?;
                    self.source_empty.store(matches!(t, Take::Empty), Ordering::Relaxed);
                    match t {
                        Take::Here(p) => return Ok(Got::Queued(p)),
                        Take::Delivered(e) => return Ok(Got::Delivered(e)),
                        Take::Again => continue,
                        Take::Empty if tried_empty => return Err(Errno::EAGAIN),
                        Take::Empty => {
                            tried_empty = true;
                            continue;
                        }
                    }
                }
                Some(_) => {}
                None if crate::sys::nonblocking(fd) => return Err(Errno::EAGAIN),
                None => {}
            }
            crate::sys::wait_readable(fd)?;
            tried_empty = false;
        }
    }

    /// Raises the queue flag, making it first if this is the first queued
    /// event of a channel with a source (called under the queue lock, so it
    /// is made once). If that fails the event still waits in the queue for
    /// `pop`; only poll() misses it.
    fn raise(&self) {
        if let Some(f) = self.flag.get() {
            f.raise();
            return;
        }
        let Ok(f) = Flag::new() else { return };
        f.raise();
        if let Some(src) = &self.source {
            if src.watch(f.raw()).is_err() {
                return;
            }
        }
        let _ = self.flag.set(f);
    }

    fn lower(&self) {
        if let Some(f) = self.flag.get() {
            f.lower();
        }
    }

    fn try_pop(&self) -> Option<Pending> {
        if self.queued.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut q = lock(&self.queue);
        let p = q.pop_front()?.handed_out();
        self.queued.store(q.len(), Ordering::Release);
        if q.is_empty() {
            self.lower();
        }
        Some(p)
    }

    /// Takes out every queued event that `pred` selects (an id being destroyed
    /// or migrated loses its unread events, as with the kernel).
    pub fn take_where(&self, pred: impl Fn(&Pending) -> bool) -> Vec<Pending> {
        if self.queued.load(Ordering::Acquire) == 0 {
            return Vec::new(); // the usual case for rdma_destroy_id: no lock either
        }
        let mut q = lock(&self.queue);
        if q.is_empty() {
            return Vec::new(); // the usual case for rdma_destroy_id: no syscall
        }
        let mut out = Vec::new();
        let mut keep = VecDeque::with_capacity(q.len());
        for p in q.drain(..) {
            if pred(&p) {
                out.push(p);
            } else {
                keep.push_back(p);
            }
        }
        *q = keep;
        self.queued.store(q.len(), Ordering::Release);
        if q.is_empty() {
            self.lower();
        }
        out
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
