//! The handle tables of every object kind, and lookups that turn a C pointer into its
//! object or EINVAL.

use crate::core::ah::Ah;
use crate::core::context::Context;
use crate::core::cq::{Channel, Cq};
use crate::core::mem::{Mr, Pd};
use crate::core::registry::Table;
use crate::core::srq::Srq;
use crate::qp::Qp;
use crate::sys::{Errno, Result};
use rdma_abi::verbs::*;
use std::sync::{Arc, LazyLock};

pub static CTXS: LazyLock<Table<Context>> = LazyLock::new(Table::default);
pub static PDS: LazyLock<Table<Pd>> = LazyLock::new(Table::default);
pub static MRS: LazyLock<Table<Mr>> = LazyLock::new(Table::default);
pub static CHANNELS: LazyLock<Table<Channel>> = LazyLock::new(Table::default);
pub static CQS: LazyLock<Table<Cq>> = LazyLock::new(Table::default);
pub static QPS: LazyLock<Table<Qp>> = LazyLock::new(Table::default);
pub static SRQS: LazyLock<Table<Srq>> = LazyLock::new(Table::default);
pub static AHS: LazyLock<Table<Ah>> = LazyLock::new(Table::default);

pub fn ctx(p: *const ibv_context) -> Result<Arc<Context>> {
    CTXS.get(p).ok_or(Errno::EINVAL)
}
pub fn pd(p: *const ibv_pd) -> Result<Arc<Pd>> {
    PDS.get(p).ok_or(Errno::EINVAL)
}
pub fn mr(p: *const ibv_mr) -> Result<Arc<Mr>> {
    MRS.get(p).ok_or(Errno::EINVAL)
}
pub fn channel(p: *const ibv_comp_channel) -> Result<Arc<Channel>> {
    CHANNELS.get(p).ok_or(Errno::EINVAL)
}
pub fn cq(p: *const ibv_cq) -> Result<Arc<Cq>> {
    CQS.get(p).ok_or(Errno::EINVAL)
}
pub fn qp(p: *const ibv_qp) -> Result<Arc<Qp>> {
    QPS.get(p).ok_or(Errno::EINVAL)
}
pub fn srq(p: *const ibv_srq) -> Result<Arc<Srq>> {
    SRQS.get(p).ok_or(Errno::EINVAL)
}
pub fn ah(p: *const ibv_ah) -> Result<Arc<Ah>> {
    AHS.get(p).ok_or(Errno::EINVAL)
}

/// Writes `v` through an out-pointer, or EINVAL if it is NULL.
///
/// # Safety
/// `p` must be NULL or valid for writing a `T`.
pub unsafe fn put<T>(p: *mut T, v: T) -> Result<()> {
    if p.is_null() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: non-NULL and valid per the caller.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// Reads an in-pointer, or EINVAL if it is NULL.
///
/// # Safety
/// `p` must be NULL or valid for reading a `T`.
pub unsafe fn get<T: Copy>(p: *const T) -> Result<T> {
    if p.is_null() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: non-NULL and valid per the caller.
    Ok(unsafe { p.read_unaligned() })
}
