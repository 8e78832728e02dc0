//! `rdma_get_devices`: every verbs device, opened once and kept open for the
//! life of the process (contexts handed to applications stay valid).

use crate::cm::registry::lock;
use crate::sys::{Errno, Result};
use crate::verbs::*;
use rdma_abi::verbs::ibv_context;
use std::ffi::CStr;
use std::sync::Mutex;

struct Opened {
    name: Vec<u8>,
    ctx: usize,
}

static OPENED: Mutex<Vec<Opened>> = Mutex::new(Vec::new());

/// Room for `n` more devices (a device list just read).
pub fn reserve(n: usize) {
    lock(&OPENED).reserve(n);
}

/// Contexts of every device present now, opening the new ones.
pub fn contexts() -> Result<Vec<*mut ibv_context>> {
    let mut n: i32 = 0;
    // SAFETY: plain call; NULL means no devices or no verbs support at all.
    let list = unsafe { ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: list holds n live device pointers; it is freed after the loop.
        if let Some(ctx) = unsafe { open(*list.add(i)) } {
            out.push(ctx);
        }
    }
    // SAFETY: list came from ibv_get_device_list; opened contexts outlive it.
    unsafe { ibv_free_device_list(list) };
    if out.is_empty() && n > 0 {
        return Err(Errno::ENODEV);
    }
    Ok(out)
}

/// The context of a listed device, opened the first time (None: unusable,
/// e.g. hidden in a container).
///
/// # Safety
/// `dev` is a live device of a device list that has not been freed.
pub unsafe fn open(dev: *mut ibv_device_opaque) -> Option<*mut ibv_context> {
    let mut opened = lock(&OPENED);
    // SAFETY: per the contract, a live device has a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(ibv_get_device_name(dev)) }.to_bytes().to_vec();
    if let Some(o) = opened.iter().find(|o| o.name == name) {
        return Some(o.ctx as *mut ibv_context);
    }
    // SAFETY: dev is a live device from a list.
    let ctx = unsafe { ibv_open_device(dev) };
    if ctx.is_null() {
        return None;
    }
    opened.push(Opened { name, ctx: ctx as usize });
    Some(ctx)
}
