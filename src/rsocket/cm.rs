//! The CM calls rsockets are built on: this library's own exported rdma_*
//! functions, called through the C ABI exactly as upstream's rsocket calls
//! its librdmacm (so any backend behind them works unchanged), plus small
//! helpers around their results.

use crate::sys::{Errno, Result};
use rdma_abi::cma::*;
use rdma_abi::verbs::ibv_qp_init_attr;
use std::ffi::{c_int, c_void};

extern "C" {
    pub fn rdma_create_id(
        channel: *mut rdma_event_channel,
        id: *mut *mut rdma_cm_id,
        context: *mut c_void,
        ps: rdma_port_space,
    ) -> c_int;
    pub fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int;
    pub fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int;
    pub fn rdma_resolve_addr(
        id: *mut rdma_cm_id,
        src: *mut libc::sockaddr,
        dst: *mut libc::sockaddr,
        timeout_ms: c_int,
    ) -> c_int;
    pub fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int;
    pub fn rdma_create_qp(id: *mut rdma_cm_id, pd: *mut rdma_abi::verbs::ibv_pd, attr: *mut ibv_qp_init_attr) -> c_int;
    pub fn rdma_destroy_qp(id: *mut rdma_cm_id);
    pub fn rdma_connect(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int;
    pub fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int;
    pub fn rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int;
    pub fn rdma_accept(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int;
    pub fn rdma_reject(id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int;
    pub fn rdma_set_option(
        id: *mut rdma_cm_id,
        level: c_int,
        optname: c_int,
        optval: *mut c_void,
        optlen: usize,
    ) -> c_int;
    pub fn rdma_get_cm_event(channel: *mut rdma_event_channel, event: *mut *mut rdma_cm_event) -> c_int;
    pub fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int;
    pub fn rdma_get_devices(num: *mut c_int) -> *mut *mut rdma_abi::verbs::ibv_context;
    pub fn rdma_free_devices(list: *mut *mut rdma_abi::verbs::ibv_context);
}

/// Whether any RDMA device exists (checked once): a stream rsocket needs
/// one, and fails with ENODEV without (upstream's, and the preload falls
/// back to a real socket then).
pub fn have_device() -> bool {
    static HAVE: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
        let mut n: c_int = 0;
        // SAFETY: our own rdma_get_devices; the list is freed right away.
        unsafe {
            let l = rdma_get_devices(&mut n);
            if !l.is_null() {
                rdma_free_devices(l);
            }
        }
        n > 0
    });
    *HAVE
}

/// `-1 + errno` → Err, with EWOULDBLOCK folded into EAGAIN.
pub fn check(ret: c_int) -> Result<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}

/// An owned synchronous rdma_cm_id (private event channel), destroyed on drop
/// unless released.
pub struct Id(pub *mut rdma_cm_id);

// SAFETY: rdma_cm ids may be used from any thread; the library serializes.
unsafe impl Send for Id {}
// SAFETY: as above: shared use only goes through the library's own locking.
unsafe impl Sync for Id {}

impl Id {
    /// A synchronous id: its private channel's fd is the rsocket number.
    pub fn new(ps: u32) -> Result<Id> {
        let mut id = std::ptr::null_mut();
        // SAFETY: a NULL channel asks for a synchronous id; `id` is writable.
        check(unsafe { rdma_create_id(std::ptr::null_mut(), &mut id, std::ptr::null_mut(), ps) })?;
        Ok(Id(id))
    }

    pub fn raw(&self) -> *mut rdma_cm_id {
        self.0
    }

    /// The id's (private) channel.
    pub fn channel(&self) -> *mut rdma_event_channel {
        // SAFETY: a live id of this library.
        unsafe { (*self.0).channel }
    }

    pub fn fd(&self) -> c_int {
        // SAFETY: the channel of a live id.
        unsafe { (*self.channel()).fd }
    }

    pub fn verbs(&self) -> *mut rdma_abi::verbs::ibv_context {
        // SAFETY: a live id.
        unsafe { (*self.0).verbs }
    }

    pub fn pd(&self) -> *mut rdma_abi::verbs::ibv_pd {
        // SAFETY: a live id.
        unsafe { (*self.0).pd }
    }

    pub fn qp(&self) -> *mut rdma_abi::verbs::ibv_qp {
        // SAFETY: a live id.
        unsafe { (*self.0).qp }
    }

    pub fn port_num(&self) -> u8 {
        // SAFETY: a live id.
        unsafe { (*self.0).port_num }
    }

    /// The next event on the id's channel without blocking (the channel fd is
    /// non-blocking): (event, status, private data). The event is acked here.
    pub fn next_event(&self) -> Result<Option<(u32, i32, Vec<u8>)>> {
        let mut ev = std::ptr::null_mut();
        // SAFETY: the id's own channel; ev is writable.
        if unsafe { rdma_get_cm_event(self.channel(), &mut ev) } != 0 {
            let e = Errno::last();
            return if e == Errno::EAGAIN || e.0 == libc::EWOULDBLOCK { Ok(None) } else { Err(e) };
        }
        // SAFETY: a delivered event, valid until acked below.
        let r = unsafe { event_parts(ev) };
        // SAFETY: the event we were given.
        unsafe { rdma_ack_cm_event(ev) };
        Ok(Some(r))
    }

    /// The event a synchronous call left in `id->event` (if any): (event, status, private data).
    pub fn stored_event(&self) -> Option<(u32, i32, Vec<u8>)> {
        // SAFETY: a live id; `event` is NULL or an event the library keeps until the next call.
        let ev = unsafe { (*self.0).event };
        // SAFETY: as above.
        (!ev.is_null()).then(|| unsafe { event_parts(ev) })
    }

    /// The connection parameters of the event in `id->event` (a request).
    pub fn stored_conn_param(&self) -> Option<rdma_conn_param> {
        // SAFETY: a live id; `event` is NULL or a live event; conn is the
        // member for connected port spaces.
        unsafe {
            let ev = (*self.0).event;
            (!ev.is_null()).then(|| (*ev).param.conn)
        }
    }

    /// Gives up ownership (the id was destroyed elsewhere or handed on).
    pub fn release(mut self) {
        self.0 = std::ptr::null_mut();
    }
}

impl Drop for Id {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: an id we own, destroyed once.
            unsafe {
                if !(*self.0).qp.is_null() {
                    rdma_destroy_qp(self.0);
                }
                rdma_destroy_id(self.0);
            }
        }
    }
}

/// Copies the interesting parts of an event.
///
/// # Safety
/// `ev` is a live event.
pub unsafe fn event_parts(ev: *const rdma_cm_event) -> (u32, i32, Vec<u8>) {
    // SAFETY: per the contract.
    let e = unsafe { &*ev };
    // SAFETY: conn is the member for connected port spaces; the pointer and
    // length come from the library and stay valid until the ack.
    let data = unsafe {
        let c = e.param.conn;
        if c.private_data.is_null() || c.private_data_len == 0 {
            Vec::new()
        } else {
            std::slice::from_raw_parts(c.private_data as *const u8, c.private_data_len as usize).to_vec()
        }
    };
    (e.event, e.status, data)
}

/// The errno a failed connection event stands for (as rdma_cm's synchronous calls report it).
pub fn event_errno(event: u32, status: i32) -> Errno {
    match event {
        RDMA_CM_EVENT_REJECTED => Errno(libc::ECONNREFUSED),
        RDMA_CM_EVENT_UNREACHABLE if status == 0 => Errno(libc::EHOSTUNREACH),
        _ if status != 0 => Errno(status.abs()),
        RDMA_CM_EVENT_ADDR_ERROR | RDMA_CM_EVENT_ROUTE_ERROR => Errno(libc::EHOSTUNREACH),
        _ => Errno(libc::ECONNREFUSED),
    }
}
