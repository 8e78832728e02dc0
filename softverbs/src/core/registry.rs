//! Handle tables: every pointer handed to the application is recorded here, so a NULL,
//! garbage or destroyed pointer is answered with EINVAL instead of being dereferenced.
//! Looking a handle up clones the `Arc`, which keeps the object (and the C struct the
//! application sees, which lives inside it) alive while a call uses it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub struct Table<T> {
    map: Mutex<HashMap<usize, Arc<T>>>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table { map: Mutex::new(HashMap::new()) }
    }
}

impl<T> Table<T> {
    pub fn insert<P>(&self, ptr: *const P, obj: Arc<T>) {
        lock(&self.map).insert(ptr as usize, obj);
    }

    pub fn get<P>(&self, ptr: *const P) -> Option<Arc<T>> {
        if ptr.is_null() {
            return None;
        }
        lock(&self.map).get(&(ptr as usize)).cloned()
    }

    pub fn remove<P>(&self, ptr: *const P) -> Option<Arc<T>> {
        lock(&self.map).remove(&(ptr as usize))
    }

    pub fn values(&self) -> Vec<Arc<T>> {
        lock(&self.map).values().cloned().collect()
    }
}

/// Locks a mutex, ignoring poisoning: a panic inside a locked section is already reported
/// at the C boundary, and the protected state stays structurally valid.
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
