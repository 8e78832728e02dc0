//! softverbs: a software RDMA device shipped as its own `libibverbs.so.1`.
//!
//! One device (`soft0`, RoCE-like: link layer Ethernet, GIDs = the host's IP addresses).
//! Every `ibv_open_device` gets its own endpoint (a TCP listener and a UDP socket on one
//! port) and a progress thread; RC QPs exchange versioned frames over TCP, UD QPs over UDP.
//!
//! Layers: `ffi` (the C boundary: every export, panic boundary, errno/return conventions)
//! → `core` (device, context, PD/MR, CQ, SRQ, AH, events) and `qp` (state machine,
//! requester, responder) → `net` (frame codec, transport trait and its TCP/UDP engine,
//! peer resolution). `sys` is the libc glue; `trace` the verbs trace (`RDMACM_RS_TRACE`).
#![deny(unsafe_op_in_unsafe_fn)]
#![allow(clippy::missing_safety_doc, clippy::not_unsafe_ptr_arg_deref)]

pub mod core;
pub mod ffi;
pub mod net;
pub mod qp;
pub mod roce;
pub mod sys;
pub mod trace;
