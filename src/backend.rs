//! Which machinery carries the calls that need an RDMA device, and the
//! interface every backend implements.
//!
//! * `soft`: our software libibverbs (softverbs) is the loaded libibverbs; the
//!   CM runs in userspace over sockets.
//! * `kernel`: `/dev/infiniband/rdma_cm` exists (and the soft hook does not):
//!   the kernel's CM; ENODEV while libibverbs sees no device.
//! * none: no device; device calls fail with ENODEV, as upstream's do.

use crate::cm::options::Opt;
use crate::cm::IdCore;
use crate::sys::{Errno, Result};
use rdma_abi::verbs::ibv_qp_attr;
use std::sync::{Arc, LazyLock};

/// `rdma_conn_param` read out of C, with its private data copied.
#[derive(Clone, Debug, Default)]
pub struct ConnParam {
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// Device operations on an id. Arguments are checked by the caller; socket
/// addresses arrive as bytes whose length matches their family.
pub trait Backend: Send + Sync {
    fn bind(&self, id: &Arc<IdCore>, addr: &[u8]) -> Result<()>;
    fn resolve_addr(&self, id: &Arc<IdCore>, src: Option<&[u8]>, dst: &[u8], timeout_ms: i32) -> Result<()>;
    fn resolve_route(&self, id: &Arc<IdCore>, timeout_ms: i32) -> Result<()>;
    fn listen(&self, id: &Arc<IdCore>, backlog: i32) -> Result<()>;
    fn connect(&self, id: &Arc<IdCore>, p: ConnParam) -> Result<()>;
    fn accept(&self, id: &Arc<IdCore>, p: Option<ConnParam>) -> Result<()>;
    fn reject(&self, id: &Arc<IdCore>, data: &[u8], vendor_reason: bool) -> Result<()>;
    fn establish(&self, id: &Arc<IdCore>) -> Result<()>;
    fn notify(&self, id: &Arc<IdCore>, event: u32) -> Result<()>;
    fn disconnect(&self, id: &Arc<IdCore>) -> Result<()>;
    fn init_qp_attr(&self, id: &Arc<IdCore>, attr: &mut ibv_qp_attr, mask: &mut i32) -> Result<()>;
    fn join_multicast(&self, id: &Arc<IdCore>, addr: &[u8], join_flags: u32, context: usize) -> Result<()>;
    fn leave_multicast(&self, id: &Arc<IdCore>, addr: &[u8]) -> Result<()>;
    fn set_option(&self, id: &Arc<IdCore>, opt: &Opt) -> Result<()>;
    /// The id is going away: stop its events and release its resources.
    fn destroy(&self, id: &Arc<IdCore>);
    /// Whether AF_IB addresses may be passed (upstream's `af_ib_support`):
    /// without it they get EINVAL like any unknown family.
    fn af_ib(&self) -> bool {
        false
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    NoDevice,
    Kernel,
    Soft,
}

static KIND: LazyLock<Kind> = LazyLock::new(|| {
    if crate::soft::hook::ops().is_some() {
        Kind::Soft
    } else if std::path::Path::new("/dev/infiniband/rdma_cm").exists() {
        Kind::Kernel
    } else {
        Kind::NoDevice
    }
});

pub fn kind() -> Kind {
    *KIND
}

/// The backend carrying device operations, or the error a caller gets.
pub fn device() -> Result<&'static dyn Backend> {
    match kind() {
        Kind::NoDevice => Err(Errno::ENODEV),
        Kind::Kernel => crate::kernel::backend(),
        Kind::Soft => Ok(crate::soft::backend()),
    }
}

/// rdma_set_option's two steps: the value is kept on the id (checked against
/// the id's own rules), then the backend applies it; when the backend refuses
/// (a state its CM does not allow the option in) the id keeps what it had.
pub fn set_option(b: Option<&dyn Backend>, id: &Arc<IdCore>, opt: Opt) -> Result<()> {
    let before = {
        let mut st = id.state();
        let before = st.options.clone();
        st.options.apply(opt.clone(), false)?;
        before
    };
    if let Some(Err(e)) = b.map(|b| b.set_option(id, &opt)) {
        id.state().options.restore(&opt, &before);
        return Err(e);
    }
    Ok(())
}

/// A new id (rdma_create_id): the kernel CM makes its kernel id at once.
pub fn created(id: &mut IdCore) -> Result<()> {
    if kind() == Kind::Kernel {
        return crate::kernel::created(id);
    }
    Ok(())
}

/// Where a new channel's events come from besides its queue: the kernel CM
/// gives each channel its own rdma_cm file (None: no device, or another backend).
pub fn channel_source() -> Option<Box<dyn crate::cm::channel::Source>> {
    match kind() {
        Kind::Kernel => crate::kernel::channel_source(),
        _ => None,
    }
}

/// rdma_migrate_id: the backend's side of moving `id` to `to`.
pub fn migrate(id: &Arc<IdCore>, to: &crate::cm::Channel) -> Result<()> {
    match kind() {
        Kind::Kernel => crate::kernel::migrate(id, to),
        _ => Ok(()),
    }
}

/// For ids whose backend state must go with them (no-op without a device).
pub fn destroy(id: &Arc<IdCore>) {
    match kind() {
        // Never opens the kernel CM just to destroy an id that did not use it.
        Kind::Kernel => crate::kernel::destroy(id),
        _ => {
            if let Ok(b) = device() {
                b.destroy(id);
            }
        }
    }
}
