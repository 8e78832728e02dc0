//! The verbs an rsocket drives directly: its completion queue and channel,
//! registered buffers, and posting/polling through the provider's ops (the
//! inline verbs of verbs.h, as src/ffi/verbs_helpers.rs does).
//!
//! Functions here take raw verbs handles (contexts, CQs, QPs, PDs) that an
//! rsocket created and owns for its lifetime; they are not `unsafe fn` so
//! call sites stay readable, hence the module-wide clippy allowance.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use crate::sys::{set_nonblock, Errno, Result};
use crate::verbs::*;
use rdma_abi::verbs::*;
use std::ffi::{c_int, c_void};
use std::mem::MaybeUninit;

#[link(name = "ibverbs")]
extern "C" {
    pub fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah;
    pub fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int;
}

/// A verbs call returning an errno value (0 = success), possibly negated.
/// The largest message a UD QP on `port` carries: its active MTU in bytes (0
/// when it cannot be asked). UD sends beyond it are dropped on the wire.
pub fn ud_mtu(verbs: *mut ibv_context, port: u8) -> usize {
    // SAFETY: the caller's id's device context (or NULL).
    match unsafe { port_attr(verbs, port.max(1)) }.map_or(0, |a| a.active_mtu) {
        m @ 1..=5 => 128 << m,
        _ => 0,
    }
}

/// Whether `port` has an Ethernet link layer (RoCE).
pub fn is_roce(verbs: *mut ibv_context, port: u8) -> bool {
    // SAFETY: as in ud_mtu.
    unsafe { port_attr(verbs, port.max(1)) }.is_some_and(|a| a.link_layer == IBV_LINK_LAYER_ETHERNET)
}

/// `max_qp_wr` of a device (0 when it cannot be asked).
pub fn max_qp_wr(verbs: *mut ibv_context) -> u32 {
    // SAFETY: as in ud_mtu.
    unsafe { device_attr(verbs) }.map_or(0, |a| a.max_qp_wr.max(0) as u32)
}

/// Vendor id of the kernel's soft-RoCE (rxe).
const RXE_VENDOR_ID: u32 = 0xFF_FFFF;

/// A software RDMA device (this project's softverbs, i.e. the soft backend,
/// or the kernel's rxe): the CPU moves every message, inside or right after
/// `ibv_post_send`, at a fixed cost per message, so splitting a send into
/// more messages delays it instead of overlapping the copy with a DMA engine.
pub fn is_software(verbs: *mut ibv_context) -> bool {
    crate::backend::kind() == crate::backend::Kind::Soft
        // SAFETY: as in ud_mtu.
        || unsafe { device_attr(verbs) }.is_ok_and(|a| a.vendor_id == RXE_VENDOR_ID)
}

/// Transport of a device: true for iWARP (messages go as SENDs, not immediates).
pub fn is_iwarp(verbs: *mut ibv_context) -> bool {
    if verbs.is_null() {
        return false;
    }
    // SAFETY: an open context; `device` is set by libibverbs for every context.
    unsafe {
        let dev = (*verbs).device;
        !dev.is_null() && (*dev).transport_type == IBV_TRANSPORT_IWARP
    }
}

/// A completion queue with its own channel (non-blocking fd), armed on demand.
pub struct Cq {
    pub chan: *mut ibv_comp_channel,
    pub cq: *mut ibv_cq,
    armed: bool,
    unacked: u32,
}

// SAFETY: verbs objects may be used from any thread; every use is serialized
// by the lock of the rsocket that owns this CQ.
unsafe impl Send for Cq {}

impl Cq {
    pub fn new(verbs: *mut ibv_context, depth: u32, ctx: *mut c_void) -> Result<Cq> {
        // SAFETY: an open device context.
        let chan = unsafe { ibv_create_comp_channel(verbs) };
        if chan.is_null() {
            return Err(Errno::last());
        }
        // SAFETY: the channel we just made.
        let fd = unsafe { (*chan).fd };
        // SAFETY: as above; the context pointer is only stored.
        let cq = unsafe { ibv_create_cq(verbs, depth.max(1) as c_int, ctx, chan, 0) };
        if cq.is_null() {
            let e = Errno::last();
            // SAFETY: unused channel we own.
            unsafe { ibv_destroy_comp_channel(chan) };
            return Err(e);
        }
        let c = Cq { chan, cq, armed: false, unacked: 0 };
        set_nonblock(fd, true)?;
        Ok(c)
    }

    pub fn fd(&self) -> c_int {
        // SAFETY: the channel lives as long as self.
        unsafe { (*self.chan).fd }
    }

    /// Polls up to `wc.len()` completions; the first n returned are filled.
    /// The array need not be initialised (busy-polling loops call this
    /// constantly; zeroing 32 completions each time showed in profiles).
    pub fn poll<'w>(&self, wc: &'w mut [MaybeUninit<ibv_wc>]) -> Result<&'w [ibv_wc]> {
        // SAFETY: a CQ created by verbs; its context's ops carry poll_cq; the
        // array is writable for its length (the provider only writes).
        let n = unsafe {
            let f = (*(*self.cq).context).ops.poll_cq.ok_or(Errno::ENOSYS)?;
            f(self.cq, wc.len() as c_int, wc.as_mut_ptr().cast())
        };
        if n < 0 {
            return Err(Errno(libc::EIO));
        }
        let n = (n as usize).min(wc.len());
        // SAFETY: poll_cq filled the first n entries.
        Ok(unsafe { std::slice::from_raw_parts(wc.as_ptr().cast(), n) })
    }

    /// Whether an event is requested and not read yet.
    pub fn armed(&self) -> bool {
        self.armed
    }

    /// Requests an event for the next completion (once per event).
    pub fn arm(&mut self) -> Result<()> {
        if self.armed {
            return Ok(());
        }
        // SAFETY: as in poll.
        let r = unsafe {
            let f = (*(*self.cq).context).ops.req_notify_cq.ok_or(Errno::ENOSYS)?;
            f(self.cq, 0)
        };
        verr(r)?;
        self.armed = true;
        Ok(())
    }

    /// After a sleep on this CQ's fd: `polled` holds the poll(2) entries
    /// with their revents (None: no sleep, or poll failed). An arming gives at
    /// most one event, so a reported fd costs one read and an unreported one
    /// none. Without a poll nothing is read: a caller that did not sleep may
    /// not process completions, and an event read then would be lost to a
    /// thread sleeping on the same fd; unread, it keeps the fd readable (and
    /// the CQ armed), so the next sleep wakes at once and reads it.
    /// True when it read an event: the caller then processes the CQ, as the
    /// event (and so the fd's readiness) is gone for any other sleeper on it.
    pub fn after_sleep(&mut self, polled: Option<&[libc::pollfd]>) -> bool {
        let Some(p) = polled else { return false };
        if p.iter().any(|e| e.fd == self.fd() && e.revents != 0) {
            let read = self.read_event();
            self.ack_some();
            return read;
        }
        false
    }

    fn read_event(&mut self) -> bool {
        let mut cq = std::ptr::null_mut();
        let mut ctx = std::ptr::null_mut();
        // SAFETY: our channel, whose fd is non-blocking.
        if unsafe { ibv_get_cq_event(self.chan, &mut cq, &mut ctx) } != 0 {
            return false;
        }
        self.armed = false;
        self.unacked += 1;
        true
    }

    fn ack_some(&mut self) {
        if self.unacked >= 32 {
            // SAFETY: events of this CQ we read above.
            unsafe { ibv_ack_cq_events(self.cq, self.unacked) };
            self.unacked = 0;
        }
    }

    /// Acks what was read and destroys the CQ and its channel.
    pub fn destroy(mut self) {
        // Every event read must be acked before the CQ goes (never blocks: the fd is non-blocking).
        while self.read_event() {}
        // SAFETY: our CQ and channel; the QP using the CQ is gone; events acked first.
        unsafe {
            if self.unacked > 0 {
                ibv_ack_cq_events(self.cq, self.unacked);
            }
            ibv_destroy_cq(self.cq);
            ibv_destroy_comp_channel(self.chan);
        }
        self.unacked = 0;
    }
}

/// Posts one send work request chain on `qp`.
pub fn post_send(qp: *mut ibv_qp, wr: &mut ibv_send_wr) -> Result<()> {
    let mut bad = std::ptr::null_mut();
    // SAFETY: a live QP created by verbs; the request and its SGEs live across the call.
    unsafe {
        let f = (*(*qp).context).ops.post_send.ok_or(Errno::ENOSYS)?;
        verr(f(qp, wr, &mut bad))
    }
}

/// Posts one receive work request on `qp`.
pub fn post_recv(qp: *mut ibv_qp, wr: &mut ibv_recv_wr) -> Result<()> {
    let mut bad = std::ptr::null_mut();
    // SAFETY: as in post_send.
    unsafe {
        let f = (*(*qp).context).ops.post_recv.ok_or(Errno::ENOSYS)?;
        verr(f(qp, wr, &mut bad))
    }
}

/// Moves a QP to the error state (flushes its work requests).
pub fn qp_to_error(qp: *mut ibv_qp) {
    if qp.is_null() {
        return;
    }
    // SAFETY: all-zero is a valid ibv_qp_attr.
    let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
    attr.qp_state = IBV_QPS_ERR;
    // SAFETY: a live QP; the attribute names only the state.
    unsafe { ibv_modify_qp(qp, &mut attr, IBV_QP_STATE as c_int) };
}

/// A zeroed, page-aligned heap buffer that RDMA devices may access.
pub struct Buf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: plain memory owned by one rsocket; accesses are serialized by its lock
// (the device writes into it asynchronously, as RDMA does).
unsafe impl Send for Buf {}

impl Buf {
    pub fn new(len: usize) -> Result<Buf> {
        let len = len.max(1);
        let layout = std::alloc::Layout::from_size_align(len, 4096).map_err(|_| Errno::ENOMEM)?;
        // SAFETY: non-zero size layout.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Errno::ENOMEM);
        }
        Ok(Buf { ptr, len })
    }
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    pub fn size(&self) -> usize {
        self.len
    }
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        if let Ok(layout) = std::alloc::Layout::from_size_align(self.len, 4096) {
            // SAFETY: allocated in `new` with this layout, freed once.
            unsafe { std::alloc::dealloc(self.ptr, layout) };
        }
    }
}

/// A registered memory region, deregistered on drop.
pub struct Mr(pub *mut ibv_mr);

// SAFETY: an MR handle; verbs calls on it are thread-safe.
unsafe impl Send for Mr {}

impl Mr {
    pub fn reg(pd: *mut ibv_pd, addr: *mut u8, len: usize, access: u32) -> Result<Mr> {
        if pd.is_null() {
            return Err(Errno::EINVAL);
        }
        // SAFETY: a PD of the device and memory that outlives the registration.
        let mr = unsafe { ibv_reg_mr(pd, addr.cast(), len, access as c_int) };
        if mr.is_null() {
            return Err(Errno::last());
        }
        Ok(Mr(mr.cast()))
    }
    pub fn lkey(&self) -> u32 {
        // SAFETY: a live MR.
        unsafe { (*self.0).lkey }
    }
    pub fn rkey(&self) -> u32 {
        // SAFETY: a live MR.
        unsafe { (*self.0).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered in `reg`, deregistered once.
        unsafe { ibv_dereg_mr(self.0.cast()) };
    }
}

/// A buffer and its registration (deregistered before the memory is freed).
pub struct RegBuf {
    pub mr: Mr,
    pub buf: Buf,
}

impl RegBuf {
    pub fn new(pd: *mut ibv_pd, len: usize, access: u32) -> Result<RegBuf> {
        let buf = Buf::new(len)?;
        let mr = Mr::reg(pd, buf.ptr(), buf.size(), access)?;
        Ok(RegBuf { mr, buf })
    }
    pub fn ptr(&self) -> *mut u8 {
        self.buf.ptr()
    }
    pub fn addr(&self) -> u64 {
        self.buf.addr()
    }
}
