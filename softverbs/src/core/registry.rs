//! Handle tables: every pointer handed to the application is recorded here, so a NULL,
//! garbage or destroyed pointer is answered with EINVAL instead of being dereferenced.
//! Looking a handle up clones the `Arc`, which keeps the object (and the C struct the
//! application sees, which lives inside it) alive while a call uses it.

use common::inthash::IntMap;
use std::sync::{Arc, Mutex, RwLock};

/// Read-mostly (every verb looks its handle up; only create/destroy write), so threads
/// polling different CQs do not serialise on it.
pub struct Table<T> {
    map: RwLock<IntMap<usize, Arc<T>>>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table { map: RwLock::new(IntMap::default()) }
    }
}

impl<T> Table<T> {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, IntMap<usize, Arc<T>>> {
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, IntMap<usize, Arc<T>>> {
        self.map.write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn insert<P>(&self, ptr: *const P, obj: Arc<T>) {
        self.write().insert(ptr as usize, obj);
    }

    pub fn get<P>(&self, ptr: *const P) -> Option<Arc<T>> {
        if ptr.is_null() {
            return None;
        }
        self.read().get(&(ptr as usize)).cloned()
    }

    pub fn remove<P>(&self, ptr: *const P) -> Option<Arc<T>> {
        self.write().remove(&(ptr as usize))
    }

    pub fn values(&self) -> Vec<Arc<T>> {
        self.read().values().cloned().collect()
    }
}

/// Locks a mutex, ignoring poisoning: a panic inside a locked section is already reported
/// at the C boundary, and the protected state stays structurally valid.
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Non-blocking [`lock`]: `None` while another thread holds the mutex.
pub fn try_lock<T>(m: &Mutex<T>) -> Option<std::sync::MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}
