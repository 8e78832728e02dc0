//! Handle tables: every pointer the library hands out is recorded here, so a
//! pointer coming back from C is looked up before it is dereferenced. Garbage
//! or stale pointers then give EINVAL instead of a crash.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
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

pub struct Table<V> {
    map: Mutex<KeyMap<usize, V>>,
}

impl<V: Clone> Table<V> {
    pub fn new() -> Self {
        Table { map: Mutex::new(KeyMap::default()) }
    }

    fn lock(&self) -> MutexGuard<'_, KeyMap<usize, V>> {
        // A panic elsewhere must not poison every later call.
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn insert<T>(&self, ptr: *const T, v: V) {
        self.lock().insert(ptr as usize, v);
    }

    pub fn get<T>(&self, ptr: *const T) -> Option<V> {
        self.lock().get(&(ptr as usize)).cloned()
    }

    pub fn remove<T>(&self, ptr: *const T) -> Option<V> {
        self.lock().remove(&(ptr as usize))
    }
}

impl<V: Clone> Default for Table<V> {
    fn default() -> Self {
        Self::new()
    }
}

/// Locks a std mutex, ignoring poison (state stays consistent: no code path
/// leaves it half-updated across a panic point).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[allow(dead_code)]
fn _assert_hash<K: Hash>() {}
