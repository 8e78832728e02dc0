//! Event plumbing shared by completion channels and the async-event fd: a doorbell fd with
//! one readable unit per queued event, an in-memory queue (so events of a destroyed object
//! can be purged), and per-object "reported vs acknowledged" counters that destroy waits on.

use super::registry::lock;
use crate::sys::{Doorbell, Result};
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};

/// Events handed to the application (`reported`) and acknowledged by it (`acked`).
#[derive(Default)]
pub struct EventCounts {
    m: Mutex<(u64, u64)>,
    cv: Condvar,
}

impl EventCounts {
    pub fn reported(&self) {
        lock(&self.m).0 += 1;
    }

    /// Adds `n` acknowledgements; returns the new total (for the C struct's counter).
    pub fn ack(&self, n: u64) -> u64 {
        let mut g = lock(&self.m);
        g.1 += n;
        self.cv.notify_all();
        g.1
    }

    /// Blocks until every reported event was acknowledged (upstream semantics: forever).
    pub fn wait_acked(&self) {
        let mut g = lock(&self.m);
        while g.1 < g.0 {
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// A queue of events behind a pollable fd.
pub struct EventQueue<T> {
    pub bell: Doorbell,
    q: Mutex<VecDeque<T>>,
}

impl<T> EventQueue<T> {
    pub fn new() -> Result<EventQueue<T>> {
        Ok(EventQueue { bell: Doorbell::new()?, q: Mutex::new(VecDeque::new()) })
    }

    pub fn fd(&self) -> i32 {
        self.bell.raw()
    }

    pub fn push(&self, item: T) {
        lock(&self.q).push_back(item);
        self.bell.ring();
    }

    /// Takes the oldest event and runs `f` on it while the queue is locked (so a concurrent
    /// purge cannot interleave between "taken" and "counted as reported").
    pub fn pop_with<R>(&self, f: impl FnOnce(T) -> R) -> Option<R> {
        let mut g = lock(&self.q);
        let item = g.pop_front()?;
        Some(f(item))
    }

    /// Drops every queued event matching `pred`; returns how many. The doorbell keeps its
    /// units: a reader woken for a purged event finds the queue empty and waits again.
    pub fn purge(&self, pred: impl Fn(&T) -> bool) -> usize {
        let mut g = lock(&self.q);
        let before = g.len();
        g.retain(|x| !pred(x));
        before - g.len()
    }
}
