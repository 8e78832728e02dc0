//! A kernel-CM event channel's own rdma_cm file, read in the caller's thread
//! by rdma_get_cm_event (no hand-off between threads, as upstream). The fd the
//! application gets is an epoll set of that file and, once the library
//! queued an event itself (USER, addrinfo), the channel's flag, so poll()
//! sees both.

use super::events;
use super::ucma::Ucma;
use crate::cm::channel::{Source, Take};
use crate::cm::Channel;
use crate::sys::{cerr, Errno, Result};
use std::any::Any;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub struct KernelSource {
    pub file: Arc<Ucma>,
    epoll: OwnedFd,
    empty: AtomicBool,
}

impl KernelSource {
    /// Opens a new rdma_cm file for a channel.
    pub fn open() -> Result<KernelSource> {
        let file = Arc::new(Ucma::open()?);
        // SAFETY: plain syscall; the result is checked.
        let ep = cerr(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: ep was just returned by epoll_create1 and is owned by nobody else.
        let epoll = unsafe { OwnedFd::from_raw_fd(ep) };
        let s = KernelSource { file, epoll, empty: AtomicBool::new(true) };
        s.add(s.file.raw())?;
        Ok(s)
    }

    fn add(&self, fd: i32) -> Result<()> {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: fd as u64 };
        // SAFETY: fd is open; `ev` is a live epoll_event.
        cerr(unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) }).map(|_| ())
    }
}

impl Source for KernelSource {
    fn public_fd(&self) -> i32 {
        self.epoll.as_raw_fd()
    }

    fn watch(&self, flag: i32) -> Result<()> {
        self.add(flag)
    }

    fn take(&self, ch: &Arc<Channel>) -> Result<Take> {
        let r = self.file.get_event();
        self.empty.store(r.is_err(), Ordering::Relaxed);
        match r {
            Ok(ev) => Ok(events::dispatch(&self.file, &ev, ch)),
            Err(Errno::EAGAIN) => Ok(Take::Empty),
            Err(e) if e.0 == libc::EINTR => Ok(Take::Again),
            Err(e) => Err(e),
        }
    }

    fn was_empty(&self) -> bool {
        self.empty.load(Ordering::Relaxed)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl KernelSource {
    /// Makes the epoll set look at the file again. MIGRATE_ID moves events
    /// into a file without waking its pollers, so the set (which learns of
    /// readiness only through wake-ups) would not report them.
    fn rearm(&self) {
        let fd = self.file.raw();
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: fd as u64 };
        // SAFETY: the file is in our epoll set; `ev` is a live epoll_event.
        unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_MOD, fd, &mut ev) };
    }
}

/// After ids moved into `ch`'s file: its fd reports their events.
pub fn rearm(ch: &Channel) {
    if let Some(s) = ch.source().and_then(|s| s.as_any().downcast_ref::<KernelSource>()) {
        s.rearm();
    }
}

/// The rdma_cm file of a channel (None for a channel without one).
pub fn file_of(ch: &Channel) -> Option<Arc<Ucma>> {
    ch.source()?.as_any().downcast_ref::<KernelSource>().map(|s| s.file.clone())
}
