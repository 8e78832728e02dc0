//! The C boundary: every exported function, grouped by man-page family. Each
//! checks its arguments, calls safe code in `cm`/`addrinfo`/`backend`, and
//! reports failure as the man page says (`entry!` does the errno part).

#[macro_use]
pub mod entry;
pub(crate) mod addr;
mod args;
mod channel;
mod conn;
mod devices;
pub(crate) mod id;
mod mcast;
mod qp;
mod rsocket;
mod verbs_helpers;
