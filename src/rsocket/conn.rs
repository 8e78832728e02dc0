//! The data path of a connected stream rsocket (rsocket.md §4): its QP, CQ
//! and three registered buffers, the send ring, the receive buffer halves,
//! credits and the messages carried as immediate data.
//!
//! Buffers: `sbuf` (send ring + a 64-byte control area), `rbuf` (two halves
//! the peer writes into; iWARP adds 4-byte message slots after it), `tbuf`
//! (the peer writes buffer adverts, `rs_sge`, into its first two 16-byte
//! slots and iomap entries after them).

use super::cm::{self, Id};
use super::config::*;
use super::iov::Gather;
use super::opts::Opts;
use super::verbs::*;
use super::wire::*;
use crate::sys::{Errno, Result};
use rdma_abi::verbs::*;
use std::collections::VecDeque;

const WR_RECV: u64 = 1 << 63;
const POOL_SHIFT: u64 = 60;
pub const POOL_DATA: u64 = 0;
pub const POOL_CTRL: u64 = 1;
const BYTES_SHIFT: u64 = 32;
const BYTES_MASK: u64 = 0x0FFF_FFFF;

/// Largest message a send makes; sends start at 2 KiB and double up to it.
pub const RS_MAX_TRANSFER: usize = 65536;
pub const RS_OLAP_START_SIZE: usize = 2048;
/// An inline payload split across the caller's buffers is gathered on the stack up to
/// this size (a contiguous one goes from the caller's buffer as it is).
const STACK_INLINE: usize = 512;
/// Completions taken per CQ poll.
const WC_BATCH: usize = 32;
/// The SGEs of one write: at most two (a staged copy wraps around the send ring
/// once). Held inline: a send must not allocate.
pub struct Sges {
    s: [ibv_sge; 2],
    n: usize,
}

impl Sges {
    fn one(s: ibv_sge) -> Self {
        Sges { s: [s, ibv_sge { addr: 0, length: 0, lkey: 0 }], n: 1 }
    }

    fn push(&mut self, s: ibv_sge) {
        self.s[self.n] = s;
        self.n += 1;
    }

    fn as_mut(&mut self) -> &mut [ibv_sge] {
        &mut self.s[..self.n]
    }
}

/// Stack room for an inline payload gathered from split buffers (not zeroed: only
/// the bytes copied in are read).
type Stack = std::mem::MaybeUninit<[u8; STACK_INLINE]>;

const CTRL_AREA: usize = RS_QP_CTRL_SIZE as usize * SGE_LEN;

/// A send's id: its pool and ring bytes (returned when it completes); `post` puts in the
/// low 32 bits the unsignaled data requests its completion also stands for.
fn wr_id(pool: u64, bytes: usize) -> u64 {
    (pool << POOL_SHIFT) | (((bytes as u64) & BYTES_MASK) << BYTES_SHIFT)
}
const QUIET_MASK: u64 = 0xFFFF_FFFF;
/// Most data requests posted unsignaled in a row: each saves the device a completion
/// and us a CQ entry, and a run never holds more than half the data credits hostage.
const QUIET_RUN: u32 = 15;

/// A work request for `sges` to `raddr/rkey`, inline when asked and there are bytes
/// (the caller fills in id, opcode and immediate data).
#[inline(always)]
fn write_wr(sges: &mut [ibv_sge], inline: bool, raddr: u64, rkey: u32) -> ibv_send_wr {
    // SAFETY: all-zero is a valid work request.
    let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
    wr.sg_list = if sges.is_empty() { std::ptr::null_mut() } else { sges.as_mut_ptr() };
    wr.num_sge = sges.len() as i32;
    wr.send_flags = if inline && sges.iter().any(|s| s.length > 0) { IBV_SEND_INLINE } else { 0 };
    wr.wr.rdma = ibv_send_wr_rdma { remote_addr: raddr, rkey };
    wr
}

/// What one pass over the CQ found.
#[derive(Default, Debug)]
pub struct Found {
    pub any: bool,
    pub disconnect: bool,
    pub shutdown: bool,
    pub send_error: bool,
    /// A receive completed in error: the QP is in the error state.
    pub recv_flush: bool,
}

/// A mapping made by riomap.
pub struct IoMapping {
    pub mr: Mr,
    pub addr: u64,
    pub len: usize,
    pub offset: u64,
    /// Slot in the peer's table; None for local-only (PROT_NONE) mappings.
    pub index: Option<usize>,
}

pub struct Conn {
    pub cq: Cq,
    pub qp: *mut ibv_qp,
    pub sbuf: RegBuf,
    pub rbuf: RegBuf,
    pub tbuf: RegBuf,
    pub sq_size: u32,
    pub rq_size: u32,
    pub sq_inline: u32,
    pub sbuf_size: usize,
    pub rbuf_size: usize,
    /// iWARP: 32-bit messages travel as SENDs (no immediate data).
    pub msg_send: bool,
    /// An iWARP responder sends nothing of its own (credit adverts) until the
    /// initiator's first message arrives: MPA (RFC 5044) expects the initiator
    /// to send the first frame, and siw misparses one that lands right behind
    /// its MPA reply (TERMINATE, the initiator's connect fails with EINVAL).
    pub mute: bool,
    /// Sends on an idle wire start small and grow (rsocket.md §4), so the first bytes
    /// travel while the rest is copied; not on software devices (`is_software`).
    pub ramp: bool,
    /// The peer's byte order differs: adverts written to it are swapped.
    pub swap: bool,
    /// Entries of our own peer-visible iomap table (in tbuf).
    pub target_iomap_len: usize,

    // send side
    pub sseq_no: u16,
    pub sseq_comp: u16,
    pub data_avail: u32,
    /// Data requests posted unsignaled since the last signaled one (their credits come
    /// back with its completion: RC completes in order).
    quiet: u32,
    quiet_max: u32,
    pub ctrl_avail: u32,
    pub ctrl_slot: usize,
    pub sbuf_avail: usize,
    pub spos: usize,
    pub target_sge: usize,
    /// The advert being filled (a private copy: the slot it came from is
    /// cleared when taken, so the peer's next advert there shows as new).
    cur: Option<Sge>,
    /// The peer's first receive-buffer half (data_buf of its connection data):
    /// every advert names one of its two halves, always in the same slot.
    peer_buf: Sge,
    pub remote_sgl: Sge,
    pub remote_iomap: Sge,
    pub remote_sge: usize,

    // receive side
    pub rseq_no: u16,
    pub rseq_comp: u16,
    pub roff: usize,
    pub rbuf_avail: usize,
    pub rfree: usize,
    /// Remaining bytes of each received data message, oldest first.
    pub rmsg: VecDeque<u32>,
    recv_posted: u64,
    /// Receives consumed by completions and not posted again yet (`repost`).
    repost_due: u32,

    pub iomaps: Vec<IoMapping>,
    pub iomap_pending: VecDeque<usize>,
}

// SAFETY: raw verbs handles and buffers owned by one rsocket; every use is
// serialized by that rsocket's lock.
unsafe impl Send for Conn {}

impl Conn {
    /// Creates the QP, CQ and buffers on a resolved (or requested) id and
    /// posts the receives. The id keeps the QP; `destroy` releases the rest.
    /// A connection sized by the socket's options `z` (queue and buffer sizes, inline, iomap).
    pub fn create(id: &Id, z: &Opts) -> Result<Conn> {
        let verbs = id.verbs();
        if verbs.is_null() {
            return Err(Errno::EINVAL);
        }
        let max = match max_qp_wr(verbs) {
            0 => RS_QP_MAX_SIZE,
            m => m.min(RS_QP_MAX_SIZE),
        };
        let clamp = |v: u32| v.max(RS_QP_MIN_SIZE).min(max.max(1));
        let (sq, rq) = (clamp(z.sq_size), clamp(z.rq_size));
        let msg_send = is_iwarp(verbs) || std::env::var_os("RDMACM_RS_RSOCKET_MSG_SEND").is_some_and(|v| v == "1");
        let mut inline = z.sq_inline.min(RS_QP_MAX_SIZE);
        if !z.inline_asked && crate::backend::kind() == crate::backend::Kind::Soft {
            // Inline costs softverbs nothing and spares the copy into the send buffer
            // (softverbs grants what is asked, up to 64 KiB).
            inline = RS_MAX_TRANSFER as u32;
        }
        if msg_send && inline < 4 {
            inline = 4;
        }
        let cq = Cq::new(verbs, sq + rq, id.raw().cast())?;
        // SAFETY: all-zero is a valid init attribute block.
        let mut attr: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        attr.send_cq = cq.cq;
        attr.recv_cq = cq.cq;
        attr.cap =
            ibv_qp_cap { max_send_wr: sq, max_recv_wr: rq, max_send_sge: 2, max_recv_sge: 1, max_inline_data: inline };
        attr.qp_type = IBV_QPT_RC;
        // Upstream signals every send; we leave short runs of small data messages
        // unsignaled (`post`).
        attr.sq_sig_all = 0;
        // SAFETY: our id; the library PD (NULL asks for the id's); attr lives across the call.
        if let Err(e) = cm::check(unsafe { cm::rdma_create_qp(id.raw(), std::ptr::null_mut(), &mut attr) }) {
            cq.destroy();
            return Err(e);
        }
        let undo = |cq: Cq, e: Errno| -> Result<Conn> {
            // SAFETY: the QP we just made on our id.
            unsafe { cm::rdma_destroy_qp(id.raw()) };
            cq.destroy();
            Err(e)
        };
        // The QP's actual inline size, as upstream.
        let sq_inline = attr.cap.max_inline_data.clamp(if msg_send { 4 } else { 0 }, RS_MAX_TRANSFER as u32);
        let pd = id.pd();
        let rbuf_size = z.rbuf_size & !1;
        let local = IBV_ACCESS_LOCAL_WRITE;
        let remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
        let sbuf = match RegBuf::new(pd, z.sbuf_size + CTRL_AREA, local) {
            Ok(b) => b,
            Err(e) => return undo(cq, e),
        };
        let rbuf = match RegBuf::new(pd, rbuf_size + if msg_send { rq as usize * 4 } else { 0 }, remote) {
            Ok(b) => b,
            Err(e) => return undo(cq, e),
        };
        let iomap_len = z.iomap_size as usize;
        let tbuf = match RegBuf::new(pd, RS_SGL_SIZE * SGE_LEN + iomap_len * IOMAP_LEN, remote) {
            Ok(b) => b,
            Err(e) => return undo(cq, e),
        };
        let mut c = Conn {
            cq,
            qp: id.qp(),
            sbuf,
            rbuf,
            tbuf,
            sq_size: sq,
            rq_size: rq,
            sq_inline,
            sbuf_size: z.sbuf_size,
            rbuf_size,
            msg_send,
            mute: false,
            ramp: !is_software(verbs),
            swap: false,
            target_iomap_len: iomap_len,
            sseq_no: 0,
            sseq_comp: 0,
            data_avail: sq - RS_QP_CTRL_SIZE,
            quiet: 0,
            quiet_max: ((sq - RS_QP_CTRL_SIZE) / 2).min(QUIET_RUN),
            ctrl_avail: RS_QP_CTRL_SIZE,
            ctrl_slot: 0,
            sbuf_avail: z.sbuf_size,
            spos: 0,
            target_sge: 0,
            cur: None,
            peer_buf: Sge::default(),
            remote_sgl: Sge::default(),
            remote_iomap: Sge::default(),
            remote_sge: 0,
            rseq_no: 0,
            rseq_comp: (rq / 2) as u16,
            roff: 0,
            rbuf_avail: rbuf_size / 2,
            rfree: rbuf_size / 2,
            rmsg: VecDeque::with_capacity(rq as usize + 1),
            recv_posted: 0,
            repost_due: 0,
            iomaps: Vec::new(),
            iomap_pending: VecDeque::new(),
        };
        for _ in 0..rq {
            if let Err(e) = c.post_recv() {
                let Conn { cq, .. } = c;
                return undo(cq, e);
            }
        }
        Ok(c)
    }

    /// Releases what `create` made (the QP first, through the id).
    pub fn destroy(self, id: &Id) {
        if !id.qp().is_null() {
            // SAFETY: our id's QP, destroyed once.
            unsafe { cm::rdma_destroy_qp(id.raw()) };
        }
        let Conn { cq, sbuf, rbuf, tbuf, iomaps, .. } = self;
        drop(iomaps);
        drop((sbuf, rbuf, tbuf));
        cq.destroy();
    }

    /// Our half of the connection data.
    pub fn conn_data(&self) -> ConnData {
        ConnData {
            version: CONN_VERSION,
            flags: CONN_FLAG_IOMAP | if HOST_IS_NET { CONN_FLAG_NET } else { 0 },
            credits: self.rq_size as u16,
            target_iomap_size: scale_encode(self.target_iomap_len as u16),
            target_sgl: Sge { addr: self.tbuf.addr(), key: self.tbuf.mr.rkey(), length: RS_SGL_SIZE as u32 },
            data_buf: Sge { addr: self.rbuf.addr(), key: self.rbuf.mr.rkey(), length: (self.rbuf_size / 2) as u32 },
        }
    }

    /// Records the peer's half: where its adverts go, its first buffer, its credits.
    pub fn save_peer(&mut self, p: &ConnData) {
        self.remote_sgl = p.target_sgl;
        self.remote_sge = 1;
        self.swap = p.needs_swap();
        if p.flags & CONN_FLAG_IOMAP != 0 {
            self.remote_iomap = Sge {
                addr: p.target_sgl.addr + SGE_LEN as u64 * p.target_sgl.length as u64,
                key: p.target_sgl.key,
                length: scale_decode(p.target_iomap_size) as u32,
            };
        }
        // The first half is advertised by the connection data itself (slot 0).
        self.peer_buf = p.data_buf;
        self.cur = (p.data_buf.length > 0).then_some(p.data_buf);
        self.target_sge = 0;
        self.sseq_comp = p.credits;
    }

    fn slot_ptr(&self, i: usize) -> *mut [u8; SGE_LEN] {
        // SAFETY: tbuf holds RS_SGL_SIZE slots of SGE_LEN bytes first.
        unsafe { self.tbuf.ptr().add(i * SGE_LEN) as *mut [u8; SGE_LEN] }
    }

    /// A fresh advert in target slot `i`, if the peer has completely written
    /// one. The peer RDMA-writes the 16 bytes while we may be reading them: a
    /// torn read (say the new length with the old, exhausted address) must
    /// never be taken. Slot `i` only ever describes half `i` of the peer's
    /// receive buffer, so anything but exactly that half is "not yet".
    #[inline]
    fn fresh_advert(&self, i: usize) -> Option<Sge> {
        // SAFETY: inside tbuf; volatile because the device writes it.
        let s = Sge::from_mem(&unsafe { std::ptr::read_volatile(self.slot_ptr(i)) });
        let b = self.peer_buf;
        let want = Sge { addr: b.addr + i as u64 * b.length as u64, key: b.key, length: b.length };
        (b.length > 0 && s == want).then_some(s)
    }

    /// Whether a target buffer is there to write into (without taking it).
    fn target_ready(&self) -> bool {
        self.cur.is_some_and(|c| c.length > 0) || self.fresh_advert(self.target_sge).is_some()
    }

    /// The advert to write into now, taking a fresh one from its slot if the
    /// current one is used up.
    #[inline]
    fn take_target(&mut self) -> Option<Sge> {
        if let Some(c) = self.cur.filter(|c| c.length > 0) {
            return Some(c);
        }
        let s = self.fresh_advert(self.target_sge)?;
        // SAFETY: inside tbuf. The peer writes this slot again only after we
        // filled the half it names, which starts after this.
        unsafe { std::ptr::write_volatile(self.slot_ptr(self.target_sge), [0u8; SGE_LEN]) };
        self.cur = Some(s);
        Some(s)
    }

    /// The entry `i` of our iomap table (written by the peer).
    pub fn target_iomap(&self, i: usize) -> IoMapEntry {
        // SAFETY: inside tbuf (i < target_iomap_len).
        let p = unsafe { self.tbuf.ptr().add(RS_SGL_SIZE * SGE_LEN + i * IOMAP_LEN) as *const [u8; IOMAP_LEN] };
        // SAFETY: as above; volatile because the device writes it.
        IoMapEntry::from_mem(&unsafe { std::ptr::read_volatile(p) })
    }

    fn post_recv(&mut self) -> Result<()> {
        let slot = (self.recv_posted % self.rq_size as u64) as usize;
        let mut sge = ibv_sge {
            // SAFETY: message slots follow the receive buffer (iWARP only).
            addr: self.rbuf.addr() + (self.rbuf_size + slot * 4) as u64,
            length: 4,
            lkey: self.rbuf.mr.lkey(),
        };
        let mut wr = ibv_recv_wr {
            wr_id: WR_RECV | slot as u64,
            next: std::ptr::null_mut(),
            sg_list: if self.msg_send { &mut sge } else { std::ptr::null_mut() },
            num_sge: if self.msg_send { 1 } else { 0 },
        };
        post_recv(self.qp, &mut wr)?;
        self.recv_posted += 1;
        Ok(())
    }

    /// Send work requests one message takes.
    fn wrs(&self) -> u32 {
        if self.msg_send {
            2
        } else {
            1
        }
    }

    /// Posts an RDMA write carrying `m` (as immediate data, or as a
    /// following SEND on iWARP) to `raddr/rkey`. The immediate-data case is
    /// every data message's path: inline in its callers.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn post_msg_write(
        &mut self,
        pool: u64,
        sges: &mut [ibv_sge],
        inline: bool,
        bytes: usize,
        m: u32,
        raddr: u64,
        rkey: u32,
    ) -> Result<()> {
        let mut wr = write_wr(sges, inline, raddr, rkey);
        if self.msg_send {
            let len = sges.iter().map(|s| s.length as usize).sum();
            return self.post_msg_send(wr, len, pool, bytes, m);
        }
        wr.wr_id = wr_id(pool, bytes);
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.imm_data = m.to_be();
        self.post(&mut wr, pool == POOL_DATA && bytes == 0)
    }

    /// `post_msg_write` on iWARP: `wr` (a write of `len` bytes) if it carries any,
    /// then `m` as a SEND.
    #[inline(never)]
    fn post_msg_send(&mut self, mut wr: ibv_send_wr, len: usize, pool: u64, bytes: usize, m: u32) -> Result<()> {
        if len > 0 {
            wr.wr_id = wr_id(pool, bytes);
            wr.opcode = IBV_WR_RDMA_WRITE;
            self.post(&mut wr, false)?;
        }
        let word = m.to_ne_bytes();
        let mut s = [ibv_sge { addr: word.as_ptr() as u64, length: 4, lkey: 0 }];
        let mut send = write_wr(&mut s, true, 0, 0);
        send.wr_id = wr_id(pool, if len > 0 { 0 } else { bytes });
        send.opcode = IBV_WR_SEND;
        let r = self.post(&mut send, false);
        if r.is_err() && len > 0 {
            // The WRITE is posted and gives its ring bytes back when it completes, so the
            // caller must count the message as sent; without its SEND the peer never sees
            // it: the connection is broken (its flushed completions report the error).
            super::verbs::qp_to_error(self.qp);
            return Ok(());
        }
        r
    }

    /// Posts `wr`: unsignaled when `quiet` (a data message with no ring bytes to give
    /// back) and the run is short enough, else signaled and carrying the run.
    #[inline(always)]
    fn post(&mut self, wr: &mut ibv_send_wr, quiet: bool) -> Result<()> {
        if quiet && self.quiet < self.quiet_max {
            post_send(self.qp, wr)?;
            self.quiet += 1;
            return Ok(());
        }
        wr.send_flags |= IBV_SEND_SIGNALED;
        wr.wr_id |= self.quiet as u64;
        post_send(self.qp, wr)?;
        self.quiet = 0;
        Ok(())
    }

    /// Before waiting for all sends to finish: a run of unsignaled data messages needs a
    /// signaled request after it (an empty write, as a keepalive) to report it done. One
    /// that cannot be posted (no control credit, a broken QP) leaves the run counted as
    /// done: the wait must end, and a broken QP has lost it anyway.
    pub fn fence(&mut self) {
        if self.quiet == 0 || (self.ctrl_ok(1) && self.send_ctrl(CTRL_KEEPALIVE).is_ok()) {
            return;
        }
        self.data_avail += self.quiet;
        self.quiet = 0;
    }

    pub fn quiet_pending(&self) -> bool {
        self.quiet > 0
    }

    /// Whether a data message can go now (rsocket.md §4 "Send").
    #[inline]
    pub fn can_send(&self) -> bool {
        self.send_resources() && self.target_ready()
    }

    /// `can_send` but for the target buffer: a send credit, ring room, a peer credit.
    #[inline]
    fn send_resources(&self) -> bool {
        self.data_avail >= self.wrs()
            && self.sbuf_avail >= RS_SNDLOWAT.min(self.sbuf_size)
            && self.sseq_no != self.sseq_comp
    }

    /// Whether riowrite (no credit, no advert needed) can post now.
    pub fn can_write(&self) -> bool {
        self.data_avail >= 1 && self.sbuf_avail >= RS_SNDLOWAT.min(self.sbuf_size)
    }

    pub fn ctrl_ok(&self, n: u32) -> bool {
        self.ctrl_avail >= n
    }

    /// Size of the first message of a send. The small first chunks of the ramp let
    /// the wire start while the rest is copied; with writes already in flight the
    /// wire is busy anyway, and every extra message costs the peer a completion and
    /// an acknowledgement.
    pub fn first_chunk(&self) -> usize {
        // Unsignaled messages are small, inline, and long gone from the wire in practice.
        let in_flight = self.data_avail + self.quiet < self.sq_size - RS_QP_CTRL_SIZE;
        if self.ramp && !in_flight {
            RS_OLAP_START_SIZE
        } else {
            RS_MAX_TRANSFER
        }
    }

    pub fn all_sends_done(&self) -> bool {
        self.data_avail == self.sq_size - RS_QP_CTRL_SIZE && self.ctrl_avail == RS_QP_CTRL_SIZE
    }

    /// Whether the next `len` bytes of `src` go inline: from the caller's buffer when
    /// contiguous, else gathered on the stack.
    fn inline_ok(&self, src: &Gather, len: usize) -> bool {
        len <= self.sq_inline as usize && (len <= STACK_INLINE || src.contiguous(len).is_some())
    }

    /// Stages up to `len` bytes of `src` for a write: inline (in place, or from a
    /// stack copy), or copied into the send ring (two SGEs when it wraps). Returns the
    /// SGEs, whether they are inline, and the ring bytes used.
    ///
    /// # Safety
    /// `stack` and `src`'s buffers outlive the returned SGEs' use; `src` segments are
    /// readable.
    #[inline(always)]
    unsafe fn stage(
        &mut self,
        src: &mut Gather,
        len: usize,
        stack: &mut Stack,
    ) -> (Sges, bool, usize) {
        if len <= self.sq_inline as usize {
            let addr = match src.take_contiguous(len) {
                Some(p) => Some(p as u64),
                None if len <= STACK_INLINE => {
                    // SAFETY: the stack holds STACK_INLINE bytes.
                    unsafe { src.copy_to(stack.as_mut_ptr().cast(), len) };
                    Some(stack.as_ptr() as u64)
                }
                None => None,
            };
            if let Some(addr) = addr {
                return (Sges::one(ibv_sge { addr, length: len as u32, lkey: 0 }), true, 0);
            }
        }
        let lkey = self.sbuf.mr.lkey();
        let first = len.min(self.sbuf_size - self.spos);
        // SAFETY: spos + first ≤ sbuf_size, inside sbuf.
        unsafe { src.copy_to(self.sbuf.ptr().add(self.spos), first) };
        let mut sges = Sges::one(ibv_sge { addr: self.sbuf.addr() + self.spos as u64, length: first as u32, lkey });
        if len > first {
            // SAFETY: the wrapped part starts at the ring's beginning; len - first ≤ free space.
            unsafe { src.copy_to(self.sbuf.ptr(), len - first) };
            sges.push(ibv_sge { addr: self.sbuf.addr(), length: (len - first) as u32, lkey });
        }
        self.spos = (self.spos + len) % self.sbuf_size;
        self.sbuf_avail -= len;
        (sges, false, len)
    }

    /// Gives back ring bytes staged for a write that could not be posted.
    fn unstage(&mut self, bytes: usize) {
        if bytes > 0 {
            self.sbuf_avail += bytes;
            self.spos = (self.spos + self.sbuf_size - bytes) % self.sbuf_size;
        }
    }

    /// Sends one data message of at most `max` bytes from `src` (the caller
    /// checked `can_send`). Returns the bytes sent.
    #[inline(always)]
    pub fn send_data(&mut self, src: &mut Gather, max: usize) -> Result<usize> {
        let Some(t) = self.take_target() else { return Ok(0) };
        self.send_data_to(t, src, max)
    }

    /// `send_data` into `t`, the target `take_target` gave.
    #[inline(always)]
    pub fn send_data_to(&mut self, t: Sge, src: &mut Gather, max: usize) -> Result<usize> {
        let len = max.min(self.sbuf_avail).min(t.length as usize).min(src.left());
        if len == 0 {
            return Ok(0);
        }
        let mut stack = Stack::uninit();
        // SAFETY: stack lives until the post below returns (inline data is copied at post).
        let (mut sges, inline, bytes) = unsafe { self.stage(src, len, &mut stack) };
        let m = msg(OP_DATA, len as u32);
        let r = self.post_msg_write(POOL_DATA, sges.as_mut(), inline, bytes, m, t.addr, t.key);
        if let Err(e) = r {
            self.unstage(bytes);
            return Err(e);
        }
        let rest = Sge { addr: t.addr + len as u64, key: t.key, length: t.length - len as u32 };
        self.cur = Some(rest);
        if rest.length == 0 {
            self.cur = None;
            self.target_sge = (self.target_sge + 1) % RS_SGL_SIZE;
        }
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.data_avail -= self.wrs();
        // Behind the message's doorbell now: the receives the last CQ pass consumed.
        // A failure stays due for the next CQ pass, which reports it.
        if self.repost_due > 0 {
            let _ = self.repost();
        }
        Ok(len)
    }

    /// Plain RDMA write of at most `max` bytes from `src` to `raddr/rkey`
    /// (riowrite; no message, no credit). `lkey` set: `src` is a local
    /// iomap and goes without a copy.
    pub fn write_plain(
        &mut self,
        src: &mut Gather,
        max: usize,
        raddr: u64,
        rkey: u32,
        lkey: Option<u32>,
    ) -> Result<usize> {
        let mut len = max.min(src.left());
        let zero_copy = match lkey {
            Some(k) if len > self.sq_inline as usize => src.contiguous(len).map(|p| (p, k)),
            _ => None,
        };
        if zero_copy.is_none() && !self.inline_ok(src, len) {
            len = len.min(self.sbuf_avail);
        }
        if len == 0 {
            return Ok(0);
        }
        let mut stack = Stack::uninit();
        let (mut sges, inline, bytes) = match zero_copy {
            Some((p, k)) => {
                src.skip(len);
                (Sges::one(ibv_sge { addr: p as u64, length: len as u32, lkey: k }), false, 0)
            }
            // SAFETY: stack lives until the post below returns.
            None => unsafe { self.stage(src, len, &mut stack) },
        };
        let mut wr = write_wr(sges.as_mut(), inline, raddr, rkey);
        wr.wr_id = wr_id(POOL_DATA, bytes);
        wr.opcode = IBV_WR_RDMA_WRITE;
        if let Err(e) = self.post(&mut wr, false) {
            self.unstage(bytes);
            return Err(e);
        }
        self.data_avail -= 1;
        Ok(len)
    }

    /// Writes `data` (an advert: 16 or 24 bytes) to the peer with message `m`.
    fn post_advert(&mut self, pool: u64, data: &[u8], m: u32, raddr: u64, rkey: u32) -> Result<()> {
        if self.sq_inline as usize >= data.len() {
            let mut s = [ibv_sge { addr: data.as_ptr() as u64, length: data.len() as u32, lkey: 0 }];
            return self.post_msg_write(pool, &mut s, true, 0, m, raddr, rkey);
        }
        if pool == POOL_CTRL {
            // The control area after the ring: one 16-byte slot per control credit.
            let off = self.sbuf_size + self.ctrl_slot * SGE_LEN;
            self.ctrl_slot = (self.ctrl_slot + 1) % RS_QP_CTRL_SIZE as usize;
            // SAFETY: off + 16 ≤ sbuf_size + CTRL_AREA; data is an SGE (16 bytes).
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.sbuf.ptr().add(off), data.len().min(SGE_LEN)) };
            let mut s = [ibv_sge {
                addr: self.sbuf.addr() + off as u64,
                length: data.len().min(SGE_LEN) as u32,
                lkey: self.sbuf.mr.lkey(),
            }];
            return self.post_msg_write(pool, &mut s, false, 0, m, raddr, rkey);
        }
        let mut g = Gather::new(super::iov::Segs::One([super::iov::Seg { ptr: data.as_ptr() as *mut u8, len: data.len() }]));
        let mut stack = Stack::uninit();
        // SAFETY: stack lives until the post returns; `data` is readable.
        let (mut sges, inline, bytes) = unsafe { self.stage(&mut g, data.len(), &mut stack) };
        let r = self.post_msg_write(pool, sges.as_mut(), inline, bytes, m, raddr, rkey);
        if r.is_err() {
            self.unstage(bytes);
        }
        r
    }

    /// Sends a control message (0 bytes: DISCONNECT, SHUTDOWN) or, for
    /// KEEPALIVE, a 0-byte RDMA write with no message.
    pub fn send_ctrl(&mut self, ctrl: u32) -> Result<()> {
        let m = msg(OP_CTRL, ctrl);
        if ctrl == CTRL_KEEPALIVE {
            let mut wr = write_wr(&mut [], false, 0, 0);
            wr.wr_id = wr_id(POOL_CTRL, 0);
            wr.opcode = IBV_WR_RDMA_WRITE;
            self.post(&mut wr, false)?;
            self.ctrl_avail -= 1;
            return Ok(());
        }
        self.post_msg_write(POOL_CTRL, &mut [], false, 0, m, 0, 0)?;
        self.ctrl_avail -= 1;
        Ok(())
    }

    /// Returns receive space and credits to the peer when due (rsocket.md §4
    /// "Credit/buffer return"). `open`: the connection may still carry messages.
    #[inline]
    pub fn update_credits(&mut self, open: bool) {
        // Runs after every CQ poll (busy loops included): the common "nothing due" stays inline.
        let half = self.rbuf_size / 2;
        if open && !self.mute && (self.rbuf_avail >= half || (self.rseq_no.wrapping_sub(self.rseq_comp) as i16) >= 0) {
            self.send_credits();
        }
    }

    #[inline(never)]
    fn send_credits(&mut self) {
        let half = self.rbuf_size / 2;
        let advert = self.rbuf_avail >= half;
        let need = if advert && self.msg_send { 2 } else { 1 };
        if !self.ctrl_ok(need) || self.remote_sgl.length == 0 || self.repost().is_err() {
            return;
        }
        let credit = msg(OP_SGL, self.rseq_no as u32 + self.rq_size);
        let r = if advert {
            let s = Sge { addr: self.rbuf.addr() + self.rfree as u64, key: self.rbuf.mr.rkey(), length: half as u32 };
            let bytes = s.to_mem(self.swap);
            let raddr = self.remote_sgl.addr + (self.remote_sge * SGE_LEN) as u64;
            let rkey = self.remote_sgl.key;
            self.post_advert(POOL_CTRL, &bytes, credit, raddr, rkey)
        } else {
            self.post_msg_write(POOL_CTRL, &mut [], false, 0, credit, 0, 0)
        };
        if r.is_err() {
            return;
        }
        self.ctrl_avail -= need;
        self.rseq_comp = self.rseq_no.wrapping_add((self.rq_size / 2) as u16);
        if advert {
            self.rbuf_avail -= half;
            self.rfree = (self.rfree + half) % self.rbuf_size;
            self.remote_sge = (self.remote_sge + 1) % (self.remote_sgl.length.max(1) as usize);
        }
    }

    /// Sends queued iomap entries (each takes a data credit, as upstream's do).
    /// Stops when resources run out; returns whether all went.
    pub fn send_iomaps(&mut self) -> Result<bool> {
        while let Some(&index) = self.iomap_pending.front() {
            let Some(m) = self.iomaps.iter().find(|m| m.index == Some(index)) else {
                self.iomap_pending.pop_front();
                continue;
            };
            if !self.can_send() {
                return Ok(false);
            }
            let entry =
                IoMapEntry { offset: m.offset, sge: Sge { addr: m.addr, key: m.mr.rkey(), length: m.len as u32 } };
            let bytes = entry.to_mem(self.swap);
            let raddr = self.remote_iomap.addr + (index * IOMAP_LEN) as u64;
            let rkey = self.remote_iomap.key;
            self.post_advert(POOL_DATA, &bytes, msg(OP_IOMAP_SGL, index as u32), raddr, rkey)?;
            self.sseq_no = self.sseq_no.wrapping_add(1);
            self.data_avail -= self.wrs();
            self.iomap_pending.pop_front();
        }
        Ok(true)
    }

    /// Polls the CQ dry: queues received data, applies credits and control
    /// messages, returns send resources (receives are posted again by `repost`).
    #[inline]
    pub fn process_cq(&mut self) -> Result<Found> {
        let lost = self.repost_due > 0 && self.repost_lost();
        // Busy loops poll an empty CQ constantly: that case stays inline.
        let mut wcs = [std::mem::MaybeUninit::<ibv_wc>::uninit(); WC_BATCH];
        let got = self.cq.poll(&mut wcs)?;
        if got.is_empty() {
            return Ok(Found { any: lost, send_error: lost, ..Found::default() });
        }
        let mut f = self.process_wcs(got)?;
        f.send_error |= lost;
        Ok(f)
    }

    /// Posts the receives completions consumed (`repost_due`). Deferred from the
    /// CQ pass that found them to the next data message's post or the next CQ pass
    /// (up to a quarter of the queue): a ping-pong's receive then returns its data
    /// and the answer goes first. For the peer a receive not posted again is one
    /// whose message is not processed yet, which it must allow for anyway: its
    /// data is bound by our credits, and `send_credits` first posts these, so a
    /// credit never names a receive that is not posted.
    #[inline(never)]
    fn repost(&mut self) -> Result<()> {
        while self.repost_due > 0 {
            self.post_recv()?;
            self.repost_due -= 1;
        }
        Ok(())
    }

    /// `repost` for a CQ pass: whether it failed. A receive that cannot be posted
    /// again breaks the connection, as a send that cannot be posted does; the
    /// rest are given up (the pass reports the error once).
    fn repost_lost(&mut self) -> bool {
        let lost = self.repost().is_err();
        if lost {
            self.repost_due = 0;
        }
        lost
    }

    /// Handles `first` (a non-empty poll) and what later polls return.
    #[inline(never)]
    fn process_wcs(&mut self, first: &[ibv_wc]) -> Result<Found> {
        let mut f = Found { any: true, ..Found::default() };
        let mut more = [std::mem::MaybeUninit::<ibv_wc>::uninit(); WC_BATCH];
        let mut got = first;
        let mut reposts = 0;
        loop {
            for wc in got {
                if wc.wr_id & WR_RECV != 0 {
                    if wc.status != IBV_WC_SUCCESS {
                        f.recv_flush = true;
                        continue;
                    }
                    reposts += 1;
                    self.mute = false;
                    let m = if wc.wc_flags & IBV_WC_WITH_IMM != 0 {
                        u32::from_be(wc.imm_data)
                    } else {
                        let slot = (wc.wr_id & 0xFFFF_FFFF) as usize;
                        // SAFETY: message slot `slot` after the receive buffer (iWARP).
                        unsafe { std::ptr::read_volatile(self.rbuf.ptr().add(self.rbuf_size + slot * 4) as *const u32) }
                    };
                    match msg_op(m) {
                        OP_SGL => self.sseq_comp = msg_data(m) as u16,
                        OP_IOMAP_SGL | OP_WRITE => {}
                        OP_CTRL => match msg_data(m) {
                            CTRL_DISCONNECT => f.disconnect = true,
                            CTRL_SHUTDOWN => f.shutdown = true,
                            _ => {}
                        },
                        _ => self.rmsg.push_back(msg_data(m)),
                    }
                } else {
                    match (wc.wr_id >> POOL_SHIFT) & 7 {
                        POOL_CTRL => self.ctrl_avail += 1,
                        _ => self.data_avail += 1,
                    }
                    self.data_avail += (wc.wr_id & QUIET_MASK) as u32;
                    self.sbuf_avail += ((wc.wr_id >> BYTES_SHIFT) & BYTES_MASK) as usize;
                    if wc.status != IBV_WC_SUCCESS {
                        // A QP in error completes every request, unsignaled ones too, so
                        // a run can be counted twice (by its own entries and its carrier).
                        f.send_error = true;
                        self.data_avail = self.data_avail.min(self.sq_size - RS_QP_CTRL_SIZE);
                    }
                }
            }
            if got.len() < WC_BATCH {
                break;
            }
            got = self.cq.poll(&mut more)?;
            if got.is_empty() {
                break;
            }
        }
        // Posted again after the next data message (`repost`), not on the way to the data,
        // while three quarters of the queue stay posted: the peer's control messages need
        // no credit, so a small queue (the tunables allow 1) keeps its headroom.
        self.repost_due += reposts;
        if self.repost_due > self.rq_size / 4 {
            f.send_error |= self.repost_lost();
        }
        Ok(f)
    }

    /// Bytes queued for the application.
    pub fn have_data(&self) -> bool {
        !self.rmsg.is_empty()
    }

    /// Bytes queued for the application (MSG_PEEK|MSG_WAITALL waits for enough).
    pub fn queued(&self) -> usize {
        self.rmsg.iter().map(|&m| m as usize).sum()
    }

    /// Whether the first queued message alone has `room` bytes or more.
    #[inline]
    pub fn fills(&self, room: usize) -> bool {
        self.rmsg.front().is_some_and(|&m| m as usize >= room)
    }

    /// Copies received bytes into `dst` (up to its room); consumes them
    /// unless `peek`. Returns the bytes copied.
    pub fn copy_out(&mut self, dst: &mut super::iov::Scatter, peek: bool) -> usize {
        if !peek {
            return self.take_out(dst);
        }
        let mut copied = 0;
        let mut off = self.roff;
        for &mlen in self.rmsg.iter() {
            if dst.room == 0 {
                break;
            }
            let n = (mlen as usize).min(dst.room);
            // SAFETY: a message lies inside one half of rbuf: off + n ≤ rbuf_size.
            unsafe { dst.copy_from(self.rbuf.ptr().add(off), n) };
            copied += n;
            if n < mlen as usize {
                break;
            }
            off += n;
            if off >= self.rbuf_size {
                off -= self.rbuf_size;
            }
        }
        copied
    }

    /// `copy_out` that consumes: whole messages leave the queue (each one a
    /// receive credit), a partly read one keeps its rest at the front.
    #[inline]
    fn take_out(&mut self, dst: &mut super::iov::Scatter) -> usize {
        if let Some(p) = dst.single() {
            // SAFETY: the room left in the caller's one buffer.
            let n = unsafe { self.take_into(p, dst.room) };
            dst.filled(n);
            return n;
        }
        // SAFETY: as above, through the cursor.
        self.consume(dst.room, |src, _, n| unsafe { dst.copy_from(src, n) })
    }

    /// `copy_out` that consumes, into one buffer.
    ///
    /// # Safety
    /// `p` is writable for `room` bytes.
    #[inline]
    pub unsafe fn take_into(&mut self, p: *mut u8, room: usize) -> usize {
        // SAFETY: `put` gets at most `room` bytes in all, at `p` onwards.
        self.consume(room, |src, done, n| unsafe { std::ptr::copy_nonoverlapping(src, p.add(done), n) })
    }

    /// The target of one data message that can carry `len` bytes now, whole
    /// (`can_send` holds and neither the first chunk, the ring nor the peer's
    /// advert cuts it); for `send_data_to`.
    #[inline]
    pub fn fits_one(&mut self, len: usize) -> Option<Sge> {
        if len > self.first_chunk() || len > self.sbuf_avail || !self.iomap_pending.is_empty() || !self.send_resources() {
            return None;
        }
        // `can_send`'s other condition (a target buffer) is this one's taking.
        self.take_target().filter(|t| t.length as usize >= len)
    }

    /// Takes up to `room` bytes off the front of the queue, handing each run of
    /// ring bytes to `put(source, bytes so far, len)`.
    #[inline]
    fn consume(&mut self, room: usize, mut put: impl FnMut(*const u8, usize, usize)) -> usize {
        let mut copied = 0;
        while copied < room {
            let Some(front) = self.rmsg.front_mut() else { break };
            let mlen = *front as usize;
            let n = mlen.min(room - copied);
            // SAFETY: a message lies inside one half of rbuf: roff + n ≤ rbuf_size.
            put(unsafe { self.rbuf.ptr().add(self.roff) }, copied, n);
            copied += n;
            self.roff += n;
            if self.roff >= self.rbuf_size {
                self.roff -= self.rbuf_size;
            }
            self.rbuf_avail += n;
            if n < mlen {
                *front -= n as u32;
                break;
            }
            self.rmsg.pop_front();
            self.rseq_no = self.rseq_no.wrapping_add(1);
        }
        copied
    }
}
