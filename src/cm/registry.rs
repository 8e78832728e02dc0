//! Handle tables: every pointer the library hands out is recorded here, so a
//! pointer coming back from C is looked up before it is dereferenced. Garbage
//! or stale pointers then give EINVAL instead of a crash.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};

pub struct Table<V> {
    map: Mutex<HashMap<usize, V>>,
}

impl<V: Clone> Table<V> {
    pub fn new() -> Self {
        Table { map: Mutex::new(HashMap::new()) }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<usize, V>> {
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
