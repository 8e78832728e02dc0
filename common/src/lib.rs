//! Shared by our librdmacm (the root crate) and softverbs, which ship as two
//! shared libraries but must agree on errno handling and on the trace switch,
//! both read socket names, and both hash integer-keyed tables the same way.

pub mod errno;
pub mod inthash;
pub mod sock;
pub mod thread;
pub mod trace;
