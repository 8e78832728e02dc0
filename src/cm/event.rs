//! Events: `Pending` is an event waiting in a channel; `EventBox` is the
//! allocation handed to the application by `rdma_get_cm_event` until it acks it.

use super::id::IdCore;
use super::slab;
use crate::sys::{Errno, Result};
use rdma_abi::cma::{rdma_cm_event, rdma_cm_event_param, rdma_cm_id};
use std::sync::Arc;

/// The largest private data any transport carries (kernel ABI buffer).
pub const MAX_PRIVATE_DATA: usize = 256;

/// Raw event parameters. The union holds C pointers only as values to copy out.
#[derive(Clone, Copy)]
pub struct Param(pub rdma_cm_event_param);
// SAFETY: the pointers inside are never dereferenced by us; they are data for C.
unsafe impl Send for Param {}

impl Param {
    pub fn zeroed() -> Param {
        // SAFETY: all-zero is a valid value for this plain-data union.
        Param(unsafe { std::mem::zeroed() })
    }
    pub fn arg(arg: u64) -> Param {
        let mut p = Param::zeroed();
        p.0.arg = arg;
        p
    }
}

/// An id pointer that travels between threads as plain data.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IdPtr(pub *mut rdma_cm_id);
// SAFETY: only compared and handed to C; dereferenced under the id's own rules.
unsafe impl Send for IdPtr {}
unsafe impl Sync for IdPtr {}

pub struct Pending {
    /// The id the event is counted on (the listener for CONNECT_REQUEST).
    pub owner: Arc<IdCore>,
    /// `event->id`: the owner itself, or the new id of a CONNECT_REQUEST.
    pub id: IdPtr,
    pub listen_id: IdPtr,
    pub event: u32,
    pub status: i32,
    pub param: Param,
    /// Private data; copied behind the event and pointed to by the param.
    pub private: Vec<u8>,
    /// Set when `param` is the `ud` member (else `conn`), for the private data pointer.
    pub ud: bool,
}

impl Pending {
    /// Counts the event as handed out on its owner (`IdCore::reported`): on
    /// its way to a reader, which delivers it.
    pub fn handed_out(self) -> Pending {
        self.owner.handed_out();
        self
    }

    /// Drops an event nobody will read: a connect request's new id goes with it.
    pub fn discard(self) {
        if self.id != self.owner.ptr() {
            let _ = super::IdBox::destroy(self.id.0);
        }
    }
}

/// An event's fields besides its private data: what a source that delivers
/// straight into the application's event (`EventBox::write`) fills in, with
/// the private data borrowed from where it read the event.
pub struct Head {
    pub owner: Arc<IdCore>,
    pub id: IdPtr,
    pub listen_id: IdPtr,
    pub event: u32,
    pub status: i32,
    pub param: Param,
    pub ud: bool,
}

impl Head {
    /// The same event for a queue (its private data copied).
    pub fn pending(self, private: &[u8]) -> Pending {
        let Head { owner, id, listen_id, event, status, param, ud } = self;
        Pending { owner, id, listen_id, event, status, param, private: private.to_vec(), ud }
    }
}

/// The cell of an event not filled yet (taken before the wait).
pub use super::slab::Slot;

/// What C sees, the public struct first; private data lives inside the same
/// allocation so it stays valid until the ack.
#[repr(C)]
pub struct EventBox {
    pub public: rdma_cm_event,
    pub private: [u8; MAX_PRIVATE_DATA],
    pub owner: Arc<IdCore>,
}

impl EventBox {
    /// Turns a handed-out pending event into the allocation given to the
    /// application (acked with `ack`).
    pub fn deliver(p: Pending) -> *mut rdma_cm_event {
        Self::deliver_in(Slot::new(), p)
    }

    /// `deliver` into a cell taken before the wait (as upstream's
    /// rdma_get_cm_event allocates its event before it blocks).
    pub fn deliver_in(slot: Slot, p: Pending) -> *mut rdma_cm_event {
        let Pending { owner, id, listen_id, event, status, param, private, ud } = p;
        Self::write(slot, Head { owner, id, listen_id, event, status, param, ud }, &private)
    }

    /// Fills `slot` with a handed-out event and makes it live: the event the
    /// application gets.
    pub fn write(mut slot: Slot, h: Head, private: &[u8]) -> *mut rdma_cm_event {
        let e = slot.as_mut_ptr();
        // The length field is a u8: a longer payload from any backend is cut, not wrapped.
        let n = private.len().min(MAX_PRIVATE_DATA).min(u8::MAX as usize);
        // SAFETY: `e` is the slot's allocation; each field is written once
        // (in place: no copy of the whole box from the stack) before assume_init.
        let b = unsafe {
            let data = std::ptr::addr_of_mut!((*e).private) as *mut u8;
            data.write_bytes(0, MAX_PRIVATE_DATA);
            std::ptr::copy_nonoverlapping(private.as_ptr(), data, n);
            let mut param = h.param.0;
            if n > 0 {
                if h.ud {
                    param.ud.private_data = data.cast();
                    param.ud.private_data_len = n as u8;
                } else {
                    param.conn.private_data = data.cast();
                    param.conn.private_data_len = n as u8;
                }
            }
            std::ptr::addr_of_mut!((*e).public).write(rdma_cm_event {
                id: h.id.0,
                listen_id: h.listen_id.0,
                event: h.event,
                status: h.status,
                param,
            });
            std::ptr::addr_of_mut!((*e).owner).write(h.owner);
            slot.publish()
        };
        b as *mut rdma_cm_event
    }

    /// Gives back a delivered event's cell and counts it as acked on its owner.
    pub fn ack(ev: *mut rdma_cm_event) -> Result<()> {
        let owner = slab::take_live(ev as *mut EventBox).ok_or(Errno::EINVAL)?;
        owner.acked();
        Ok(())
    }

    /// Whether `ev` is a live event about `id` (not one the application acked
    /// already, nor a newer event about another id at the same address). A
    /// CONNECT_REQUEST kept by rdma_get_request's new id is about that id,
    /// owned by the listener.
    pub fn is_about(ev: *const rdma_cm_event, id: IdPtr) -> bool {
        slab::with_live(ev as *const EventBox, |e| e.public.id == id.0).unwrap_or(false)
    }
}

