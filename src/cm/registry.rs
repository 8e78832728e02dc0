//! The handle registry: every channel and id pointer the library hands out is
//! recorded here with its kind, so a pointer coming back from C is checked
//! before it is dereferenced. Garbage, stale or wrong-kind pointers then give
//! EINVAL instead of a crash. (Events are checked by the slab they live in,
//! `slab.rs`.)
//!
//! One set for all kinds, the kind as the value: the pointer is the key, and
//! the Arc a lookup hands out is read from the handle's own allocation.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Mutex, MutexGuard};

/// Hasher for the library's own keys (pointers it handed out, counters):
/// nobody can choose them, so SipHash's flooding resistance buys nothing and
/// costs on every call. A 64-bit finalizer (murmur3's fmix64) spreads the
/// zero low bits of aligned pointers over the whole word.
#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8)) ^ b as u64;
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = self.0.rotate_left(32) ^ v;
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

/// A HashMap keyed by the library's own numbers (see `KeyHasher`).
pub type KeyMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;

/// What a registered pointer points at.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// The values are the low bit of a table slot's second word (`PtrTable`).
    Channel = 0,
    Id = 1,
}

/// Every live handle. Not a std HashMap: every call of the library looks a
/// handle up, and under qemu's TCG (the VM benchmark) the cost of a call
/// follows the instructions it runs; this table's probe is a few of them.
/// In shards by address: an application's event thread and its other
/// threads look handles up all the time, and one lock for all of them makes
/// them wait for each other (under the VM benchmark's TCG a lock is held
/// for long and a futex wait is a context switch).
static HANDLES: [Mutex<PtrTable>; SHARDS] = [const { Mutex::new(PtrTable::new()) }; SHARDS];
const SHARDS: usize = 8;

fn handles(key: usize) -> MutexGuard<'static, PtrTable> {
    // Above the alignment bits of every handle (channels and ids are
    // 16-byte aligned allocations of a few hundred bytes).
    lock(&HANDLES[(key >> 6) % SHARDS])
}

/// A set of non-zero addresses with a kind each: open addressing with linear
/// probing and backward-shift deletion (no tombstones), at most half full.
/// A slot is `[address, hash << 1 | kind]` (address 0: empty): the hash is
/// kept so a removal's shifting does not mix every entry it passes again.
struct PtrTable {
    slots: Vec<[usize; 2]>,
    len: usize,
}

impl PtrTable {
    /// Slots of a shard's first allocation: 16 entries before the first
    /// growth, which rehashes them (cmtime's 100 ids fit without one). Not
    /// more: the eight shards' first tables are made together by a
    /// program's first ids, and under the VM benchmark's TCG each fresh page
    /// costs a fault of about 11 us (eight 2 KiB tables were four such
    /// faults in cmtime's create id step, where upstream's library
    /// allocates nothing but the ids).
    const FIRST: usize = 32;

    const fn new() -> PtrTable {
        PtrTable { slots: Vec::new(), len: 0 }
    }

    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    /// The address mixed (`inthash::mix`), kept in its slot.
    fn hash(key: usize) -> usize {
        common::inthash::mix(key as u64) as usize
    }

    /// Where an entry of hash `h` would sit if nothing collided.
    fn home(&self, h: usize) -> usize {
        h & self.mask()
    }

    /// The slot holding `key`, if any.
    fn find(&self, key: usize) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mut i = self.home(Self::hash(key));
        loop {
            match self.slots[i][0] {
                0 => return None,
                k if k == key => return Some(i),
                _ => i = (i + 1) & self.mask(),
            }
        }
    }

    fn kind_at(&self, i: usize) -> Kind {
        if self.slots[i][1] & 1 == 0 {
            Kind::Channel
        } else {
            Kind::Id
        }
    }

    fn get(&self, key: usize) -> Option<Kind> {
        self.find(key).map(|i| self.kind_at(i))
    }

    fn insert(&mut self, key: usize, kind: Kind) {
        debug_assert_ne!(key, 0);
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        self.place(key, Self::hash(key) << 1 | kind as usize);
    }

    /// Puts `key` with its slot word `meta` (hash and kind) in place.
    fn place(&mut self, key: usize, meta: usize) {
        let mut i = self.home(meta >> 1);
        loop {
            match self.slots[i][0] {
                0 => {
                    self.slots[i] = [key, meta];
                    self.len += 1;
                    return;
                }
                k if k == key => {
                    self.slots[i][1] = meta;
                    return;
                }
                _ => i = (i + 1) & self.mask(),
            }
        }
    }

    fn grow(&mut self) {
        let n = (self.slots.len() * 2).max(Self::FIRST);
        // Filled by stores, not `vec![]`'s zeroing allocation: calloc
        // clears with `rep stosb`, which valgrind and qemu's TCG (the VM
        // benchmark) run byte by byte, ~6x the instructions of this loop.
        let mut slots = Vec::with_capacity(n);
        slots.resize(n, [0; 2]);
        let old = std::mem::replace(&mut self.slots, slots);
        self.len = 0;
        for [k, meta] in old {
            if k != 0 {
                self.place(k, meta);
            }
        }
    }

    /// Removes `key` when it is there with `kind`; whether it was.
    fn remove(&mut self, key: usize, kind: Kind) -> bool {
        let Some(mut hole) = self.find(key) else { return false };
        if self.kind_at(hole) != kind {
            return false;
        }
        self.slots[hole][0] = 0;
        self.len -= 1;
        // Entries after the hole that probed past it move back into it.
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask();
            let [k, meta] = self.slots[j];
            if k == 0 {
                return true;
            }
            let home = self.home(meta >> 1);
            // Stays when its home lies cyclically in (hole, j].
            let stays = if hole <= j { hole < home && home <= j } else { hole < home || home <= j };
            if !stays {
                self.slots[hole] = [k, meta];
                self.slots[j][0] = 0;
                hole = j;
            }
        }
    }
}

/// Records a freshly allocated handle.
pub fn register<T>(ptr: *const T, kind: Kind) {
    handles(ptr as usize).insert(ptr as usize, kind);
}

/// Runs `f` while `ptr` is a live handle of `kind`. The registry's lock is
/// held meanwhile, so `unregister` (and the free after it) waits: `f` may
/// read the handle's allocation.
pub fn with_live<T, R>(ptr: *const T, kind: Kind, f: impl FnOnce() -> R) -> Option<R> {
    let h = handles(ptr as usize);
    if h.get(ptr as usize) != Some(kind) {
        return None;
    }
    let r = f();
    drop(h);
    Some(r)
}

/// Forgets a live handle of `kind`; true once per registration, so exactly
/// one caller goes on to free it.
pub fn unregister<T>(ptr: *const T, kind: Kind) -> bool {
    handles(ptr as usize).remove(ptr as usize, kind)
}

/// Numbers handed to the kernel (the `uid` it echoes in events): a slot index
/// in the low 32 bits and the slot's generation above, so the number of
/// something gone never finds what took its slot. A slab: less code than a
/// hash map on the calls that make and destroy ids.
pub struct Cookies<T> {
    slots: Vec<(u32, Option<T>)>,
    free: Vec<u32>,
}

impl<T> Default for Cookies<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Cookies<T> {
    pub const fn new() -> Self {
        Cookies { slots: Vec::new(), free: Vec::new() }
    }

    /// A new cookie (never 0: the kernel drops the events of an id whose uid
    /// is 0). Its slot finds nothing until `fill`; the caller fills it before
    /// the cookie reaches the kernel.
    pub fn reserve(&mut self) -> u64 {
        let i = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                if self.slots.capacity() == 0 {
                    // Room for a burst of ids up front (growing copies every slot).
                    self.slots.reserve(256);
                    self.free.reserve(256);
                }
                self.slots.push((0, None));
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[i];
        // 30 bits of generation: the top two bits of a cookie are the caller's.
        slot.0 = (slot.0.wrapping_add(1) & 0x3fff_ffff).max(1);
        ((slot.0 as u64) << 32) | i as u64
    }

    /// A new cookie for `v` (`reserve` and `fill` in one).
    pub fn insert(&mut self, v: T) -> u64 {
        let c = self.reserve();
        self.slots[c as u32 as usize].1 = Some(v);
        c
    }

    /// Stores `v` under a cookie `reserve` gave.
    pub fn fill(&mut self, cookie: u64, v: T) {
        if let Some(slot) = self.slots.get_mut(cookie as u32 as usize) {
            if slot.0 == (cookie >> 32) as u32 {
                slot.1 = Some(v);
            }
        }
    }

    pub fn get(&self, cookie: u64) -> Option<&T> {
        match self.slots.get(cookie as u32 as usize) {
            Some((gen, v)) if *gen == (cookie >> 32) as u32 => v.as_ref(),
            _ => None,
        }
    }

    pub fn remove(&mut self, cookie: u64) -> Option<T> {
        let i = cookie as u32;
        let v = match self.slots.get_mut(i as usize) {
            Some(slot) if slot.0 == (cookie >> 32) as u32 => slot.1.take(),
            _ => None,
        };
        if v.is_some() {
            self.free.push(i);
        }
        v
    }
}

/// Locks a std mutex, ignoring poison (state stays consistent: no code path
/// leaves it half-updated across a panic point). Not inlined: one copy per
/// type for every caller (under the VM benchmark's TCG each distinct
/// instruction costs a translation; a call costs little).
#[inline(never)]
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_do_not_mix_and_unregister_once() {
        let a = Box::into_raw(Box::new(1u64));
        register(a, Kind::Id);
        assert_eq!(with_live(a, Kind::Id, || 7), Some(7));
        assert_eq!(with_live(a, Kind::Channel, || 7), None);
        assert!(!unregister(a, Kind::Channel));
        assert_eq!(with_live(a, Kind::Id, || ()), Some(()), "a wrong-kind unregister keeps it");
        assert!(unregister(a, Kind::Id));
        assert!(!unregister(a, Kind::Id));
        assert_eq!(with_live(a, Kind::Id, || ()), None);
        // SAFETY: allocated above, unregistered, freed once.
        drop(unsafe { Box::from_raw(a) });
    }

    #[test]
    fn the_table_agrees_with_a_set_through_growth_and_shifting_removals() {
        let mut t = PtrTable::new();
        let mut model = std::collections::HashMap::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for round in 0..20_000u32 {
            // xorshift: a fixed sequence of aligned "addresses" from a small
            // range, so keys repeat and probes collide.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = (((x % 1500) + 1) * 16) as usize;
            let kind = if round % 3 == 0 { Kind::Channel } else { Kind::Id };
            if x % 5 < 3 {
                t.insert(key, kind);
                model.insert(key, kind);
            } else {
                let want = model.get(&key) == Some(&kind);
                assert_eq!(t.remove(key, kind), want, "remove {key:#x} {kind:?}");
                if want {
                    model.remove(&key);
                }
            }
            assert_eq!(t.len, model.len());
        }
        for k in (16..=1500 * 16).step_by(16) {
            assert_eq!(t.get(k), model.get(&k).copied(), "{k:#x}");
        }
        assert!(t.slots.len() >= 2 * t.len);
    }

    /// A cookie that stores itself.
    fn put(c: &mut Cookies<u64>) -> u64 {
        let k = c.reserve();
        assert_eq!(c.get(k), None, "a reserved slot finds nothing before fill");
        c.fill(k, k);
        k
    }

    #[test]
    fn a_stale_cookie_finds_nothing_in_its_reused_slot() {
        let mut c = Cookies::new();
        let a = put(&mut c);
        let b = put(&mut c);
        assert_ne!(a, b);
        assert_eq!(c.get(a), Some(&a));
        assert_eq!(c.remove(a), Some(a));
        assert_eq!(c.remove(a), None, "removed once");
        let a2 = put(&mut c);
        assert_eq!(a2 as u32, a as u32, "the free slot is reused");
        assert_ne!(a2, a);
        assert_eq!(c.get(a), None);
        assert_eq!(c.remove(a), None);
        assert_eq!(c.get(a2), Some(&a2));
        assert_eq!(c.get(b), Some(&b));
        assert_eq!(c.get(u64::MAX), None);
    }

    #[test]
    fn a_cookie_is_never_zero_even_when_a_generation_wraps() {
        let mut c = Cookies::new();
        let a = put(&mut c);
        assert_eq!(a as u32, 0, "slot 0");
        assert_ne!(a, 0);
        c.remove(a);
        c.slots[0].0 = 0x3fff_ffff;
        let b = put(&mut c);
        assert_eq!(b as u32, 0, "slot 0 again, its generation wrapped");
        assert_ne!(b, 0);
        assert_eq!(c.get(b), Some(&b));
    }
}
