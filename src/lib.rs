//! rdmacm-rs: rdma-core's `librdmacm.so.1`, written in Rust.
//!
//! Layout: `ffi` is the C boundary (the exported functions, argument checks, errno);
//! `cm` is the backend-neutral connection manager (channels, ids, events);
//! `addrinfo` implements `rdma_getaddrinfo`; `backend` picks what carries
//! device operations (`soft`: the userspace CM; `kernel`: /dev/infiniband/rdma_cm); `verbs` is the little of libibverbs we call; `sys` is libc glue.
#![deny(unsafe_op_in_unsafe_fn)]
#![allow(clippy::missing_safety_doc)]

#[cfg(not(target_os = "linux"))]
compile_error!("rdmacm-rs targets Linux only");

pub mod addrinfo;
pub mod backend;
pub mod cm;
pub mod devices;
pub mod ece;
pub mod ffi;
pub mod kernel;
pub mod qp;
pub mod rsocket;
pub mod soft;
pub mod sys;
pub mod trace;
pub mod verbs;
