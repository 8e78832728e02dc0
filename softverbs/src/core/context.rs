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
use common::inthash::IntMap;
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

/// Most UD sources remembered at once (`Peers::learn_ud`).
const UD_PEERS_MAX: usize = 4096;

type PeerKey = ([u8; 16], u32);

/// Where remote QPs live, by (gid, qpn).
#[derive(Default)]
pub struct Peers {
    /// From the CM hook: where RC and UD traffic goes.
    cm: HashMap<PeerKey, SocketAddr>,
    /// Learnt from UD datagrams a QP accepted, for UD replies only: a
    /// datagram's source is whatever its sender wrote, so it never decides
    /// where RC traffic goes nor overrides the CM's word.
    ud: HashMap<PeerKey, SocketAddr>,
}

impl Peers {
    /// Remembers where an accepted UD datagram came from. Emptied when full:
    /// a flood of made-up sources costs bounded memory, and a real peer is
    /// learnt again from its next datagram.
    fn learn_ud(&mut self, gid: [u8; 16], qpn: u32, addr: SocketAddr) {
        if self.ud.len() >= UD_PEERS_MAX && !self.ud.contains_key(&(gid, qpn)) {
            self.ud.clear();
        }
        self.ud.insert((gid, qpn), addr);
    }

    /// Where a UD datagram for (gid, qpn) goes: the CM's word first, then what was learnt.
    fn ud(&self, gid: &[u8; 16], qpn: u32) -> Option<SocketAddr> {
        self.cm.get(&(*gid, qpn)).or_else(|| self.ud.get(&(*gid, qpn))).copied()
    }
}

#[repr(C)]
pub struct Context {
    /// Must stay the first field: the application's `ibv_context *` is `&vctx.context`.
    vctx: UnsafeCell<verbs_context>,
    pub gids: Vec<GidEntry>,
    pub lid: u16,
    pub net: OnceLock<Arc<dyn Transport>>,
    pub qps: Mutex<IntMap<u32, Weak<Qp>>>,
    pub peers: Mutex<Peers>,
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
            qps: Mutex::new(IntMap::default()),
            peers: Mutex::new(Peers::default()),
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

    /// The CM hook's word on where a QP lives.
    pub fn add_peer(&self, gid: [u8; 16], qpn: u32, addr: SocketAddr) {
        lock(&self.peers).cm.insert((gid, qpn), addr);
    }

    /// Where the CM said a QP lives (RC connections go only there, or to the host registry).
    pub fn peer(&self, gid: &[u8; 16], qpn: u32) -> Option<SocketAddr> {
        lock(&self.peers).cm.get(&(*gid, qpn)).copied()
    }

    pub fn learn_ud_peer(&self, gid: [u8; 16], qpn: u32, addr: SocketAddr) {
        lock(&self.peers).learn_ud(gid, qpn, addr);
    }

    pub fn ud_peer(&self, gid: &[u8; 16], qpn: u32) -> Option<SocketAddr> {
        lock(&self.peers).ud(gid, qpn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_learnt_ud_source_never_redirects_rc_nor_overrides_the_cm() {
        let mut p = Peers::default();
        let (g, cm_addr, spoof): ([u8; 16], SocketAddr, SocketAddr) =
            ([7; 16], "10.0.0.1:4791".parse().unwrap(), "10.6.6.6:1".parse().unwrap());
        p.cm.insert((g, 5), cm_addr);
        p.learn_ud(g, 5, spoof);
        p.learn_ud(g, 6, spoof);
        assert_eq!(p.ud(&g, 5), Some(cm_addr), "the CM's word wins for UD too");
        assert_eq!(p.ud(&g, 6), Some(spoof), "a learnt source serves UD replies");
        assert_eq!(p.cm.get(&(g, 6)), None, "and is not where RC goes");
        for q in 0..(UD_PEERS_MAX as u32 + 10) {
            p.learn_ud([1; 16], 1000 + q, spoof);
        }
        assert!(p.ud.len() <= UD_PEERS_MAX, "bounded");
    }
}
