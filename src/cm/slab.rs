//! Where events live between `rdma_get_cm_event` and `rdma_ack_cm_event`:
//! cells of a few chunks the library never frees, each marked live while the
//! application holds it. An event pointer coming back from C is checked by
//! address (inside a chunk, on a cell's start) and by its live mark before it
//! is read, as the handle registry checks ids; a cell costs no malloc/free
//! and no hash-table entry per event (under the VM benchmark's TCG the cost
//! of a call follows its instructions, and every id step has its events).

use super::event::EventBox;
use super::id::IdCore;
use super::registry::lock;
use std::mem::MaybeUninit;
use std::sync::{Arc, Mutex};

/// Cells of the first chunk; each further chunk doubles the total, so a
/// program holding many events unacked still has few chunks to search.
const FIRST: usize = 64;

struct Chunk {
    cells: Box<[MaybeUninit<EventBox>]>,
    live: Box<[bool]>,
}

impl Chunk {
    fn base(&self) -> usize {
        self.cells.as_ptr() as usize
    }
}

struct Slab {
    chunks: Vec<Chunk>,
    /// Free cells as (chunk, index).
    free: Vec<(u32, u32)>,
}

// SAFETY: the cells are plain memory owned by the slab; who may touch one is
// decided under the slab's lock (free, taken as a `Slot`, or live).
unsafe impl Send for Slab {}

static SLAB: Mutex<Slab> = Mutex::new(Slab { chunks: Vec::new(), free: Vec::new() });

impl Slab {
    /// Adds a chunk: its first cell is the caller's, the others are free.
    fn grow(&mut self) -> (u32, u32) {
        let n = FIRST << self.chunks.len();
        let c = self.chunks.len() as u32;
        self.chunks.push(Chunk { cells: Box::new_uninit_slice(n), live: vec![false; n].into_boxed_slice() });
        // Room for every cell, so giving one back never reallocates: the first
        // ack gave back the 64th and grew the list (realloc, run for the first
        // time in the process: about 0.1 ms under the VM benchmark's TCG).
        let cells: usize = self.chunks.iter().map(|c| c.cells.len()).sum();
        self.free.reserve_exact(cells - self.free.len());
        self.free.extend((1..n as u32).rev().map(|i| (c, i)));
        (c, 0)
    }

    fn ptr(&mut self, (c, i): (u32, u32)) -> *mut MaybeUninit<EventBox> {
        &mut self.chunks[c as usize].cells[i as usize]
    }

    /// The (chunk, index) of the cell starting at `addr`, if one does.
    fn cell_at(&self, addr: usize) -> Option<(u32, u32)> {
        let size = std::mem::size_of::<EventBox>();
        self.chunks.iter().enumerate().find_map(|(c, ch)| {
            let off = addr.wrapping_sub(ch.base());
            (off < ch.cells.len() * size && off % size == 0).then_some((c as u32, (off / size) as u32))
        })
    }

    /// The live cell at `addr`.
    fn live_at(&self, addr: usize) -> Option<(u32, u32)> {
        self.cell_at(addr).filter(|&(c, i)| self.chunks[c as usize].live[i as usize])
    }
}

/// A cell taken for one event: filled, then made live (`publish`), or given
/// back unused when dropped.
pub struct Slot {
    at: (u32, u32),
    ptr: *mut MaybeUninit<EventBox>,
}

// SAFETY: the cell is this Slot's alone until it is published or dropped.
unsafe impl Send for Slot {}

impl Default for Slot {
    fn default() -> Slot {
        Slot::new()
    }
}

impl Slot {
    pub fn new() -> Slot {
        let mut s = lock(&SLAB);
        let at = match s.free.pop() {
            Some(at) => at,
            None => s.grow(),
        };
        let ptr = s.ptr(at);
        Slot { at, ptr }
    }

    pub fn as_mut_ptr(&mut self) -> *mut EventBox {
        self.ptr.cast()
    }

    /// Marks the (filled) cell live: the application's event from now on,
    /// found by `with_live` and given back by `take_live`.
    ///
    /// # Safety
    /// Every field of the cell's `EventBox` has been written.
    pub unsafe fn publish(self) -> *mut EventBox {
        let this = std::mem::ManuallyDrop::new(self);
        lock(&SLAB).chunks[this.at.0 as usize].live[this.at.1 as usize] = true;
        this.ptr.cast()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        lock(&SLAB).free.push(self.at);
    }
}

/// Runs `f` on the live event at `addr` (None: no live event there). The
/// slab's lock is held meanwhile, so `take_live` (and the reuse after it)
/// waits.
pub fn with_live<R>(addr: *const EventBox, f: impl FnOnce(&EventBox) -> R) -> Option<R> {
    let s = lock(&SLAB);
    let at = s.live_at(addr as usize)?;
    // SAFETY: a live cell holds an initialised EventBox (`publish`), not
    // changed while the lock is held.
    Some(f(unsafe { s.chunks[at.0 as usize].cells[at.1 as usize].assume_init_ref() }))
}

/// Ends the live event at `addr`, giving its owner back (the rest of an
/// `EventBox` is plain data); the cell is free again. None: no live event
/// there (garbage, or acked already).
pub fn take_live(addr: *mut EventBox) -> Option<Arc<IdCore>> {
    let mut s = lock(&SLAB);
    let at = s.live_at(addr as usize)?;
    s.chunks[at.0 as usize].live[at.1 as usize] = false;
    let e = s.ptr(at).cast::<EventBox>();
    // SAFETY: the live cell held an initialised EventBox; its one owned field
    // is moved out once, here, as the mark is cleared under the same lock;
    // then the cell is free.
    let owner = unsafe { std::ptr::addr_of!((*e).owner).read() };
    s.free.push(at);
    Some(owner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_live_cell_start_is_an_event() {
        let mut slot = Slot::new();
        let p = slot.as_mut_ptr();
        assert!(with_live(p, |_| ()).is_none(), "a taken cell is not live before publish");
        drop(slot);
        assert!(take_live(p).is_none());
        let garbage = Box::into_raw(Box::new(0u64)) as *mut EventBox;
        assert!(with_live(garbage, |_| ()).is_none());
        assert!(take_live(garbage).is_none());
        // SAFETY: allocated above, freed once.
        drop(unsafe { Box::from_raw(garbage as *mut u64) });
        let inside = (p as usize + 8) as *mut EventBox;
        assert!(with_live(inside, |_| ()).is_none(), "a pointer into a cell is not its start");
    }

    #[test]
    fn cells_are_reused_and_chunks_grow() {
        let slots: Vec<Slot> = (0..FIRST * 3).map(|_| Slot::new()).collect();
        let mut addrs: Vec<usize> = slots.iter().map(|s| s.ptr as usize).collect();
        addrs.sort();
        addrs.dedup();
        assert_eq!(addrs.len(), FIRST * 3, "every taken cell is distinct");
        let chunks = {
            let s = lock(&SLAB);
            let cells: usize = s.chunks.iter().map(|c| c.cells.len()).sum();
            assert!(s.free.capacity() >= cells, "room to give back all {cells} cells without growing");
            s.chunks.len()
        };
        assert!(chunks >= 2, "{} cells took more than the first chunk", FIRST * 3);
        drop(slots);
        // Counted in chunks, not addresses: other tests take and give cells meanwhile.
        let again: Vec<Slot> = (0..FIRST * 3).map(|_| Slot::new()).collect();
        assert_eq!(lock(&SLAB).chunks.len(), chunks, "freed cells are taken again: no new chunk");
        drop(again);
    }
}
