//! A kernel-CM event channel's own rdma_cm file, read in the caller's thread
//! by rdma_get_cm_event (no hand-off between threads, as upstream). The fd the
//! application gets is an epoll set of that file and, once the library
//! queued an event itself (USER, addrinfo), the channel's flag, so poll()
//! sees both.

use super::events;
use super::ucma::Ucma;
use crate::cm::channel::{Source, Take};
use crate::cm::{Channel, Slot};
use crate::sys::{Epoll, Errno, Result};
use std::any::Any;
use std::sync::Arc;

pub struct KernelSource {
    pub file: Arc<Ucma>,
    epoll: Epoll,
}

impl KernelSource {
    /// Opens a new rdma_cm file for a channel.
    pub fn open() -> Result<KernelSource> {
        let file = Arc::new(Ucma::open()?);
        let epoll = Epoll::new()?;
        epoll.ctl(libc::EPOLL_CTL_ADD, file.raw(), 0)?;
        Ok(KernelSource { file, epoll })
    }

    /// A channel's kernel source (None for a channel without one).
    fn of(ch: &Channel) -> Option<&KernelSource> {
        ch.source()?.as_any().downcast_ref::<KernelSource>()
    }
}

impl Source for KernelSource {
    fn public(&self) -> &Epoll {
        &self.epoll
    }

    fn take(&self, ch: &Arc<Channel>, slot: &mut Option<Slot>) -> Result<Take> {
        match self.file.get_event() {
            Ok(ev) => Ok(events::dispatch(&self.file, &ev, ch, slot)),
            // The file is non-blocking: GET_EVENT never sleeps (nor sees EINTR).
            Err(Errno::EAGAIN) => Ok(Take::Empty),
            Err(e) => Err(e),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// MIGRATE_ID: the kernel id `h` and its unread events move from the file
/// `from` into `to`'s file, which is returned. The kernel moves the events
/// without waking the new file's pollers, and an epoll set learns of
/// readiness only through wake-ups: re-adding the file (EPOLL_CTL_MOD) makes
/// the set look at it again, so `to`'s fd reports them.
pub fn migrate_into(to: &Channel, h: u32, from: &Ucma) -> Result<Arc<Ucma>> {
    let s = KernelSource::of(to).ok_or(Errno::ENODEV)?;
    s.file.migrate_id(h, from.raw())?;
    let _ = s.epoll.ctl(libc::EPOLL_CTL_MOD, s.file.raw(), 0);
    Ok(s.file.clone())
}

/// The rdma_cm file of a channel (None for a channel without one).
pub fn file_of(ch: &Channel) -> Option<Arc<Ucma>> {
    KernelSource::of(ch).map(|s| s.file.clone())
}
