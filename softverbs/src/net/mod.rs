//! How frames travel. The core talks to a [`Transport`] (one per context) and to
//! [`Link`]s (one reliable, ordered byte stream per RC requester QP); the TCP/UDP engine in
//! [`engine`] is the one implementation today. Incoming frames are handed to
//! `crate::qp::{requester, responder, ud}` entry points, which a different engine (e.g. a
//! RoCEv2 one) would call the same way.

pub mod addr;
pub mod engine;
pub mod frame;
pub mod peers;

use crate::qp::Qp;
use crate::sys::Result;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};

/// A reliable, ordered frame stream to one peer context.
pub trait Link: Send + Sync {
    /// Queues a whole frame; never blocks. Frames sent on a dead link are dropped.
    fn send(&self, frame: Vec<u8>);
    /// Closes the stream (the engine then reports it down).
    fn close(&self);
    fn is_dead(&self) -> bool;
}

/// One context's endpoint.
pub trait Transport: Send + Sync {
    /// The endpoint port (TCP and UDP).
    fn port(&self) -> u16;
    /// Opens a stream to `addr` for `owner`'s requests; frames queue until it is up.
    fn connect(&self, addr: SocketAddr, owner: Weak<Qp>) -> Result<Arc<dyn Link>>;
    /// Sends one datagram (UD).
    fn send_datagram(&self, addr: SocketAddr, frame: &[u8]) -> Result<()>;
    /// Stops the progress thread and closes every socket.
    fn stop(&self);
    /// Frames dropped because they failed validation.
    fn malformed(&self) -> u64;
}

#[cfg(test)]
mod frame_tests;
