//! Shared by our librdmacm (the root crate) and softverbs, which ship as two
//! shared libraries but must agree on errno handling and on the trace switch.

pub mod errno;
pub mod trace;
