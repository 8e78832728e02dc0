//! One-sided operations done by the initiator, on the same host: an RDMA WRITE (RC or UC,
//! without immediate) or an RC RDMA READ to a peer process of our user copies its bytes
//! with one `process_vm_writev`/`readv` between the two registered buffers, where the
//! send queue is pumped (inside `ibv_post_send` when nothing is in flight before it), and
//! completes at once. The target's threads take no part: it may be busy, asleep or
//! stopped, as with a NIC.
//!
//! The peer's window (`core::window`) says which of its QPs and MRs allow what; the MR
//! stays pinned in it during the copy, so a deregistration waits for the copy and none
//! follows it. Only a request that passes every check goes this way; anything else (a
//! bad key, bounds, access, a QP not serving us, the kernel refusing `process_vm_*`) takes
//! the stream path, whose responder gives the error completion it always gave.
//!
//! Order: only the head of the send queue, with nothing in flight, runs here, so every
//! earlier request was executed by the responder first, and later ones leave after it.

use super::{Qp, QpState};
use crate::core::cq::wc;
use crate::core::mem;
use crate::core::window::{Peer, QP_READ, QP_WRITE};
use crate::net::frame::{decode_header, Op, F_IMM, QPN_MASK};
use crate::net::Link;
use crate::qp::requester::inline_parts;
use rdma_abi::verbs::*;

/// Runs the head WQE directly if it may; true: done (its completion is queued and it has
/// left the send queue).
pub fn run_head(qp: &Qp, st: &mut QpState, link: &dyn Link) -> bool {
    if st.sent != 0 || st.sq.is_empty() {
        return false;
    }
    let w = &st.sq[0];
    if w.fail.is_some() {
        return false;
    }
    let (h, write) = match (&w.gather, &w.frame) {
        (Some(h), _) if h.op == Op::Write && h.flags & F_IMM == 0 => (*h, true),
        (None, Some(f)) if w.rd_atomic && w.wc_opcode == IBV_WC_RDMA_READ => match decode_header(f) {
            Ok(h) if h.op == Op::ReadReq => (h, false),
            _ => return false,
        },
        _ => return false,
    };
    let len = w.len as usize;
    if len == 0 {
        return false;
    }
    let Some(peer) = link.window() else { return false };
    let dqpn = st.attr.dest_qp_num & QPN_MASK;
    let Some((flags, pd)) = peer.qp(dqpn, qp.qpn) else { return false };
    let t = Target { peer: &peer, pd, rkey: h.rkey, raddr: h.raddr, len };
    let done = if write {
        flags & QP_WRITE != 0 && write_to(qp, &t, &w.local, w.borrowed)
    } else {
        flags & QP_READ != 0 && read_from(qp, &t, &w.local)
    };
    if !done {
        return false;
    }
    let Some(w) = st.sq.pop_front() else { return false };
    if w.signaled {
        let mut c = wc(w.wr_id, IBV_WC_SUCCESS, w.wc_opcode, qp.qpn);
        c.byte_len = w.len;
        qp.send_cq.push(c, false);
    }
    true
}

fn iov(addr: usize, len: usize) -> libc::iovec {
    libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: len }
}

/// The peer's side of one operation: `len` bytes at `raddr` under `rkey`, in PD `pd` of
/// its QP.
struct Target<'a> {
    peer: &'a Peer,
    pd: u64,
    rkey: u32,
    raddr: u64,
    len: usize,
}

impl Target<'_> {
    /// Pins the MR and copies everything, to the peer (`write`) or from it; false when
    /// any check fails or the copy falls short (`process_vm_*` moves less than asked only
    /// when it meets an unmapped page; the stream path then repeats the whole request).
    fn copy(&self, local: &mut [libc::iovec], write: bool) -> bool {
        let need = if write { IBV_ACCESS_REMOTE_WRITE } else { IBV_ACCESS_REMOTE_READ };
        let Some(pin) = self.peer.pin(self.rkey, self.pd, self.raddr, self.len as u64, need) else { return false };
        let n = if write { self.peer.write(local, pin.addr, self.len) } else { self.peer.read(local, pin.addr, self.len) };
        n == Some(self.len)
    }
}

// The local key check (read lock of the key table) comes before the peer's pin: a
// deregistration in this process holds the write lock while it waits for pins.
fn write_to(qp: &Qp, t: &Target, sges: &[ibv_sge], inline: bool) -> bool {
    let run = |parts: &[&[u8]]| t.copy(&mut parts.iter().map(|p| iov(p.as_ptr() as usize, p.len())).collect::<Vec<_>>(), true);
    if inline {
        // SAFETY: a borrowed WQE is pumped only inside its ibv_post_send, while the
        // application's inline buffers are readable.
        return run(&unsafe { inline_parts(sges) });
    }
    mem::with_gather(qp.pd.id, sges, run).unwrap_or(false)
}

fn read_from(qp: &Qp, t: &Target, sges: &[ibv_sge]) -> bool {
    mem::with_scatter(qp.pd.id, sges, t.len, |parts| t.copy(&mut parts.iter().map(|&(a, n)| iov(a, n)).collect::<Vec<_>>(), false)).unwrap_or(false)
}
