//! A device context: the `verbs_context` block the application's `ibv_context *` points
//! into, the GID table, this context's endpoint (transport + progress thread), its QPs by
//! number, the peers the CM told us about, and the async-event queue.

use super::device::{self, GidEntry};
use super::events::EventQueue;
use super::registry::lock;
use crate::net::peers::RegFile;
use crate::net::Transport;
use crate::qp::Qp;
use crate::sys::Result;
use rdma_abi::verbs::*;
use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// What an async event refers to.
pub enum AsyncElem {
    Cq(Arc<super::cq::Cq>),
    Qp(Arc<Qp>),
    Srq(Arc<super::srq::Srq>),
    Port(i32),
}

pub struct AsyncEvent {
    pub elem: AsyncElem,
    pub kind: ibv_event_type,
}

#[repr(C)]
pub struct Context {
    /// Must stay the first field: the application's `ibv_context *` is `&vctx.context`.
    vctx: UnsafeCell<verbs_context>,
    pub gids: Vec<GidEntry>,
    pub lid: u16,
    pub net: OnceLock<Arc<dyn Transport>>,
    pub qps: Mutex<HashMap<u32, Weak<Qp>>>,
    /// (gid, qpn) → endpoint, from the CM hook and from received UD datagrams.
    pub peers: Mutex<HashMap<([u8; 16], u32), SocketAddr>>,
    pub async_q: EventQueue<AsyncEvent>,
    /// Number of parked RC requests with a finite RNR deadline (the engine ticks while > 0).
    pub rnr_timers: AtomicUsize,
    pub _lid_file: Option<RegFile>,
}

// SAFETY: the verbs_context block is written only during construction and read by the
// application afterwards; every other field is Sync on its own.
unsafe impl Sync for Context {}
// SAFETY: as above; raw pointers inside point to process-global or Arc-owned memory.
unsafe impl Send for Context {}

impl Context {
    pub fn new(vctx: verbs_context) -> Result<Arc<Context>> {
        let (lid, lid_file) = crate::net::peers::alloc_lid();
        let ctx = Arc::new(Context {
            vctx: UnsafeCell::new(vctx),
            gids: device::host_gids(),
            lid,
            net: OnceLock::new(),
            qps: Mutex::new(HashMap::new()),
            peers: Mutex::new(HashMap::new()),
            async_q: EventQueue::new()?,
            rnr_timers: AtomicUsize::new(0),
            _lid_file: lid_file,
        });
        // SAFETY: we are the only holder of ctx; fill the pointers that refer to itself.
        unsafe {
            let v = &mut *ctx.vctx.get();
            v.context.async_fd = ctx.async_q.fd();
        }
        Ok(ctx)
    }

    /// The `struct ibv_context *` the application holds.
    pub fn ibv(&self) -> *mut ibv_context {
        // SAFETY: projecting a field pointer out of our own UnsafeCell.
        unsafe { std::ptr::addr_of_mut!((*self.vctx.get()).context) }
    }

    pub fn net(&self) -> Option<&Arc<dyn Transport>> {
        self.net.get()
    }

    pub fn port(&self) -> u16 {
        self.net().map(|n| n.port()).unwrap_or(0)
    }

    pub fn find_qp(&self, qpn: u32) -> Option<Arc<Qp>> {
        lock(&self.qps).get(&qpn).and_then(|w| w.upgrade())
    }

    pub fn gid(&self, index: usize) -> Option<[u8; 16]> {
        self.gids.get(index).map(|e| e.gid)
    }

    pub fn gid_index(&self, gid: &[u8; 16]) -> Option<usize> {
        self.gids.iter().position(|e| &e.gid == gid)
    }

    pub fn raise(&self, elem: AsyncElem, kind: ibv_event_type) {
        self.async_q.push(AsyncEvent { elem, kind });
    }

    pub fn add_peer(&self, gid: [u8; 16], qpn: u32, addr: SocketAddr) {
        lock(&self.peers).insert((gid, qpn), addr);
    }

    pub fn peer(&self, gid: &[u8; 16], qpn: u32) -> Option<SocketAddr> {
        lock(&self.peers).get(&(*gid, qpn)).copied()
    }
}
