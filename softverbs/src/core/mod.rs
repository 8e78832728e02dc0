//! Device-level objects: device and GIDs, contexts, PD/MR (and every access to application
//! memory), completion channels and CQs, SRQs, AHs, event plumbing and handle tables.

pub mod ah;
pub mod context;
pub mod cq;
pub mod device;
pub mod events;
pub mod mem;
pub mod pin;
pub mod registry;
pub mod srq;
pub mod window;
