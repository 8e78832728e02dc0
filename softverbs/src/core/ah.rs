//! Address handles (UD destinations).

use super::mem::Pd;
use rdma_abi::verbs::*;
use std::cell::UnsafeCell;
use std::sync::Arc;

#[repr(C)]
pub struct Ah {
    pub c: UnsafeCell<ibv_ah>,
    pub pd: Arc<Pd>,
    pub attr: ibv_ah_attr,
}

// SAFETY: the C struct is written only before publication.
unsafe impl Sync for Ah {}
// SAFETY: see Sync.
unsafe impl Send for Ah {}

impl Ah {
    pub fn new(pd: &Arc<Pd>, attr: ibv_ah_attr) -> Arc<Ah> {
        Arc::new(Ah {
            c: UnsafeCell::new(ibv_ah { context: pd.ctx.ibv(), pd: pd.ibv(), handle: 0 }),
            pd: pd.clone(),
            attr,
        })
    }

    pub fn ibv(&self) -> *mut ibv_ah {
        self.c.get()
    }

    pub fn dgid(&self) -> [u8; 16] {
        // SAFETY: reading the raw bytes of a plain-data union.
        unsafe { self.attr.grh.dgid.raw }
    }
}
