//! Verbs devices as the kernel CM names them: an id is attached to the device
//! whose node GUID (and index, when both sides know it) QUERY(ADDR) reports
//! (kernel-abi.md §4). Per device, once: its context (shared with
//! rdma_get_devices), its limits, the link layer of each port and one PD that
//! every id on the device gets as `id->pd`. Devices are kept for the life of
//! the process, like the contexts handed to applications.

use crate::cm::registry::lock;
use crate::sys::{Errno, Result};
use crate::verbs::{device_attr, ibv_alloc_pd, ibv_get_device_guid, port_attr};
use rdma_abi::verbs::*;
use std::sync::Mutex;

#[link(name = "ibverbs")]
extern "C" {
    fn ibv_get_device_index(device: *mut ibv_device) -> libc::c_int;
}

pub struct Dev {
    pub ctx: usize,
    pub pd: usize,
    /// Node GUID as the kernel reports it (network byte order, raw).
    pub guid: u64,
    /// Kernel device index, -1 when libibverbs does not know it.
    pub index: i32,
    pub transport: ibv_transport_type,
    /// Device maxima for rdma_connect/rdma_accept defaults (capped at 255).
    pub max_responder_resources: u8,
    pub max_initiator_depth: u8,
    /// Link layer of port n at [n - 1].
    pub link_layer: Vec<u8>,
}

impl Dev {
    pub fn is_iwarp(&self) -> bool {
        self.transport == IBV_TRANSPORT_IWARP
    }
    pub fn is_ib_transport(&self) -> bool {
        self.transport == IBV_TRANSPORT_IB
    }
    pub fn link_layer(&self, port: u8) -> u8 {
        self.link_layer.get((port as usize).wrapping_sub(1)).copied().unwrap_or(IBV_LINK_LAYER_UNSPECIFIED)
    }
    pub fn ctx(&self) -> *mut ibv_context {
        self.ctx as *mut ibv_context
    }
    pub fn pd(&self) -> *mut ibv_pd {
        self.pd as *mut ibv_pd
    }
}

static DEVS: Mutex<Vec<&'static Dev>> = Mutex::new(Vec::new());

/// Whether (guid, index) names this device; an unknown index on either side
/// matches on the GUID alone.
fn matches(guid: u64, index: u32, d_guid: u64, d_index: i32) -> bool {
    guid == d_guid && (index == u32::MAX || d_index < 0 || d_index as u32 == index)
}

/// Sets up a device context for the CM (limits, ports, shared PD).
fn make(ctx: *mut ibv_context) -> Result<Dev> {
    // SAFETY: ctx is an open device context; its device pointer is valid.
    let (guid, index, transport) = unsafe {
        let d = (*ctx).device;
        (ibv_get_device_guid(d.cast()), ibv_get_device_index(d), (*d).transport_type)
    };
    // SAFETY: an open context.
    let attr = unsafe { device_attr(ctx) }?;
    let mut link_layer = Vec::with_capacity(attr.phys_port_cnt as usize);
    for port in 1..=attr.phys_port_cnt {
        // SAFETY: an open context.
        link_layer.push(unsafe { port_attr(ctx, port) }.map_or(IBV_LINK_LAYER_UNSPECIFIED, |a| a.link_layer));
    }
    // SAFETY: an open context.
    let pd = unsafe { ibv_alloc_pd(ctx) };
    if pd.is_null() {
        return Err(Errno::last());
    }
    Ok(Dev {
        ctx: ctx as usize,
        pd: pd as usize,
        guid,
        index,
        transport,
        max_responder_resources: attr.max_qp_rd_atom.clamp(0, 255) as u8,
        max_initiator_depth: attr.max_qp_init_rd_atom.clamp(0, 255) as u8,
        link_layer,
    })
}

/// The device list read when the CM starts (upstream's ucma_init), with the
/// GUID and index the kernel names each device by. The list is kept (its
/// device pointers stay valid) until a later scan replaces it.
struct Listed {
    list: usize,
    devs: Vec<(usize, u64, i32)>,
}

static LISTED: Mutex<Option<Listed>> = Mutex::new(None);

/// Reads the device list (again); whether it has any device.
pub fn scan() -> bool {
    let mut n = 0;
    // SAFETY: plain call; the list is freed when a later scan replaces it.
    let list = unsafe { crate::verbs::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return false;
    }
    let mut devs = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: the list holds n live device pointers.
        let d = unsafe { *list.add(i) };
        // SAFETY: a live device from the list.
        let (guid, index) = unsafe { (ibv_get_device_guid(d), ibv_get_device_index(d.cast())) };
        devs.push((d as usize, guid, index));
    }
    // Room for every listed device: the first event of each (whose opening is
    // code run for the first time anyway) adds it without growing a table.
    let more = devs.len();
    lock(&DEVS).reserve(more);
    crate::devices::reserve(more);
    let old = lock(&LISTED).replace(Listed { list: list as usize, devs });
    if let Some(old) = old {
        // SAFETY: a list of ours that nothing reads any more (LISTED held the only
        // reference; devices opened from it hold their own).
        unsafe { crate::verbs::ibv_free_device_list(old.list as *mut _) };
    }
    n > 0
}

/// The device the kernel names by (node GUID, device index).
pub fn find(guid: u64, index: u32) -> Result<&'static Dev> {
    let mut devs = lock(&DEVS);
    if let Some(d) = devs.iter().find(|d| matches(guid, index, d.guid, d.index)) {
        return Ok(d);
    }
    let open_listed = || {
        let l = lock(&LISTED);
        let &(dev, _, _) = l.as_ref()?.devs.iter().find(|&&(_, g, i)| matches(guid, index, g, i))?;
        // SAFETY: a device of the list LISTED keeps (held locked, so no scan frees it).
        unsafe { crate::devices::open(dev as *mut crate::verbs::ibv_device_opaque) }
    };
    // A device plugged in since the scan: read the list again.
    let ctx = open_listed().or_else(|| if scan() { open_listed() } else { None }).ok_or(Errno::ENODEV)?;
    let d: &'static Dev = Box::leak(Box::new(make(ctx)?));
    devs.push(d);
    Ok(d)
}

#[cfg(test)]
mod tests {
    #[test]
    fn guid_and_index_matching() {
        assert!(super::matches(7, 1, 7, 1));
        assert!(!super::matches(7, 1, 7, 2));
        assert!(super::matches(7, u32::MAX, 7, 2));
        assert!(super::matches(7, 3, 7, -1));
        assert!(!super::matches(8, 1, 7, 1));
    }
}
