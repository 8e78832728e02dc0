//! A kernel-CM event channel's own rdma_cm file, read in the caller's thread
//! by rdma_get_cm_event (no hand-off between threads, as upstream). The file
//! is the fd the application gets, as upstream's is: GET_EVENT blocks in the
//! kernel unless the application made it non-blocking, and a signal handler
//! ends the wait as signal(7) says for any slow device. Events the library
//! queues itself ring a doorbell on the file (`bell`).

use super::abi::rdma_ucm_event_resp;
use super::events;
use super::kid;
use super::ucma::Ucma;
use crate::cm::channel::{Source, Take};
use crate::cm::{Channel, Slot};
use crate::sys::{Errno, Result};
use std::any::Any;
use std::sync::{Arc, Mutex};

pub struct KernelSource {
    pub file: Arc<Ucma>,
    /// Doorbells rung and not taken back: (uid, kernel id).
    bells: Mutex<Vec<(u64, u32)>>,
}

impl KernelSource {
    /// Opens a new rdma_cm file for a channel.
    pub fn open() -> Result<KernelSource> {
        Ok(KernelSource { file: Arc::new(Ucma::open()?), bells: Mutex::new(Vec::new()) })
    }

    /// A channel's kernel source (None for a channel without one).
    fn of(ch: &Channel) -> Option<&KernelSource> {
        ch.source()?.as_any().downcast_ref::<KernelSource>()
    }
}

impl Source for KernelSource {
    fn public_fd(&self) -> i32 {
        self.file.raw()
    }

    fn take(&self, ch: &Arc<Channel>, slot: &mut Option<Slot>) -> Result<Take> {
        let mut ev = rdma_ucm_event_resp::default();
        match self.file.get_event(&mut ev) {
            Ok(()) if kid::is_bell(ev.uid) => Ok(Take::Bell(ev.uid)),
            Ok(()) => Ok(events::dispatch(&self.file, &ev, ch, slot)),
            Err(Errno::EAGAIN) => Ok(Take::Empty),
            Err(e) => Err(e),
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn ring(&self) -> Option<u64> {
        let key = kid::bell_key();
        let r = super::bell::ring(&self.file, key);
        crate::trace::emit(crate::trace::start(), || match &r {
            Ok(h) => format!("  doorbell {key:#x}: kernel id {h}"),
            Err(e) => format!("  doorbell {key:#x}: none (errno {}); the queued event waits for the next rdma_get_cm_event", e.0),
        });
        let h = r.ok()?;
        crate::cm::registry::lock(&self.bells).push((key, h));
        Some(key)
    }

    fn unring(&self, bell: u64) {
        let h = {
            let mut b = crate::cm::registry::lock(&self.bells);
            let Some(i) = b.iter().position(|&(k, _)| k == bell) else { return };
            b.swap_remove(i).1
        };
        // Its event goes with it if nobody read it yet.
        let _ = self.file.destroy_id(h);
    }

    fn settle(&self) {
        let mut p = libc::pollfd { fd: self.file.raw(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one live pollfd; bounded wait (the doorbell's event comes at once).
        unsafe { libc::poll(&mut p, 1, 1000) };
    }
}

/// MIGRATE_ID: the kernel id `h` and its unread events move from the file
/// `from` into `to`'s file, which is returned (a poll of `to`'s fd then sees
/// them; one already asleep is not woken, as with upstream's library).
pub fn migrate_into(to: &Channel, h: u32, from: &Ucma) -> Result<Arc<Ucma>> {
    let s = KernelSource::of(to).ok_or(Errno::ENODEV)?;
    s.file.migrate_id(h, from.raw())?;
    Ok(s.file.clone())
}

/// The rdma_cm file of a channel (None for a channel without one).
pub fn file_of(ch: &Channel) -> Option<Arc<Ucma>> {
    KernelSource::of(ch).map(|s| s.file.clone())
}
