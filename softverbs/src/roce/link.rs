//! One RC/UC QP's connection over RoCEv2: a [`Link`] that turns the QP's frames into IB
//! transport packets and back.
//!
//! The QP layer (`qp::requester`, `qp::responder`) speaks the stream protocol of
//! `net::frame`: one request frame per message, one response per request, in order, on a
//! channel that loses nothing. A RoCEv2 peer (kernel rxe, a NIC) speaks packets: messages
//! cut at the path MTU, a PSN per packet, coalesced ACKs, NAKs, and losses repaired by the
//! requester (go-back-N on a timer or a sequence NAK). This link does that translation,
//! so the QP layer's semantics (access checks, receive matching, completions, RNR waits)
//! stay the same on both wires:
//! - requester side: request frames are segmented and kept until acknowledged; ACKs,
//!   READ responses, atomic ACKs and NAKs become the response frames the QP layer expects;
//! - responder side: in-order packets are reassembled into whole messages and handed to
//!   the responder; its response frames become ACKs, READ responses, atomic ACKs or NAKs.
//!   Duplicates are answered as the spec says (SEND/WRITE re-ACKed, READ re-executed,
//!   atomics answered from the saved result, never re-executed).
//!
//! Nothing here calls into the QP while holding the link's lock: `Link::send` is called
//! with the QP's lock held, so packet processing returns [`Deliver`]ies that the endpoint
//! hands to the QP afterwards.

use super::packet::{self, aeth, op, Aeth, AckKind, AtomicEth, Bth, Headers, Reth};
use crate::core::registry::lock;
use crate::net::frame::{decode_header, Header, Op, Syndrome, F_IMM, F_SOLICITED};
use crate::net::Link;
use crate::qp::{Qp, QpState};
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// What the endpoint must hand to the QP once the link's lock is released.
pub enum Deliver {
    /// A whole request for the QP's responder.
    Request(Header, Vec<u8>),
    /// A response for the QP's requester.
    Response(Header, Vec<u8>),
    /// The requester may transmit again (the unacknowledged window has room).
    Drained,
}

/// Most packets a requester leaves unacknowledged (rxe: `RXE_MAX_UNACKED_PSNS`).
const MAX_UNACKED: u32 = 128;
/// A requester asks for an ACK at least this often within a long message.
const ACK_EVERY: u32 = 64;
/// READs and atomics a responder remembers for duplicates.
const REMEMBERED: usize = 16;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    SendWrite,
    Read,
    Atomic,
}

/// A message the requester transmitted and has not seen completed.
struct OutMsg {
    int_psn: u32,
    kind: Kind,
    first: u32,
    /// PSNs it takes.
    n: u32,
    pkts: Vec<Vec<u8>>,
    read_len: usize,
    read_buf: Vec<u8>,
    read_next: u32,
    /// READ: the request's RETH (to ask again for the rest after a lost response).
    reth: Reth,
    /// READ: the PSN from which the rest was asked for again (responses restart there).
    resumed: Option<u32>,
    /// READ: every response is here; delivered once the messages before it are.
    done: bool,
}

impl OutMsg {
    fn last(&self) -> u32 {
        packet::psn_add(self.first, self.n - 1)
    }
    fn holds(&self, psn: u32) -> bool {
        let d = packet::psn_diff(psn, self.first);
        d >= 0 && (d as u32) < self.n
    }
}

/// A request handed to the responder, waiting for its response frame.
#[derive(Clone, Copy)]
enum Pend {
    /// SEND/WRITE: ACK this PSN (the message's last).
    Ack(u32),
    /// READ: responses from this PSN.
    Read(u32),
    Atomic(u32),
}

/// A SEND or WRITE being reassembled.
struct Asm {
    write: bool,
    reth: Reth,
    buf: Vec<u8>,
}

/// A SEND or WRITE with immediate refused for want of a receive (RNR NAK): handed to the
/// responder again when its last packet comes again.
struct Held {
    psn: u32,
    req: Header,
    payload: Vec<u8>,
}

struct ReadRec {
    first: u32,
    n: u32,
    reth: Reth,
}

struct Requester {
    ready: bool,
    psn: u32,
    out: VecDeque<OutMsg>,
    unacked: u32,
    /// None: no retransmission timer (QP timeout 0).
    timeout: Option<Duration>,
    retry_cnt: u8,
    retries: u8,
    rnr_retry: u8,
    rnrs: u8,
    deadline: Option<Instant>,
    /// An RNR NAK asked us to wait until then, then resend from that PSN.
    rnr_until: Option<(Instant, u32)>,
    blocked: bool,
    /// A sequence NAK or an implied NAK started a resend: until an ACK shows progress,
    /// no other one starts one (rxe's `started_retry`; the timer still does). Each
    /// duplicate that a resend reaches is re-ACKed, each packet after a gap can bring a
    /// NAK: were each to resend the window, resends would breed resends.
    retrying: bool,
}

struct Responder {
    epsn: u32,
    msn: u32,
    nak_seq_sent: bool,
    asm: Option<Asm>,
    pend: VecDeque<(u32, Pend)>,
    int_psn: u32,
    last_acked: u32,
    reads: VecDeque<ReadRec>,
    atomics: VecDeque<(u32, [u8; 8])>,
    /// A NAK ended the connection's requests (the responder dropped the rest).
    failed: bool,
    held: Option<Held>,
}

struct St {
    req: Requester,
    resp: Responder,
    /// UC completions waiting for the endpoint to hand them over.
    uc_done: Vec<Deliver>,
}

impl St {
    /// A link's state before [`RoceLink::bind_requester`]; `epsn`: the receive PSN.
    fn new(epsn: u32) -> St {
        St {
            req: Requester {
                ready: false,
                psn: 0,
                out: VecDeque::new(),
                unacked: 0,
                timeout: None,
                retry_cnt: 7,
                retries: 0,
                rnr_retry: 7,
                rnrs: 0,
                deadline: None,
                rnr_until: None,
                blocked: false,
                retrying: false,
            },
            resp: Responder {
                epsn,
                msn: 0,
                nak_seq_sent: false,
                asm: None,
                pend: VecDeque::new(),
                int_psn: 0,
                last_acked: packet::psn_add(epsn, 0x00ff_ffff),
                reads: VecDeque::new(),
                atomics: VecDeque::new(),
                failed: false,
                held: None,
            },
            uc_done: Vec::new(),
        }
    }
}

/// Where a link's packets go: the endpoint's socket to the peer (unit tests: a vector).
type Sink = Box<dyn Fn(&[u8]) + Send + Sync>;

pub struct RoceLink {
    pub ep: Weak<super::endpoint::Endpoint>,
    pub qp: Weak<Qp>,
    pub lqpn: u32,
    pub rqpn: u32,
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    mtu: usize,
    uc: bool,
    st: Mutex<St>,
    dead: AtomicBool,
    sink: Sink,
}

fn mtu_bytes(enc: u32) -> usize {
    match enc {
        1 => 256,
        2 => 512,
        3 => 1024,
        4 => 2048,
        _ => 4096,
    }
}

/// `4.096 µs × 2^t`; 0: no timer.
fn ack_timeout(t: u8) -> Option<Duration> {
    (t != 0).then(|| Duration::from_nanos(4096u64 << t.min(31)))
}

impl RoceLink {
    /// A link for `qp` (RTR or later: its AV, dest QPN and receive PSN are set).
    pub fn new(ep: &Arc<super::endpoint::Endpoint>, qp: &Qp, st: &QpState, src: Ipv4Addr, dst: Ipv4Addr) -> RoceLink {
        let a = &st.attr;
        let epsn = a.rq_psn & 0x00ff_ffff;
        let to = Arc::downgrade(ep);
        RoceLink {
            ep: Arc::downgrade(ep),
            qp: qp.me.clone(),
            lqpn: qp.qpn,
            rqpn: a.dest_qp_num & 0x00ff_ffff,
            src,
            dst,
            // The QP's path MTU, but never more than the route carries: a RoCE peer over
            // a 1500-byte link (rxe: port MTU 1024) segments at 1024 whatever our port says.
            mtu: mtu_bytes(a.path_mtu).min(super::endpoint::route_mtu(dst).unwrap_or(4096)),
            uc: qp.kind == crate::qp::state::Kind::Uc,
            st: Mutex::new(St::new(epsn)),
            dead: AtomicBool::new(false),
            sink: Box::new(move |bytes| {
                if let Some(ep) = to.upgrade() {
                    ep.send_to(src, dst, bytes);
                }
            }),
        }
    }

    /// A link with no endpoint or QP, bound as by [`Self::bind_requester`], whose packets
    /// (with ICRC) are collected in the returned vector; `timeout` is the QP attribute.
    #[cfg(test)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn for_test(lqpn: u32, rqpn: u32, mtu: usize, sq_psn: u32, rq_psn: u32, timeout: u8, retry_cnt: u8, rnr_retry: u8, uc: bool) -> (RoceLink, Arc<Mutex<Vec<Vec<u8>>>>) {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let tap = sent.clone();
        let mut st = St::new(rq_psn & 0x00ff_ffff);
        st.req = Requester { ready: true, psn: sq_psn & 0x00ff_ffff, timeout: ack_timeout(timeout), retry_cnt: retry_cnt.min(7), rnr_retry: rnr_retry.min(7), ..st.req };
        let link = RoceLink {
            ep: Weak::new(),
            qp: Weak::new(),
            lqpn,
            rqpn,
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
            mtu,
            uc,
            st: Mutex::new(st),
            dead: AtomicBool::new(false),
            sink: Box::new(move |bytes| lock(&tap).push(bytes.to_vec())),
        };
        (link, sent)
    }

    /// The QP (now RTS) starts sending on this link: its send PSN, timeout and retry
    /// counts are final.
    pub fn bind_requester(&self, st: &QpState) {
        let mut s = lock(&self.st);
        if s.req.ready {
            return;
        }
        let a = &st.attr;
        let r = &mut s.req;
        r.ready = true;
        r.psn = a.sq_psn & 0x00ff_ffff;
        r.timeout = ack_timeout(a.timeout);
        r.retry_cnt = a.retry_cnt.min(7);
        r.rnr_retry = a.rnr_retry.min(7);
    }

    fn send_pkt(&self, bytes: &[u8]) {
        (self.sink)(bytes);
    }

    /// Sends a kept packet again with its ICRC computed anew: our source port may have
    /// changed since it was made (we took UDP 4791 over, `share`), and the ICRC covers it.
    fn resend_pkt(&self, p: &mut [u8]) {
        if let Some(body) = p.len().checked_sub(packet::ICRC_LEN) {
            let crc = super::icrc::icrc_v4(&self.ipinfo(), &[&p[..body]]);
            p[body..].copy_from_slice(&crc.to_le_bytes());
        }
        self.send_pkt(p);
    }

    /// Encodes one packet to our peer.
    fn packet(&self, h: &Headers, payload: &[&[u8]]) -> Vec<u8> {
        let len: usize = payload.iter().map(|p| p.len()).sum();
        let mut out = Vec::with_capacity(packet::headers_len(h.bth.opcode) + len + 8);
        packet::encode_headers(h, len, &mut out);
        for p in payload {
            out.extend_from_slice(p);
        }
        out.resize(out.len() + packet::pad_len(len), 0);
        let crc = super::icrc::icrc_v4(&self.ipinfo(), &[&out]);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    fn ipinfo(&self) -> super::icrc::Ipv4Udp {
        // Our source port: 4791, or our own where another process owns it (`share`).
        let sport = self.ep.upgrade().map_or(packet::ROCE_PORT, |e| e.sport(self.src));
        super::icrc::Ipv4Udp { src: self.src, dst: self.dst, id: 0, df: true, sport, dport: packet::ROCE_PORT }
    }

    fn bth(&self, opcode: u8, psn: u32) -> Bth {
        Bth { opcode, pkey: 0xffff, dqpn: self.rqpn, psn, ..Bth::default() }
    }

    fn ack(&self, psn: u32, syndrome: u8, msn: u32) {
        let h = Headers { bth: self.bth(op::RC_ACK, psn), aeth: Some(Aeth { syndrome, msn }), ..Headers::default() };
        let p = self.packet(&h, &[]);
        self.send_pkt(&p);
    }

    fn transport(&self, rc_op: u8) -> u8 {
        if self.uc {
            rc_op | 0x20
        } else {
            rc_op
        }
    }

    // ---- requester: frames from the QP become packets ----

    fn segment_request(&self, s: &mut St, h: &Header, payload: &[u8]) {
        let r = &mut s.req;
        let first = r.psn;
        let mtu = self.mtu;
        let mut pkts = Vec::new();
        let (kind, n, read_len) = match h.op {
            Op::Send | Op::Write => {
                let write = h.op == Op::Write;
                let imm = h.flags & F_IMM != 0;
                let n = payload.len().div_ceil(mtu).max(1) as u32;
                for i in 0..n {
                    let chunk = &payload[(i as usize * mtu).min(payload.len())..((i as usize + 1) * mtu).min(payload.len())];
                    let (is_first, is_last) = (i == 0, i == n - 1);
                    let opc = match (write, is_first, is_last, imm) {
                        (false, true, true, false) => op::RC_SEND_ONLY,
                        (false, true, true, true) => op::RC_SEND_ONLY_IMM,
                        (false, true, false, _) => op::RC_SEND_FIRST,
                        (false, false, false, _) => op::RC_SEND_MIDDLE,
                        (false, false, true, false) => op::RC_SEND_LAST,
                        (false, false, true, true) => op::RC_SEND_LAST_IMM,
                        (true, true, true, false) => op::RC_WRITE_ONLY,
                        (true, true, true, true) => op::RC_WRITE_ONLY_IMM,
                        (true, true, false, _) => op::RC_WRITE_FIRST,
                        (true, false, false, _) => op::RC_WRITE_MIDDLE,
                        (true, false, true, false) => op::RC_WRITE_LAST,
                        (true, false, true, true) => op::RC_WRITE_LAST_IMM,
                    };
                    let mut bth = self.bth(self.transport(opc), packet::psn_add(first, i));
                    bth.se = is_last && h.flags & F_SOLICITED != 0;
                    bth.ack_req = !self.uc && (is_last || (i + 1) % ACK_EVERY == 0);
                    let hd = Headers {
                        bth,
                        reth: (write && is_first).then_some(Reth { va: h.raddr, rkey: h.rkey, len: payload.len() as u32 }),
                        imm: (imm && is_last).then_some(super::imm_to_wire(h.imm)),
                        ..Headers::default()
                    };
                    pkts.push(self.packet(&hd, &[chunk]));
                }
                (Kind::SendWrite, n, 0)
            }
            Op::ReadReq => {
                let len = h.aux as usize;
                let mut bth = self.bth(op::RC_READ_REQUEST, first);
                bth.ack_req = true;
                let hd = Headers { bth, reth: Some(Reth { va: h.raddr, rkey: h.rkey, len: len as u32 }), ..Headers::default() };
                pkts.push(self.packet(&hd, &[]));
                (Kind::Read, len.div_ceil(mtu).max(1) as u32, len)
            }
            Op::CmpSwap | Op::FetchAdd => {
                let cs = h.op == Op::CmpSwap;
                let mut bth = self.bth(if cs { op::RC_CMP_SWAP } else { op::RC_FETCH_ADD }, first);
                bth.ack_req = true;
                let at = if cs {
                    AtomicEth { va: h.raddr, rkey: h.rkey, swap_add: h.aux2, compare: h.aux }
                } else {
                    AtomicEth { va: h.raddr, rkey: h.rkey, swap_add: h.aux, compare: 0 }
                };
                let hd = Headers { bth, atomic: Some(at), ..Headers::default() };
                pkts.push(self.packet(&hd, &[]));
                (Kind::Atomic, 1, 0)
            }
            _ => return,
        };
        match self.ep.upgrade() {
            // A message's packets in as few syscalls as sendmmsg allows.
            Some(ep) if pkts.len() > 1 => ep.send_many(self.src, self.dst, &pkts),
            _ => pkts.iter().for_each(|p| self.send_pkt(p)),
        }
        let r = &mut s.req;
        r.psn = packet::psn_add(first, n);
        if self.uc {
            // Nothing acknowledges UC: the message is complete once sent.
            let mut a = Header::new(Op::Ack);
            a.psn = h.psn;
            a.dst_qpn = self.lqpn;
            a.src_qpn = self.rqpn;
            s.uc_done.push(Deliver::Response(a, Vec::new()));
            return;
        }
        r.unacked += n;
        if r.out.is_empty() {
            r.deadline = r.timeout.map(|t| Instant::now() + t);
        }
        let reth = Reth { va: h.raddr, rkey: h.rkey, len: read_len as u32 };
        r.out.push_back(OutMsg { int_psn: h.psn, kind, first, n, pkts, read_len, read_buf: Vec::new(), read_next: first, reth, resumed: None, done: false });
    }

    fn response_frame(&self, op: Op, int_psn: u32, syn: Syndrome) -> Header {
        let mut h = Header::new(op);
        h.psn = int_psn;
        h.syndrome = syn;
        h.dst_qpn = self.lqpn;
        h.src_qpn = self.rqpn;
        h
    }

    /// Completes every SEND/WRITE whose last PSN is at or before `psn`, and the READs done
    /// behind them.
    fn complete_upto(&self, s: &mut St, psn: u32, out: &mut Vec<Deliver>) {
        loop {
            self.deliver_done_reads(s, out);
            let Some(m) = s.req.out.front() else { break };
            if m.kind != Kind::SendWrite || packet::psn_cmp(m.last(), psn) == std::cmp::Ordering::Greater {
                break;
            }
            let Some(m) = s.req.out.pop_front() else { break };
            s.req.unacked = s.req.unacked.saturating_sub(m.n);
            out.push(Deliver::Response(self.response_frame(Op::Ack, m.int_psn, Syndrome::Ok), Vec::new()));
        }
    }

    /// Go-back-N: resends from `psn` (a sequence NAK's: the packets of its message from
    /// there on), or everything outstanding (`None`: the timer), and every later message.
    fn resend_from(&self, s: &mut St, psn: Option<u32>) {
        let start = psn.and_then(|p| s.req.out.iter().position(|m| m.holds(p))).unwrap_or(0);
        for (k, m) in s.req.out.iter_mut().enumerate().skip(start) {
            match m.kind {
                Kind::SendWrite => {
                    let from = match psn {
                        Some(p) if k == start => packet::psn_diff(p, m.first).max(0) as usize,
                        _ => 0,
                    };
                    let from = from.min(m.pkts.len());
                    for p in &mut m.pkts[from..] {
                        self.resend_pkt(p);
                    }
                }
                // A READ keeps what arrived and resumes at the first missing response, as
                // rxe does: restarting it whole, a long READ on a lossy path might never end.
                Kind::Read if m.done => {}
                Kind::Read if m.read_next != m.first => self.resume_read(m),
                _ => {
                    m.read_buf.clear();
                    m.read_next = m.first;
                    m.resumed = None;
                    m.done = false;
                    for p in &mut m.pkts {
                        self.resend_pkt(p);
                    }
                }
            }
        }
        s.req.deadline = s.req.timeout.map(|t| Instant::now() + t);
    }

    /// A READ response was lost (a later one came): ask again for the rest, from the first
    /// missing response, as rxe does.
    fn resume_read(&self, m: &mut OutMsg) {
        let got = m.read_buf.len();
        let rest = Reth { va: m.reth.va + got as u64, rkey: m.reth.rkey, len: (m.read_len - got) as u32 };
        let mut bth = self.bth(op::RC_READ_REQUEST, m.read_next);
        bth.ack_req = true;
        let p = self.packet(&Headers { bth, reth: Some(rest), ..Headers::default() }, &[]);
        self.send_pkt(&p);
        m.resumed = Some(m.read_next);
    }

    fn fail_front(&self, s: &mut St, syn: Syndrome, out: &mut Vec<Deliver>) {
        if let Some(m) = s.req.out.pop_front() {
            s.req.unacked = s.req.unacked.saturating_sub(m.n);
            out.push(Deliver::Response(self.response_frame(Op::Ack, m.int_psn, syn), Vec::new()));
        }
        // The QP goes to ERR: later messages are flushed by the QP layer.
        s.req.out.clear();
        s.req.unacked = 0;
        s.req.deadline = None;
        s.req.rnr_until = None;
    }

    fn on_response_pkt(&self, s: &mut St, h: &Headers, payload: &[u8], out: &mut Vec<Deliver>) {
        let Some(a) = h.aeth else {
            // READ RESPONSE MIDDLE: no AETH.
            if h.bth.opcode == op::RC_READ_RESPONSE_MIDDLE {
                self.read_data(s, h, payload, out);
            }
            return;
        };
        let psn = h.bth.psn;
        match aeth::kind(a.syndrome) {
            AckKind::Ack => {
                let before = s.req.out.len();
                match h.bth.opcode {
                    op::RC_ACK => {
                        self.complete_upto(s, psn, out);
                        // An ACK past an outstanding READ or atomic: its response was lost.
                        // Past its last PSN, as rxe's check_psn (our responder re-ACKs
                        // duplicates with a READ's last PSN once it answered the READ).
                        if let Some(m) = s.req.out.front() {
                            if m.kind != Kind::SendWrite && packet::psn_cmp(psn, m.last()) == std::cmp::Ordering::Greater && !s.req.retrying {
                                s.req.retrying = true;
                                self.resend_from(s, None);
                            }
                        }
                    }
                    op::RC_ATOMIC_ACK => {
                        self.complete_upto(s, packet::psn_add(psn, 0x00ff_ffff), out);
                        if let (Some(m), Some(orig)) = (s.req.out.front(), h.atomic_ack) {
                            if m.kind == Kind::Atomic && m.first == psn {
                                let int_psn = m.int_psn;
                                s.req.out.pop_front();
                                s.req.unacked = s.req.unacked.saturating_sub(1);
                                out.push(Deliver::Response(self.response_frame(Op::AtomicResp, int_psn, Syndrome::Ok), orig.to_be_bytes().to_vec()));
                                // READs done behind the atomic were waiting for it.
                                self.deliver_done_reads(s, out);
                            }
                        }
                    }
                    _ => self.read_data(s, h, payload, out),
                }
                if s.req.out.len() != before {
                    s.req.retries = 0;
                    s.req.rnrs = 0;
                    s.req.retrying = false;
                    s.req.deadline = if s.req.out.is_empty() { None } else { s.req.timeout.map(|t| Instant::now() + t) };
                }
            }
            AckKind::Rnr(code) => {
                self.complete_upto(s, packet::psn_add(psn, 0x00ff_ffff), out);
                if s.req.rnr_retry != 7 && s.req.rnrs >= s.req.rnr_retry {
                    self.fail_front(s, Syndrome::RnrExceeded, out);
                    return;
                }
                s.req.rnrs = s.req.rnrs.saturating_add(1);
                s.req.deadline = None;
                s.req.rnr_until = Some((Instant::now() + Duration::from_micros(packet::rnr_timer_us(code)), psn));
            }
            AckKind::Nak(code) => {
                self.complete_upto(s, packet::psn_add(psn, 0x00ff_ffff), out);
                if code == 0 {
                    if s.req.retrying {
                        return;
                    }
                    if s.req.retry_cnt != 7 && s.req.retries >= s.req.retry_cnt {
                        self.fail_front(s, Syndrome::NoQp, out);
                        return;
                    }
                    s.req.retries += 1;
                    s.req.retrying = true;
                    self.resend_from(s, Some(psn));
                    return;
                }
                let syn = match code {
                    1 => Syndrome::RemInvReq,
                    2 => Syndrome::RemAccess,
                    _ => Syndrome::RemOp,
                };
                self.fail_front(s, syn, out);
            }
            AckKind::Reserved => {}
        }
    }

    fn read_data(&self, s: &mut St, h: &Headers, payload: &[u8], out: &mut Vec<Deliver>) {
        let psn = h.bth.psn;
        let Some(i) = s.req.out.iter().position(|m| m.kind == Kind::Read && !m.done && m.holds(psn)) else { return };
        // A READ response acknowledges every SEND/WRITE before the READ.
        let before = packet::psn_add(s.req.out[i].first, 0x00ff_ffff);
        self.complete_upto(s, before, out);
        let Some(m) = s.req.out.iter_mut().find(|m| m.kind == Kind::Read && !m.done && m.holds(psn)) else { return };
        if psn != m.read_next {
            if packet::psn_cmp(psn, m.read_next) == std::cmp::Ordering::Greater && m.resumed != Some(m.read_next) {
                self.resume_read(m);
            }
            return;
        }
        let opc = h.bth.opcode;
        let starts = opc == op::RC_READ_RESPONSE_FIRST || opc == op::RC_READ_RESPONSE_ONLY;
        if starts != (psn == m.first || m.resumed == Some(psn)) {
            return;
        }
        if m.read_buf.len() + payload.len() > m.read_len {
            return;
        }
        m.read_buf.extend_from_slice(payload);
        m.read_next = packet::psn_add(psn, 1);
        if opc == op::RC_READ_RESPONSE_LAST || opc == op::RC_READ_RESPONSE_ONLY {
            m.done = true;
        }
        self.deliver_done_reads(s, out);
    }

    /// Completions in order: a READ done behind an unfinished READ or atomic waits for it.
    fn deliver_done_reads(&self, s: &mut St, out: &mut Vec<Deliver>) {
        while s.req.out.front().is_some_and(|m| m.done) {
            let Some(m) = s.req.out.pop_front() else { break };
            s.req.unacked = s.req.unacked.saturating_sub(m.n);
            out.push(Deliver::Response(self.response_frame(Op::ReadResp, m.int_psn, Syndrome::Ok), m.read_buf));
        }
    }

    // ---- responder: packets become whole requests ----

    fn request_frame(&self, s: &mut St, op: Op) -> Header {
        let mut h = Header::new(op);
        h.dst_qpn = self.lqpn;
        h.src_qpn = self.rqpn;
        h.psn = Self::next_int_psn(s);
        // The responder never waits for a receive on this link (it NAKs RNR, `refuse_rnr`):
        // no RNR clock of its own.
        h.rnr_retry = 7;
        h
    }

    /// The QP layer's PSN for the next request handed over (its PSNs count messages).
    fn next_int_psn(s: &mut St) -> u32 {
        let p = s.resp.int_psn;
        s.resp.int_psn = (p + 1) & 0x00ff_ffff;
        p
    }

    /// The last packet of a message refused RNR came again: the responder gets the whole
    /// message again (its earlier packets were taken; the NAK acknowledged them).
    fn redeliver(&self, s: &mut St, held: Held, out: &mut Vec<Deliver>) {
        s.resp.epsn = packet::psn_add(held.psn, 1);
        let mut r = held.req;
        r.psn = Self::next_int_psn(s);
        s.resp.pend.push_back((r.psn, Pend::Ack(held.psn)));
        out.push(Deliver::Request(r, held.payload));
    }

    fn on_request_pkt(&self, s: &mut St, h: &Headers, payload: &[u8], out: &mut Vec<Deliver>) {
        if s.resp.failed {
            return;
        }
        let psn = h.bth.psn;
        let opc = h.bth.opcode & 0x1f;
        match packet::psn_cmp(psn, s.resp.epsn) {
            std::cmp::Ordering::Greater => {
                if self.uc {
                    // UC: a gap loses the message being received; start over at this packet.
                    s.resp.asm = None;
                    s.resp.epsn = psn;
                } else {
                    if !s.resp.nak_seq_sent {
                        s.resp.nak_seq_sent = true;
                        self.ack(s.resp.epsn, aeth::NAK_PSN_SEQ, s.resp.msn);
                    }
                    return;
                }
            }
            std::cmp::Ordering::Less => {
                if !self.uc {
                    self.duplicate(s, h, out);
                }
                return;
            }
            std::cmp::Ordering::Equal => {}
        }
        s.resp.nak_seq_sent = false;
        if let Some(held) = s.resp.held.take() {
            if held.psn == psn && data_kind(opc).is_some_and(|(_, _, last)| last) {
                return self.redeliver(s, held, out);
            }
        }
        match opc {
            op::RC_READ_REQUEST => {
                let Some(reth) = h.reth else { return };
                let n = (reth.len as usize).div_ceil(self.mtu).max(1) as u32;
                s.resp.epsn = packet::psn_add(psn, n);
                if s.resp.reads.len() >= REMEMBERED {
                    s.resp.reads.pop_front();
                }
                s.resp.reads.push_back(ReadRec { first: psn, n, reth });
                self.deliver_read(s, psn, reth, out);
            }
            op::RC_CMP_SWAP | op::RC_FETCH_ADD => {
                let Some(a) = h.atomic else { return };
                s.resp.epsn = packet::psn_add(psn, 1);
                let mut r = self.request_frame(s, if opc == op::RC_CMP_SWAP { Op::CmpSwap } else { Op::FetchAdd });
                r.rkey = a.rkey;
                r.raddr = a.va;
                if opc == op::RC_CMP_SWAP {
                    r.aux = a.compare;
                    r.aux2 = a.swap_add;
                } else {
                    r.aux = a.swap_add;
                }
                s.resp.pend.push_back((r.psn, Pend::Atomic(psn)));
                out.push(Deliver::Request(r, Vec::new()));
            }
            _ => self.data_packet(s, h, opc, payload, out),
        }
    }

    fn deliver_read(&self, s: &mut St, psn: u32, reth: Reth, out: &mut Vec<Deliver>) {
        let mut r = self.request_frame(s, Op::ReadReq);
        r.rkey = reth.rkey;
        r.raddr = reth.va;
        r.aux = reth.len as u64;
        s.resp.pend.push_back((r.psn, Pend::Read(psn)));
        out.push(Deliver::Request(r, Vec::new()));
    }

    fn data_packet(&self, s: &mut St, h: &Headers, opc: u8, payload: &[u8], out: &mut Vec<Deliver>) {
        let psn = h.bth.psn;
        let Some((write, first, last)) = data_kind(opc) else { return self.protocol_error(s) };
        // Sequence and length rules (rxe's): a FIRST/MIDDLE carries exactly one MTU.
        if first != s.resp.asm.is_none() || (!last && payload.len() != self.mtu) {
            if self.uc {
                s.resp.asm = None;
                s.resp.epsn = packet::psn_add(psn, 1);
                return;
            }
            return self.protocol_error(s);
        }
        if first {
            let reth = h.reth.unwrap_or_default();
            // The RETH's length is the peer's word, up to 4 GiB: reserve no more than a message may hold.
            let cap = if write { (reth.len as usize).min(crate::net::frame::MAX_MSG as usize) } else { payload.len() };
            s.resp.asm = Some(Asm { write, reth, buf: Vec::with_capacity(cap) });
        }
        let Some(asm) = s.resp.asm.as_mut() else { return };
        if asm.write != write || asm.buf.len() + payload.len() > crate::net::frame::MAX_MSG as usize {
            return self.protocol_error(s);
        }
        asm.buf.extend_from_slice(payload);
        s.resp.epsn = packet::psn_add(psn, 1);
        if !last {
            // An ACK acknowledges every earlier message too: none may while one still
            // waits for the QP layer, whose answer may be a NAK (or, for a READ, data
            // the requester would take the ACK's PSN to have skipped).
            if h.bth.ack_req && !self.uc && s.resp.pend.is_empty() {
                s.resp.last_acked = psn;
                self.ack(psn, aeth::ACK, s.resp.msn);
            }
            return;
        }
        let Some(asm) = s.resp.asm.take() else { return };
        if write && asm.buf.len() != asm.reth.len as usize {
            return self.protocol_error(s);
        }
        let mut r = self.request_frame(s, if write { Op::Write } else { Op::Send });
        if write {
            r.rkey = asm.reth.rkey;
            r.raddr = asm.reth.va;
        }
        if let Some(imm) = h.imm {
            r.flags |= F_IMM;
            r.imm = super::imm_from_wire(imm);
        }
        if h.bth.se {
            r.flags |= F_SOLICITED;
        }
        r.payload_len = asm.buf.len() as u32;
        if !self.uc {
            s.resp.pend.push_back((r.psn, Pend::Ack(psn)));
        }
        out.push(Deliver::Request(r, asm.buf));
    }

    /// An opcode out of sequence or a bad length: NAK invalid request; the connection
    /// takes no more requests (the QP layer moves the QP to ERR on its side too).
    fn protocol_error(&self, s: &mut St) {
        s.resp.asm = None;
        if self.uc {
            return;
        }
        s.resp.failed = true;
        self.ack(s.resp.epsn, aeth::NAK_INV_REQ, s.resp.msn);
    }

    fn duplicate(&self, s: &mut St, h: &Headers, out: &mut Vec<Deliver>) {
        let psn = h.bth.psn;
        match h.bth.opcode {
            op::RC_READ_REQUEST => {
                let Some(reth) = h.reth else { return };
                let Some(rec) = s.resp.reads.iter().find(|r| {
                    let d = packet::psn_diff(psn, r.first);
                    d >= 0 && (d as u32) < r.n
                }) else {
                    return;
                };
                // A retry may resume mid-way: same key, inside the original range.
                let off = packet::psn_diff(psn, rec.first) as u64 * self.mtu as u64;
                // The peer's numbers: no sum may wrap (a wrapped end would pass the check).
                let (lo, hi) = (rec.reth.va.saturating_add(off), rec.reth.va.saturating_add(rec.reth.len as u64));
                let end = reth.va.checked_add(reth.len as u64);
                if reth.rkey != rec.reth.rkey || reth.va < lo.min(rec.reth.va) || end.is_none_or(|e| e > hi) {
                    return;
                }
                self.deliver_read(s, psn, reth, out);
            }
            op::RC_CMP_SWAP | op::RC_FETCH_ADD => {
                if let Some((_, orig)) = s.resp.atomics.iter().find(|(p, _)| *p == psn) {
                    let orig = *orig;
                    self.atomic_ack(psn, s.resp.msn, u64::from_be_bytes(orig));
                }
            }
            _ => {
                if h.bth.ack_req || h.bth.opcode & 0x1f != op::RC_SEND_MIDDLE {
                    self.ack(s.resp.last_acked, aeth::ACK, s.resp.msn);
                }
            }
        }
    }

    fn atomic_ack(&self, psn: u32, msn: u32, orig: u64) {
        let h = Headers { bth: self.bth(op::RC_ATOMIC_ACK, psn), aeth: Some(Aeth { syndrome: aeth::ACK, msn }), atomic_ack: Some(orig), ..Headers::default() };
        let p = self.packet(&h, &[]);
        self.send_pkt(&p);
    }

    /// A response frame from the QP's responder.
    fn on_response_frame(&self, s: &mut St, h: &Header, payload: &[u8]) {
        let Some(i) = s.resp.pend.iter().position(|(p, _)| *p == h.psn) else { return };
        let Some((_, pend)) = s.resp.pend.remove(i) else { return };
        let psn = match pend {
            Pend::Ack(p) | Pend::Read(p) | Pend::Atomic(p) => p,
        };
        if h.syndrome != Syndrome::Ok {
            let code = match h.syndrome {
                Syndrome::RemAccess => aeth::NAK_REM_ACCESS,
                Syndrome::RemInvReq => aeth::NAK_INV_REQ,
                Syndrome::RemOp | Syndrome::RnrExceeded => aeth::NAK_REM_OP,
                // Not our peer: rxe drops such packets silently.
                Syndrome::NoQp | Syndrome::Ok => return,
            };
            s.resp.failed = true;
            self.ack(psn, code, s.resp.msn);
            return;
        }
        s.resp.msn = (s.resp.msn + 1) & 0x00ff_ffff;
        let msn = s.resp.msn;
        match (pend, h.op) {
            (Pend::Ack(p), Op::Ack) => {
                s.resp.last_acked = p;
                self.ack(p, aeth::ACK, msn);
            }
            (Pend::Atomic(p), Op::AtomicResp) if payload.len() == 8 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(payload);
                if s.resp.atomics.len() >= REMEMBERED {
                    s.resp.atomics.pop_front();
                }
                s.resp.atomics.push_back((p, b));
                s.resp.last_acked = p;
                self.atomic_ack(p, msn, u64::from_be_bytes(b));
            }
            (Pend::Read(p), Op::ReadResp) => {
                let n = payload.len().div_ceil(self.mtu).max(1) as u32;
                for i in 0..n {
                    let chunk = &payload[(i as usize * self.mtu).min(payload.len())..((i as usize + 1) * self.mtu).min(payload.len())];
                    let opc = match (i == 0, i == n - 1) {
                        (true, true) => op::RC_READ_RESPONSE_ONLY,
                        (true, false) => op::RC_READ_RESPONSE_FIRST,
                        (false, false) => op::RC_READ_RESPONSE_MIDDLE,
                        (false, true) => op::RC_READ_RESPONSE_LAST,
                    };
                    let aeth = (opc != op::RC_READ_RESPONSE_MIDDLE).then_some(Aeth { syndrome: aeth::ACK, msn });
                    let hd = Headers { bth: self.bth(opc, packet::psn_add(p, i)), aeth, ..Headers::default() };
                    let pk = self.packet(&hd, &[chunk]);
                    self.send_pkt(&pk);
                }
                // Not backwards: a duplicate READ re-executed after later messages were
                // ACKed would have duplicates of those re-ACKed below their PSNs, forever.
                let last = packet::psn_add(p, n - 1);
                if packet::psn_cmp(last, s.resp.last_acked) == std::cmp::Ordering::Greater {
                    s.resp.last_acked = last;
                }
            }
            _ => {}
        }
    }

    // ---- entry points for the endpoint ----

    /// A packet for this QP (ICRC, P_Key, source address already checked).
    pub fn on_packet(&self, h: &Headers, payload: &[u8]) -> Vec<Deliver> {
        let mut out = Vec::new();
        // The opcode's transport must be the QP's (rxe drops a UC opcode at an RC QP, and
        // the reverse); from here on only its low 5 bits are looked at.
        if h.bth.opcode >> 5 != if self.uc { 1 } else { 0 } {
            return Vec::new();
        }
        let mut s = lock(&self.st);
        let opc = h.bth.opcode & 0x1f;
        let is_resp = (op::RC_READ_RESPONSE_FIRST..=op::RC_ATOMIC_ACK).contains(&opc);
        if is_resp {
            if !self.uc {
                let was = s.req.blocked;
                self.on_response_pkt(&mut s, h, payload, &mut out);
                if was && s.req.unacked < MAX_UNACKED / 2 {
                    s.req.blocked = false;
                    out.push(Deliver::Drained);
                }
            }
        } else {
            self.on_request_pkt(&mut s, h, payload, &mut out);
        }
        out
    }

    /// Timers: retransmission after the local ACK timeout, resend after an RNR wait. Returns
    /// what to deliver and whether the link still needs the timer.
    pub fn on_tick(&self, now: Instant) -> (Vec<Deliver>, bool) {
        let mut out = Vec::new();
        let mut s = lock(&self.st);
        out.append(&mut s.uc_done);
        if let Some((at, psn)) = s.req.rnr_until {
            if now >= at {
                s.req.rnr_until = None;
                self.resend_from(&mut s, Some(psn));
            }
        } else if let Some(d) = s.req.deadline {
            if now >= d && !s.req.out.is_empty() {
                if s.req.retry_cnt != 7 && s.req.retries >= s.req.retry_cnt {
                    self.fail_front(&mut s, Syndrome::NoQp, &mut out);
                } else {
                    s.req.retries += 1;
                    self.resend_from(&mut s, None);
                }
            }
        }
        let busy = !s.req.out.is_empty() || s.req.rnr_until.is_some();
        (out, busy)
    }

    /// Whether the link needs the timer (packets await acknowledgement, or an RNR wait).
    pub fn busy(&self) -> bool {
        let s = lock(&self.st);
        !s.req.out.is_empty() || s.req.rnr_until.is_some() || !s.uc_done.is_empty()
    }

    /// Frames from the QP layer: its requester's requests, its responder's responses.
    fn take_frame(&self, h: &Header, payload: &[u8]) {
        if self.dead.load(Ordering::SeqCst) {
            return;
        }
        let mut s = lock(&self.st);
        if h.op.is_request() {
            self.segment_request(&mut s, h, payload);
            if s.req.unacked >= MAX_UNACKED {
                s.req.blocked = true;
            }
            let uc = !s.uc_done.is_empty();
            drop(s);
            if let Some(ep) = self.ep.upgrade() {
                ep.want_tick(uc);
            }
        } else if h.op.is_response() {
            self.on_response_frame(&mut s, h, payload);
        }
    }
}

impl Link for RoceLink {
    fn send(&self, frame: Vec<u8>) {
        let Ok(h) = decode_header(&frame) else { return };
        let end = (crate::net::frame::HDR_LEN + h.payload_len as usize).min(frame.len());
        self.take_frame(&h, &frame[crate::net::frame::HDR_LEN..end]);
    }

    fn send_parts(&self, parts: &[&[u8]]) {
        let Some(first) = parts.first() else { return };
        let Ok(h) = decode_header(first) else { return };
        let mut payload = Vec::with_capacity(h.payload_len as usize);
        payload.extend_from_slice(&first[crate::net::frame::HDR_LEN.min(first.len())..]);
        for p in &parts[1..] {
            payload.extend_from_slice(p);
        }
        self.take_frame(&h, &payload);
    }

    fn backlog(&self) -> bool {
        lock(&self.st).req.blocked
    }

    fn peer_qpn(&self) -> Option<u32> {
        Some(self.rqpn)
    }

    fn close(&self) {
        self.dead.store(true, Ordering::SeqCst);
    }

    fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    fn listener(&self) -> Option<SocketAddr> {
        None
    }

    fn parked(&self, _bytes: usize, _park: bool) {}

    fn congested(&self) -> bool {
        false
    }

    fn bind_requester(&self, st: &QpState) {
        RoceLink::bind_requester(self, st);
    }

    fn refuse_rnr(&self, req: &Header, payload: &[u8], min_rnr_timer: u8) -> bool {
        if self.uc {
            return false;
        }
        let mut s = lock(&self.st);
        let Some(i) = s.resp.pend.iter().position(|(p, _)| *p == req.psn) else { return true };
        let Some((_, Pend::Ack(p))) = s.resp.pend.get(i).copied() else { return true };
        // The responder dropped this link's later requests too. The requester resends from
        // this packet after the timer: until it does, later packets bring no sequence NAK.
        s.resp.pend.truncate(i);
        s.resp.held = Some(Held { psn: p, req: *req, payload: payload.to_vec() });
        s.resp.epsn = p;
        s.resp.asm = None;
        s.resp.nak_seq_sent = true;
        self.ack(p, aeth::RNR_NAK | (min_rnr_timer & 0x1f), s.resp.msn);
        true
    }
}

/// A SEND or WRITE packet's place in its message: (write, first, last); None for any
/// other opcode.
fn data_kind(opc: u8) -> Option<(bool, bool, bool)> {
    Some(match opc {
        op::RC_SEND_FIRST => (false, true, false),
        op::RC_SEND_MIDDLE => (false, false, false),
        op::RC_SEND_LAST | op::RC_SEND_LAST_IMM | op::RC_SEND_LAST_INV => (false, false, true),
        op::RC_SEND_ONLY | op::RC_SEND_ONLY_IMM | op::RC_SEND_ONLY_INV => (false, true, true),
        op::RC_WRITE_FIRST => (true, true, false),
        op::RC_WRITE_MIDDLE => (true, false, false),
        op::RC_WRITE_LAST | op::RC_WRITE_LAST_IMM => (true, false, true),
        op::RC_WRITE_ONLY | op::RC_WRITE_ONLY_IMM => (true, true, true),
        _ => return None,
    })
}
