//! The C boundary: every exported symbol, one file per family, all through `export!` /
//! `op!` (panic boundary + return convention) except the two blocking event reads, which
//! are written so that `pthread_cancel` can unwind through them (see `cq.rs`).

#[macro_use]
pub mod entry;
pub mod ah;
pub mod async_event;
pub mod cq;
pub mod device;
pub mod handles;
pub mod hook;
pub mod mem;
pub mod misc;
pub mod private;
pub mod qp;
pub mod srq;
