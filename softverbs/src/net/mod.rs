//! How frames travel. The core talks to a [`Transport`] (one per context) and to
//! [`Link`]s (reliable, ordered byte streams, normally one per RC QP pair, carrying both
//! QPs' requests and responses); the TCP/UDP engine in
//! [`engine`] is the one implementation today. Incoming frames are handed to
//! `crate::qp::{requester, responder, ud}` entry points, which a different engine (e.g. a
//! RoCEv2 one) would call the same way.

pub mod addr;
pub mod batch;
pub mod engine;
pub mod frame;
pub mod local;
pub mod peers;
pub mod ring;

use crate::qp::Qp;
use crate::sys::Result;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};

/// A reliable, ordered frame stream to one peer context.
pub trait Link: Send + Sync {
    /// Queues a whole frame; never blocks. Frames sent on a dead link are dropped.
    fn send(&self, frame: Vec<u8>);
    /// Sends one frame given as parts (header, then payload slices, e.g. straight from
    /// registered memory): written now as far as the socket takes it, the rest copied and
    /// queued. Never blocks.
    fn send_parts(&self, parts: &[&[u8]]);
    /// Bytes wait for the (connected) socket: the owner should hold further requests until
    /// the engine reports the link drained (`requester::on_drained`). While the connect is
    /// pending, frames simply queue.
    fn backlog(&self) -> bool;
    /// An accepted connection: the remote QP its `Hello` named. The local QP it is bound
    /// to may send its own requests back on it (one connection per QP pair instead of
    /// two, so a response and the next request share a `sendmsg`). Responses and requests
    /// are told apart by opcode; each side's requests stay in order.
    fn peer_qpn(&self) -> Option<u32>;
    /// Closes the stream (the engine then reports it down).
    fn close(&self);
    fn is_dead(&self) -> bool;
    /// The listening endpoint (of the accepting context) the stream was opened to: both
    /// ends of a stream see the same one, so both QPs of a pair that opened a stream each
    /// agree which of the two to keep (`requester::prefer_peer_link`).
    fn listener(&self) -> Option<SocketAddr>;
    /// The local QP's responder parked one of this link's requests (`park`: it waits for
    /// RTR or a receive) with `bytes` of payload, or no longer holds it. Over TCP a request
    /// may be neither dropped (nothing would retransmit it) nor buffered without limit, so
    /// the transport stops reading a link whose parked requests exceed a bound until they
    /// drain.
    fn parked(&self, bytes: usize, park: bool);
    /// More of this link's responses wait for the peer to read them than a requester that
    /// honours its limits can leave: the responder runs none of its parked requests until
    /// the transport resumes the link (`responder::resume`).
    fn congested(&self) -> bool;
    /// The QP starts transmitting on this link (it is RTS; `st` is its locked state): a
    /// link that needs the send side's attributes takes them now.
    fn bind_requester(&self, _st: &crate::qp::QpState) {}
    /// The local responder has no receive for `req` (a SEND or WRITE with immediate, with
    /// `payload`). A link whose peer retransmits what it is refused (RoCEv2) NAKs it RNR
    /// with the QP's `min_rnr_timer` and returns true: the responder then drops it and the
    /// link's later requests. False: it must wait in the responder (nothing over a stream
    /// would send it again).
    fn refuse_rnr(&self, _req: &frame::Header, _payload: &[u8], _min_rnr_timer: u8) -> bool {
        false
    }
    /// The peer process's shared window, when the link is a same-host stream to a
    /// process of our user that the kernel lets us reach (`qp::direct`).
    fn window(&self) -> Option<Arc<crate::core::window::Peer>> {
        None
    }
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
    /// One non-blocking progress pass on the calling thread (polling-driven progress):
    /// handles whatever is ready right now, never waits. True if anything was handled.
    fn progress(&self, ctx: &Arc<crate::core::context::Context>) -> bool;
    /// The application is about to block (armed a CQ): the progress thread must be
    /// waiting in `epoll_wait`, not sleeping because of earlier polling.
    fn kick(&self);
    /// Called by every `ibv_poll_cq`: sends responses a polling thread held back once they
    /// waited through a couple of polls (cheap when there are none).
    fn flush_held(&self);
    /// Reads every stream and ring link now, waiting for a thread that is reading one
    /// to finish: what peers had sent before this call has reached its QPs when it
    /// returns (up to a bounded number of frames per link).
    fn drain(&self, ctx: &Arc<crate::core::context::Context>);
    /// The context's RoCEv2 endpoint, if it has one.
    fn roce(&self) -> Option<&Arc<crate::roce::endpoint::Endpoint>> {
        None
    }
}

#[cfg(test)]
mod frame_tests;
