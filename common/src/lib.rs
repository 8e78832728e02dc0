//! Shared by our librdmacm (the root crate) and softverbs, which ship as two
//! shared libraries but must agree on errno handling and on the trace switch,
//! and both read socket names.

pub mod errno;
pub mod sock;
pub mod trace;
