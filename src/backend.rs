//! Which machinery carries the calls that need an RDMA device.
//!
//! The kernel backend (`/dev/infiniband/rdma_cm`, issue 3) and the soft
//! backend (our software libibverbs, issue 4) plug in here. Until they exist,
//! device calls fail with ENOSYS where a device is present and with ENODEV,
//! as upstream does, where none is.

use crate::sys::{Errno, Result};
use std::sync::LazyLock;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// No RDMA device and no software fabric: device calls fail with ENODEV.
    NoDevice,
    /// The kernel's RDMA CM (`/dev/infiniband/rdma_cm`).
    Kernel,
}

static KIND: LazyLock<Kind> = LazyLock::new(|| {
    if std::path::Path::new("/dev/infiniband/rdma_cm").exists() {
        Kind::Kernel
    } else {
        Kind::NoDevice
    }
});

pub fn kind() -> Kind {
    *KIND
}

/// The gate every device operation passes: the backend that would carry it,
/// or the error a caller gets.
pub fn device() -> Result<Kind> {
    match kind() {
        Kind::NoDevice => Err(Errno::ENODEV),
        Kind::Kernel => Err(Errno::ENOSYS),
    }
}
