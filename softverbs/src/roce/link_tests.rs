//! Tests of the RC/UC transport logic of [`super::link::RoceLink`] without sockets or QPs:
//! a link built by `RoceLink::for_test` collects its packets in a vector, the tests play
//! the peer with packets built by `packet` and the QP layer with `net::frame` frames, and
//! check what roce.md section 4 (the RC rules rxe implements) and the IB spec require.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::icrc::{check_v4, icrc_v4, Ipv4Udp};
use super::link::{Deliver, RoceLink};
use super::packet::{self, aeth, op, Aeth, AtomicEth, Bth, Headers, Reth, ROCE_PORT};
use crate::core::registry::lock;
use crate::net::frame::{Header, Op, Syndrome, F_IMM, F_SOLICITED, HDR_LEN};
use crate::net::Link;

const A_QPN: u32 = 0x00_0a11;
const B_QPN: u32 = 0x00_0b22;
const MTU: usize = 1024;
/// QP timeout attribute 18: 4.096 µs × 2^18 ≈ 1.07 s, long enough that a test never
/// reaches it in real time; the tests jump past it with a fake clock.
const T18: u8 = 18;

type Tap = Arc<Mutex<Vec<Vec<u8>>>>;

/// A decoded packet a link sent.
#[derive(Clone, Debug)]
struct Pkt {
    h: Headers,
    payload: Vec<u8>,
    raw: Vec<u8>,
}

struct T {
    l: RoceLink,
    tx: Tap,
}

/// A link of QP `A_QPN` to `B_QPN` at MTU 1024, timer ≈ 1 s, retry counts 7.
fn rc(sq_psn: u32, rq_psn: u32) -> T {
    with(A_QPN, B_QPN, MTU, sq_psn, rq_psn, T18, 7, 7, false)
}

#[allow(clippy::too_many_arguments)]
fn with(lqpn: u32, rqpn: u32, mtu: usize, sq_psn: u32, rq_psn: u32, timeout: u8, retry_cnt: u8, rnr_retry: u8, uc: bool) -> T {
    let (l, tx) = RoceLink::for_test(lqpn, rqpn, mtu, sq_psn, rq_psn, timeout, retry_cnt, rnr_retry, uc);
    T { l, tx }
}

/// Later than any timer a test armed so far (the links' timers count from `Instant::now()`).
fn later() -> Instant {
    Instant::now() + Duration::from_secs(100)
}

/// Bytes that do not repeat with any period a test could confuse (xorshift of the index).
fn pat(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

impl T {
    /// Drains the packets sent so far; each must decode, carry a valid ICRC, P_Key 0xFFFF
    /// and our peer's QPN, and use PadCnt for its payload.
    fn sent(&self) -> Vec<Pkt> {
        let raw: Vec<Vec<u8>> = std::mem::take(&mut *lock(&self.tx));
        raw.into_iter().map(|r| self.check(r)).collect()
    }

    fn check(&self, raw: Vec<u8>) -> Pkt {
        let (h, payload) = packet::decode(&raw).unwrap_or_else(|e| panic!("undecodable packet {raw:02x?}: {e}"));
        let ip = Ipv4Udp::predicted(self.l.src, ROCE_PORT, self.l.dst, ROCE_PORT);
        assert!(check_v4(&ip, &raw), "bad ICRC on {h:?}");
        assert_eq!(h.bth.dqpn, self.l.rqpn, "DestQP");
        assert_eq!(h.bth.pkey, 0xffff);
        assert_eq!(usize::from(h.bth.pad), packet::pad_len(payload.len()), "PadCnt of {h:?}");
        assert_eq!((raw[1] >> 4) & 3, h.bth.pad);
        assert_eq!(raw.len(), packet::headers_len(h.bth.opcode) + payload.len() + packet::pad_len(payload.len()) + 4);
        let payload = payload.to_vec();
        Pkt { h, payload, raw }
    }

    fn raw_sent(&self) -> Vec<Vec<u8>> {
        self.sent().into_iter().map(|p| p.raw).collect()
    }

    fn nothing_sent(&self) {
        let s = self.sent();
        assert!(s.is_empty(), "unexpected packets: {:?}", s.iter().map(|p| p.h).collect::<Vec<_>>());
    }

    /// A packet from the peer: encoded, padded and ICRC'd as on the wire, decoded again and
    /// handed to the link.
    fn inject(&self, h: Headers, payload: &[u8]) -> Vec<Deliver> {
        let mut buf = Vec::new();
        packet::encode_headers(&h, payload.len(), &mut buf);
        buf.extend_from_slice(payload);
        buf.resize(buf.len() + packet::pad_len(payload.len()), 0);
        let crc = icrc_v4(&Ipv4Udp::predicted(self.l.dst, ROCE_PORT, self.l.src, ROCE_PORT), &[&buf]);
        buf.extend_from_slice(&crc.to_le_bytes());
        let (h2, p2) = packet::decode(&buf).expect("test packet must decode");
        assert_eq!(p2, payload);
        self.l.on_packet(&h2, p2)
    }

    fn frame(&self, h: Header, payload: &[u8]) {
        self.l.send(h.frame(payload));
    }

    fn send(&self, int_psn: u32, payload: &[u8]) {
        self.frame(req(Op::Send, int_psn), payload);
    }

    fn write(&self, int_psn: u32, raddr: u64, rkey: u32, payload: &[u8]) {
        let mut h = req(Op::Write, int_psn);
        h.raddr = raddr;
        h.rkey = rkey;
        self.frame(h, payload);
    }

    fn read(&self, int_psn: u32, raddr: u64, rkey: u32, len: u32) {
        let mut h = req(Op::ReadReq, int_psn);
        h.raddr = raddr;
        h.rkey = rkey;
        h.aux = len as u64;
        self.frame(h, &[]);
    }

    fn tick(&self, now: Instant) -> Vec<Deliver> {
        self.l.on_tick(now).0
    }
}

/// A request frame from the QP layer's requester (`int_psn`: its own PSN counter).
fn req(op: Op, int_psn: u32) -> Header {
    let mut h = Header::new(op);
    h.psn = int_psn;
    h.src_qpn = A_QPN;
    h.dst_qpn = B_QPN;
    h
}

/// The QP layer's responder answering the request frame `r`.
fn answer(r: &Header, op: Op, syndrome: Syndrome) -> Header {
    let mut h = Header::new(op);
    h.psn = r.psn;
    h.syndrome = syndrome;
    h.src_qpn = r.dst_qpn;
    h.dst_qpn = r.src_qpn;
    h
}

fn bth(opcode: u8, psn: u32, dqpn: u32) -> Bth {
    Bth { opcode, pkey: 0xffff, dqpn, psn, ..Bth::default() }
}

/// An ACK/NAK from B to A.
fn ack(psn: u32, syndrome: u8, msn: u32) -> Headers {
    Headers { bth: bth(op::RC_ACK, psn, A_QPN), aeth: Some(Aeth { syndrome, msn }), ..Headers::default() }
}

/// A READ response from B to A (AETH on all but MIDDLE).
fn rresp(opcode: u8, psn: u32) -> Headers {
    let aeth = (opcode != op::RC_READ_RESPONSE_MIDDLE).then_some(Aeth { syndrome: aeth::ACK, msn: 1 });
    Headers { bth: bth(opcode, psn, A_QPN), aeth, ..Headers::default() }
}

/// A request packet from A to B (the link under test is B's).
fn rq(opcode: u8, psn: u32, ack_req: bool) -> Headers {
    let mut b = bth(opcode, psn, B_QPN);
    b.ack_req = ack_req;
    Headers { bth: b, ..Headers::default() }
}

fn reqs(d: &[Deliver]) -> Vec<(Header, Vec<u8>)> {
    d.iter().filter_map(|x| if let Deliver::Request(h, p) = x { Some((*h, p.clone())) } else { None }).collect()
}

fn resps(d: &[Deliver]) -> Vec<(Header, Vec<u8>)> {
    d.iter().filter_map(|x| if let Deliver::Response(h, p) = x { Some((*h, p.clone())) } else { None }).collect()
}

/// Asserts `d` holds exactly these responses: (op, QP-layer PSN, syndrome).
fn expect_resps(d: &[Deliver], want: &[(Op, u32, Syndrome)]) {
    assert!(reqs(d).is_empty(), "unexpected requests");
    let got: Vec<(Op, u32, Syndrome)> = resps(d).iter().map(|(h, _)| (h.op, h.psn, h.syndrome)).collect();
    assert_eq!(got, want);
    for (h, _) in resps(d) {
        assert_eq!((h.dst_qpn, h.src_qpn), (A_QPN, B_QPN), "a response frame names our QP and the peer's");
    }
}

fn ack_h(psn: u32) -> Headers {
    ack(psn, aeth::ACK, 0)
}

fn ok_acks(psns: &[u32]) -> Vec<(Op, u32, Syndrome)> {
    psns.iter().map(|&p| (Op::Ack, p, Syndrome::Ok)).collect()
}

fn opcodes(p: &[Pkt]) -> Vec<u8> {
    p.iter().map(|p| p.h.bth.opcode).collect()
}

fn psns(p: &[Pkt]) -> Vec<u32> {
    p.iter().map(|p| p.h.bth.psn).collect()
}

// ---- requester: segmentation ----

#[test]
fn roce_link_segment_send() {
    let t = rc(100, 0);
    let data = pat(3000, 1);
    let mut h = req(Op::Send, 7);
    h.flags = F_SOLICITED | F_IMM;
    h.imm = u32::from_ne_bytes([0xde, 0xad, 0xbe, 0xef]);
    t.frame(h, &data);
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::RC_SEND_FIRST, op::RC_SEND_MIDDLE, op::RC_SEND_LAST_IMM]);
    assert_eq!(psns(&p), [100, 101, 102]);
    assert_eq!(p.iter().map(|p| p.payload.len()).collect::<Vec<_>>(), [1024, 1024, 952]);
    assert_eq!(p.iter().flat_map(|p| p.payload.clone()).collect::<Vec<_>>(), data);
    assert_eq!(p.iter().map(|p| p.h.bth.ack_req).collect::<Vec<_>>(), [false, false, true]);
    assert_eq!(p.iter().map(|p| p.h.bth.se).collect::<Vec<_>>(), [false, false, true]);
    assert_eq!(p.iter().map(|p| p.h.imm).collect::<Vec<_>>(), [None, None, Some(0xdead_beef)], "ImmDt: the application's bytes, last packet only");
    assert!(p.iter().all(|p| p.h.reth.is_none()));

    // Not solicited, no immediate: plain LAST, SE clear; a 2050-byte SEND pads its LAST.
    let data = pat(2050, 2);
    t.send(8, &data);
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::RC_SEND_FIRST, op::RC_SEND_MIDDLE, op::RC_SEND_LAST]);
    assert_eq!(psns(&p), [103, 104, 105]);
    assert!(p.iter().all(|p| !p.h.bth.se && p.h.imm.is_none()));
    assert_eq!(p[2].payload, data[2048..]);
    assert_eq!(p[2].h.bth.pad, 2);
    assert_eq!(p[2].raw.len(), 12 + 2 + 2 + 4);
    assert!(p[..2].iter().all(|p| p.h.bth.pad == 0));

    // A message that fits is ONLY, with everything the last packet carries.
    let mut h = req(Op::Send, 9);
    h.flags = F_SOLICITED | F_IMM;
    h.imm = 5;
    t.frame(h, &pat(1024, 3));
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::RC_SEND_ONLY_IMM]);
    assert_eq!(psns(&p), [106]);
    assert!(p[0].h.bth.se && p[0].h.bth.ack_req);
    assert_eq!(p[0].h.imm, Some(u32::from_be_bytes(5u32.to_ne_bytes())));
}

#[test]
fn roce_link_segment_zero_length_send() {
    let t = rc(5, 0);
    t.send(0, &[]);
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::RC_SEND_ONLY]);
    assert_eq!(psns(&p), [5]);
    assert!(p[0].payload.is_empty() && p[0].h.bth.ack_req && p[0].h.bth.pad == 0);
    assert_eq!(p[0].raw.len(), 12 + 4);
    t.send(1, &[1]);
    let p = t.sent();
    assert_eq!(psns(&p), [6], "a zero-length message takes one PSN");
    assert_eq!(p[0].h.bth.pad, 3);
}

#[test]
fn roce_link_segment_write() {
    let t = rc(40, 0);
    let data = pat(3000, 4);
    t.write(0, 0x1000_2000_3000, 0xabcd, &data);
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::RC_WRITE_FIRST, op::RC_WRITE_MIDDLE, op::RC_WRITE_LAST]);
    assert_eq!(psns(&p), [40, 41, 42]);
    assert_eq!(p[0].h.reth, Some(Reth { va: 0x1000_2000_3000, rkey: 0xabcd, len: 3000 }), "RETH carries the whole length");
    assert!(p[1].h.reth.is_none() && p[2].h.reth.is_none());
    assert_eq!(p.iter().flat_map(|p| p.payload.clone()).collect::<Vec<_>>(), data);
    assert_eq!(p.iter().map(|p| p.h.bth.ack_req).collect::<Vec<_>>(), [false, false, true]);

    t.write(1, 0x77, 9, &pat(500, 5));
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::RC_WRITE_ONLY]);
    assert_eq!(p[0].h.reth, Some(Reth { va: 0x77, rkey: 9, len: 500 }));
    assert_eq!(psns(&p), [43]);

    let mut h = req(Op::Write, 2);
    h.raddr = 0x500;
    h.rkey = 3;
    h.flags = F_IMM;
    h.imm = 0x0102_0304;
    t.frame(h, &pat(2048, 6));
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::RC_WRITE_FIRST, op::RC_WRITE_LAST_IMM]);
    assert_eq!(p[0].h.reth.map(|r| r.len), Some(2048));
    assert_eq!((p[0].h.imm, p[1].h.imm.is_some()), (None, true));

    t.write(3, 0x900, 4, &[]);
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::RC_WRITE_ONLY]);
    assert_eq!(p[0].h.reth, Some(Reth { va: 0x900, rkey: 4, len: 0 }));
    assert_eq!(psns(&p), [46]);
}

#[test]
fn roce_link_segment_read_psns() {
    let t = rc(10, 0);
    // (length, PSNs it takes): max(1, ceil(len / MTU)).
    let mut psn = 10;
    for (i, (len, n)) in [(2500u32, 3u32), (0, 1), (1024, 1), (1025, 2), (1, 1)].into_iter().enumerate() {
        t.read(i as u32, 0x4000 + i as u64, 77, len);
        let p = t.sent();
        assert_eq!(opcodes(&p), [op::RC_READ_REQUEST]);
        assert_eq!(psns(&p), [psn]);
        assert!(p[0].h.bth.ack_req);
        assert_eq!(p[0].h.reth, Some(Reth { va: 0x4000 + i as u64, rkey: 77, len }));
        assert!(p[0].payload.is_empty());
        psn += n;
    }
    t.send(9, &[1, 2, 3]);
    assert_eq!(psns(&t.sent()), [psn], "the next request follows the READ's PSNs");
}

#[test]
fn roce_link_segment_psn_wrap() {
    let t = rc(0xff_fffe, 0);
    t.send(0, &pat(3000, 7));
    assert_eq!(psns(&t.sent()), [0xff_fffe, 0xff_ffff, 0]);
    t.send(1, &[]);
    assert_eq!(psns(&t.sent()), [1]);
    // An ACK across the wrap completes both.
    let d = t.inject(ack(1, aeth::ACK, 2), &[]);
    expect_resps(&d, &ok_acks(&[0, 1]));
}

#[test]
fn roce_link_segment_ack_every_64() {
    // rxe asks for an ACK within long messages too (every 64 packets here).
    let t = with(A_QPN, B_QPN, 256, 0, 0, T18, 7, 7, false);
    t.send(0, &pat(256 * 130, 8));
    let p = t.sent();
    assert_eq!(p.len(), 130);
    let asked: Vec<u32> = p.iter().filter(|p| p.h.bth.ack_req).map(|p| p.h.bth.psn).collect();
    assert_eq!(asked, [63, 127, 129]);
}

// ---- requester: ACKs ----

#[test]
fn roce_link_coalesced_ack() {
    let t = rc(10, 0);
    for i in 0..3 {
        t.send(7 + i, &pat(3000, i as u64));
    }
    assert_eq!(t.sent().len(), 9);
    // One ACK for the last PSN of the third message: PSNs 10-12, 13-15, 16-18.
    let d = t.inject(ack(18, aeth::ACK, 3), &[]);
    expect_resps(&d, &ok_acks(&[7, 8, 9]));
    assert!(!t.l.busy(), "nothing outstanding");
    t.nothing_sent();
    // A stale or repeated ACK completes nothing more.
    assert!(t.inject(ack(18, aeth::ACK, 3), &[]).is_empty());
}

#[test]
fn roce_link_ack_mid_message() {
    let t = rc(10, 0);
    for i in 0..3 {
        t.send(7 + i, &pat(3000, i as u64));
    }
    t.sent();
    // An ACK for a PSN inside the first message (asked for by a MIDDLE) completes nothing.
    assert!(t.inject(ack(11, aeth::ACK, 0), &[]).is_empty());
    // One inside the third completes the first two.
    expect_resps(&t.inject(ack(17, aeth::ACK, 2), &[]), &ok_acks(&[7, 8]));
    expect_resps(&t.inject(ack(18, aeth::ACK, 3), &[]), &ok_acks(&[9]));
    t.nothing_sent();
}

#[test]
fn roce_link_ack_past_outstanding_read_retries() {
    // roce.md: an ACK with a PSN past an outstanding READ counts as an implied NAK.
    let t = rc(10, 0);
    t.send(0, &[1]); // 10
    t.read(1, 0x100, 1, 100); // 11
    t.send(2, &[2]); // 12
    let orig = t.raw_sent();
    let d = t.inject(ack(12, aeth::ACK, 2), &[]);
    expect_resps(&d, &ok_acks(&[0]));
    assert_eq!(t.raw_sent(), orig[1..], "the READ and what follows it go again");
}

#[test]
fn roce_link_implied_nak_once_until_progress() {
    let t = rc(10, 0);
    t.read(0, 0x100, 1, 1500); // 10-11
    t.read(1, 0x900, 1, 10); // 12
    t.send(2, &[2]); // 13
    let orig = t.raw_sent();
    // An ACK at the READ's last PSN is not past it (our responder re-ACKs duplicates so).
    assert!(t.inject(ack_h(11), &[]).is_empty());
    t.nothing_sent();
    // Past it: the READs and the SEND go again, once; the duplicates this reaches are all
    // re-ACKed, and those ACKs must not start a resend each.
    assert!(t.inject(ack_h(13), &[]).is_empty());
    assert_eq!(t.raw_sent(), orig);
    for _ in 0..5 {
        assert!(t.inject(ack_h(13), &[]).is_empty());
        t.nothing_sent();
    }
    // Progress (the first READ completes) allows the next one.
    let a = pat(1500, 1);
    t.inject(rresp(op::RC_READ_RESPONSE_FIRST, 10), &a[..1024]);
    let d = t.inject(rresp(op::RC_READ_RESPONSE_LAST, 11), &a[1024..]);
    expect_resps(&d, &[(Op::ReadResp, 0, Syndrome::Ok)]);
    assert!(t.inject(ack_h(13), &[]).is_empty());
    assert_eq!(t.raw_sent(), orig[1..]);
}

// ---- requester: sequence NAK ----

#[test]
fn roce_link_sequence_nak_go_back_n() {
    let t = rc(10, 0);
    for i in 0..3 {
        t.send(i, &pat(3000, i as u64)); // 10-12, 13-15, 16-18
    }
    let orig = t.raw_sent();
    // The responder expected 14: the first message is done, 13 arrived.
    let d = t.inject(ack(14, aeth::NAK_PSN_SEQ, 1), &[]);
    expect_resps(&d, &ok_acks(&[0]));
    let again = t.raw_sent();
    assert_eq!(again, orig[4..], "resent from PSN 14 on: the rest of the second message, the third whole");
    // The completion of the rest still works.
    expect_resps(&t.inject(ack(18, aeth::ACK, 3), &[]), &ok_acks(&[1, 2]));
}

#[test]
fn roce_link_sequence_nak_once_until_progress() {
    // Each packet after a gap can bring a NAK (one per gap, and a resend makes new gaps
    // when reordered): only an ACK showing progress lets another NAK resend (rxe's
    // started_retry), else resends breed resends. The timer still resends.
    let t = rc(10, 0);
    for i in 0..3 {
        t.send(i, &pat(3000, i as u64)); // 10-12, 13-15, 16-18
    }
    let orig = t.raw_sent();
    expect_resps(&t.inject(ack(11, aeth::NAK_PSN_SEQ, 0), &[]), &[]);
    assert_eq!(t.raw_sent(), orig[1..]);
    assert!(t.inject(ack(12, aeth::NAK_PSN_SEQ, 0), &[]).is_empty());
    t.nothing_sent();
    t.tick(later());
    assert_eq!(t.raw_sent(), orig, "the timer resends everything outstanding");
    assert!(t.inject(ack(12, aeth::NAK_PSN_SEQ, 0), &[]).is_empty());
    t.nothing_sent();
    // Progress: the first message is ACKed; the next NAK resends again.
    expect_resps(&t.inject(ack_h(12), &[]), &ok_acks(&[0]));
    expect_resps(&t.inject(ack(14, aeth::NAK_PSN_SEQ, 1), &[]), &[]);
    assert_eq!(t.raw_sent(), orig[4..]);
}

#[test]
fn roce_link_sequence_nak_at_message_start() {
    let t = rc(10, 0);
    t.send(0, &pat(100, 1)); // 10
    t.send(1, &pat(2000, 2)); // 11-12
    let orig = t.raw_sent();
    let d = t.inject(ack(11, aeth::NAK_PSN_SEQ, 1), &[]);
    expect_resps(&d, &ok_acks(&[0]));
    assert_eq!(t.raw_sent(), orig[1..]);
}

// ---- requester: timeout ----

#[test]
fn roce_link_timeout_resends_then_retry_exceeded() {
    let t = with(A_QPN, B_QPN, MTU, 10, 0, T18, 2, 7, false);
    t.send(0, &pat(2000, 1)); // 10-11
    t.read(1, 0x10, 2, 50); // 12
    let orig = t.raw_sent();
    // Before the timeout: nothing.
    let (d, busy) = t.l.on_tick(Instant::now());
    assert!(d.is_empty() && busy);
    t.nothing_sent();
    // Each timeout resends everything outstanding; retry_cnt 2 allows two retries.
    for _ in 0..2 {
        assert!(t.tick(later()).is_empty());
        assert_eq!(t.raw_sent(), orig);
    }
    let (d, busy) = t.l.on_tick(later());
    expect_resps(&d, &[(Op::Ack, 0, Syndrome::NoQp)]);
    assert_eq!(crate::net::frame::Syndrome::NoQp as u8, 5, "NoQp: the QP layer's IBV_WC_RETRY_EXC_ERR");
    assert!(!busy && !t.l.busy(), "the QP goes to ERR; later WRs flush in the QP layer");
    t.nothing_sent();
    assert!(t.tick(later()).is_empty());
    t.nothing_sent();
}

#[test]
fn roce_link_timeout_progress_resets_retries() {
    let t = with(A_QPN, B_QPN, MTU, 10, 0, T18, 2, 7, false);
    t.send(0, &[1]); // 10
    t.send(1, &[2]); // 11
    let orig = t.raw_sent();
    for _ in 0..2 {
        t.tick(later());
        assert_eq!(t.raw_sent(), orig);
    }
    // Progress: the first completes; the second gets a fresh retry budget.
    expect_resps(&t.inject(ack(10, aeth::ACK, 1), &[]), &ok_acks(&[0]));
    for _ in 0..2 {
        assert!(t.tick(later()).is_empty());
        assert_eq!(t.raw_sent(), orig[1..]);
    }
    expect_resps(&t.tick(later()), &[(Op::Ack, 1, Syndrome::NoQp)]);
}

#[test]
fn roce_link_timeout_retry_7_forever() {
    let t = with(A_QPN, B_QPN, MTU, 10, 0, T18, 7, 7, false);
    t.send(0, &pat(1500, 1));
    let orig = t.raw_sent();
    for _ in 0..50 {
        assert!(t.tick(later()).is_empty());
        assert_eq!(t.raw_sent(), orig);
    }
    expect_resps(&t.inject(ack(11, aeth::ACK, 1), &[]), &ok_acks(&[0]));
}

#[test]
fn roce_link_timeout_zero_no_timer() {
    let t = with(A_QPN, B_QPN, MTU, 10, 0, 0, 1, 7, false);
    t.send(0, &[1]);
    t.sent();
    for _ in 0..5 {
        assert!(t.tick(later() + Duration::from_secs(3600)).is_empty());
        t.nothing_sent();
    }
}

#[test]
fn roce_link_sequence_naks_count_as_retries() {
    // roce.md: retry_cnt counts timeouts and sequence NAKs alike.
    let t = with(A_QPN, B_QPN, MTU, 10, 0, T18, 1, 7, false);
    t.send(0, &[1]);
    let orig = t.raw_sent();
    assert!(t.inject(ack(10, aeth::NAK_PSN_SEQ, 0), &[]).is_empty());
    assert_eq!(t.raw_sent(), orig);
    expect_resps(&t.tick(later()), &[(Op::Ack, 0, Syndrome::NoQp)]);
}

// ---- requester: RNR NAK ----

#[test]
fn roce_link_rnr_wait_then_resend() {
    let t = with(A_QPN, B_QPN, MTU, 10, 0, 10, 7, 3, false);
    t.send(0, &pat(3000, 1)); // 10-12
    t.send(1, &[1]); // 13
    t.send(2, &[2]); // 14
    let orig = t.raw_sent();
    // Code 0: 655.36 ms, rdma_cm's min_rnr_timer.
    let wait = Duration::from_micros(packet::rnr_timer_us(0));
    assert_eq!(wait, Duration::from_micros(655_360));
    let at = Instant::now();
    let d = t.inject(ack(13, aeth::RNR_NAK, 1), &[]);
    expect_resps(&d, &ok_acks(&[0]));
    // Nothing before the RNR timer, not even the ACK timeout (4 ms here).
    let (d, busy) = t.l.on_tick(Instant::now());
    assert!(d.is_empty() && busy);
    assert!(t.tick(at + wait - Duration::from_millis(100)).is_empty());
    t.nothing_sent();
    // Then everything from the NAK's PSN.
    assert!(t.tick(Instant::now() + wait + Duration::from_millis(1)).is_empty());
    assert_eq!(t.raw_sent(), orig[3..]);
    expect_resps(&t.inject(ack(14, aeth::ACK, 3), &[]), &ok_acks(&[1, 2]));
}

#[test]
fn roce_link_rnr_timer_codes() {
    // The wait follows the code: 31 → 491.52 ms.
    let t = with(A_QPN, B_QPN, MTU, 10, 0, T18, 7, 7, false);
    t.send(0, &[1]);
    let orig = t.raw_sent();
    let at = Instant::now();
    t.inject(ack(10, aeth::RNR_NAK | 31, 0), &[]);
    assert!(t.tick(at + Duration::from_millis(400)).is_empty());
    t.nothing_sent();
    t.tick(Instant::now() + Duration::from_micros(491_520));
    assert_eq!(t.raw_sent(), orig);
}

#[test]
fn roce_link_rnr_retry_exceeded() {
    let t = with(A_QPN, B_QPN, MTU, 10, 0, T18, 7, 2, false);
    t.send(0, &[1]);
    let orig = t.raw_sent();
    for _ in 0..2 {
        assert!(t.inject(ack(10, aeth::RNR_NAK | 1, 0), &[]).is_empty());
        t.tick(later());
        assert_eq!(t.raw_sent(), orig);
    }
    let d = t.inject(ack(10, aeth::RNR_NAK | 1, 0), &[]);
    expect_resps(&d, &[(Op::Ack, 0, Syndrome::RnrExceeded)]);
    assert!(!t.l.busy());
    t.tick(later());
    t.nothing_sent();
}

#[test]
fn roce_link_rnr_retry_7_forever() {
    let t = with(A_QPN, B_QPN, MTU, 10, 0, T18, 0, 7, false);
    t.send(0, &[1]);
    let orig = t.raw_sent();
    for _ in 0..30 {
        assert!(t.inject(ack(10, aeth::RNR_NAK | 1, 0), &[]).is_empty());
        t.tick(later());
        assert_eq!(t.raw_sent(), orig);
    }
    expect_resps(&t.inject(ack(10, aeth::ACK, 1), &[]), &ok_acks(&[0]));
}

// ---- requester: remote errors ----

#[test]
fn roce_link_remote_error_naks() {
    for (code, syn) in [
        (aeth::NAK_INV_REQ, Syndrome::RemInvReq),
        (aeth::NAK_REM_ACCESS, Syndrome::RemAccess),
        (aeth::NAK_REM_OP, Syndrome::RemOp),
        (aeth::NAK_INV_RD, Syndrome::RemOp),
    ] {
        let t = rc(10, 0);
        t.send(0, &[1]); // 10
        t.write(1, 0x10, 5, &pat(2000, 1)); // 11-12
        t.send(2, &[3]); // 13
        t.sent();
        // The NAK names the failing message's PSN (here one inside it): earlier ones are done.
        let d = t.inject(ack(12, code, 1), &[]);
        expect_resps(&d, &[(Op::Ack, 0, Syndrome::Ok), (Op::Ack, 1, syn)]);
        assert!(!t.l.busy(), "later messages are flushed by the QP layer, not sent");
        t.tick(later());
        t.nothing_sent();
    }
}

// ---- requester: READ ----

#[test]
fn roce_link_read_reassembly() {
    let t = rc(10, 0);
    t.read(4, 0x8000, 66, 2500); // 10-12
    t.send(5, &[9]); // 13
    t.sent();
    let data = pat(2500, 9);
    assert!(t.inject(rresp(op::RC_READ_RESPONSE_FIRST, 10), &data[..1024]).is_empty());
    assert!(t.inject(rresp(op::RC_READ_RESPONSE_MIDDLE, 11), &data[1024..2048]).is_empty());
    let d = t.inject(rresp(op::RC_READ_RESPONSE_LAST, 12), &data[2048..]);
    expect_resps(&d, &[(Op::ReadResp, 4, Syndrome::Ok)]);
    assert_eq!(resps(&d)[0].1, data);
    t.nothing_sent();
    expect_resps(&t.inject(ack(13, aeth::ACK, 2), &[]), &ok_acks(&[5]));
}

#[test]
fn roce_link_read_zero_length() {
    let t = rc(10, 0);
    t.read(0, 0, 0, 0);
    t.sent();
    let d = t.inject(rresp(op::RC_READ_RESPONSE_ONLY, 10), &[]);
    expect_resps(&d, &[(Op::ReadResp, 0, Syndrome::Ok)]);
    assert!(resps(&d)[0].1.is_empty());
}

#[test]
fn roce_link_read_lost_response_resumes() {
    let t = rc(10, 0);
    let va = 0x1_0000_0000;
    t.read(0, va, 0x42, 4000); // 10-13: 1024 ×3 + 928
    t.sent();
    let data = pat(4000, 3);
    let chunk = |i: usize| &data[i * 1024..((i + 1) * 1024).min(4000)];
    assert!(t.inject(rresp(op::RC_READ_RESPONSE_FIRST, 10), chunk(0)).is_empty());
    t.nothing_sent();
    // 11 is lost; 12 arrives: ask again for the rest, from 11.
    assert!(t.inject(rresp(op::RC_READ_RESPONSE_MIDDLE, 12), chunk(2)).is_empty());
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::RC_READ_REQUEST]);
    assert_eq!(psns(&p), [11]);
    assert!(p[0].h.bth.ack_req);
    assert_eq!(p[0].h.reth, Some(Reth { va: va + 1024, rkey: 0x42, len: 4000 - 1024 }));
    // Once per gap: the LAST that follows asks nothing more.
    assert!(t.inject(rresp(op::RC_READ_RESPONSE_LAST, 13), chunk(3)).is_empty());
    t.nothing_sent();
    // The responses to the new request restart at 11 with FIRST; 12 is lost this time.
    assert!(t.inject(rresp(op::RC_READ_RESPONSE_FIRST, 11), chunk(1)).is_empty());
    assert!(t.inject(rresp(op::RC_READ_RESPONSE_LAST, 13), chunk(3)).is_empty());
    let p = t.sent();
    assert_eq!(psns(&p), [12], "a second gap asks again, once");
    assert_eq!(p[0].h.reth, Some(Reth { va: va + 2048, rkey: 0x42, len: 4000 - 2048 }));
    assert!(t.inject(rresp(op::RC_READ_RESPONSE_LAST, 13), chunk(3)).is_empty());
    t.nothing_sent();
    assert!(t.inject(rresp(op::RC_READ_RESPONSE_FIRST, 12), chunk(2)).is_empty());
    let d = t.inject(rresp(op::RC_READ_RESPONSE_LAST, 13), chunk(3));
    expect_resps(&d, &[(Op::ReadResp, 0, Syndrome::Ok)]);
    assert_eq!(resps(&d)[0].1, data);
    t.nothing_sent();
}

#[test]
fn roce_link_read_old_responses_ignored() {
    let t = rc(10, 0);
    t.read(0, 0x100, 1, 2048); // 10-11
    t.sent();
    let data = pat(2048, 4);
    t.inject(rresp(op::RC_READ_RESPONSE_FIRST, 10), &data[..1024]);
    // A repeated FIRST (an old PSN) neither restarts nor doubles the data.
    assert!(t.inject(rresp(op::RC_READ_RESPONSE_FIRST, 10), &data[..1024]).is_empty());
    let d = t.inject(rresp(op::RC_READ_RESPONSE_LAST, 11), &data[1024..]);
    assert_eq!(resps(&d)[0].1, data);
    // A response for a PSN nothing waits for is dropped.
    assert!(t.inject(rresp(op::RC_READ_RESPONSE_ONLY, 11), &[1]).is_empty());
    t.nothing_sent();
}

#[test]
fn roce_link_read_timeout_resumes() {
    let t = rc(10, 0);
    t.read(0, 0x100, 1, 3000); // 10-12
    let orig = t.raw_sent();
    let data = pat(3000, 5);
    // Nothing arrived: the timeout sends the request again as it was.
    t.tick(later());
    assert_eq!(t.raw_sent(), orig);
    // FIRST arrived: the timeout asks for the rest only (roce.md: a READ resumes at the
    // first missing response), and keeps the bytes it has.
    t.inject(rresp(op::RC_READ_RESPONSE_FIRST, 10), &data[..1024]);
    t.tick(later());
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::RC_READ_REQUEST]);
    assert_eq!(psns(&p), [11]);
    assert_eq!(p[0].h.reth, Some(Reth { va: 0x100 + 1024, rkey: 1, len: 3000 - 1024 }));
    // A late MIDDLE of the first answer is not taken for the new answer's FIRST.
    assert!(t.inject(rresp(op::RC_READ_RESPONSE_MIDDLE, 11), &data[1024..2048]).is_empty());
    t.nothing_sent();
    t.inject(rresp(op::RC_READ_RESPONSE_FIRST, 11), &data[1024..2048]);
    let d = t.inject(rresp(op::RC_READ_RESPONSE_LAST, 12), &data[2048..]);
    expect_resps(&d, &[(Op::ReadResp, 0, Syndrome::Ok)]);
    assert_eq!(resps(&d)[0].1, data, "nothing doubled, nothing lost");
}

#[test]
fn roce_link_read_done_behind_atomic() {
    // A READ whose responses all came waits for the atomic before it, is not asked for
    // again on a timeout, and completes right after the atomic, before later messages.
    let t = rc(10, 0);
    let mut h = req(Op::FetchAdd, 0);
    h.aux = 1;
    t.frame(h, &[]); // 10
    t.read(1, 0x100, 1, 100); // 11
    t.send(2, &[1]); // 12
    let orig = t.raw_sent();
    let data = pat(100, 6);
    assert!(t.inject(rresp(op::RC_READ_RESPONSE_ONLY, 11), &data).is_empty());
    t.tick(later());
    assert_eq!(t.raw_sent(), [orig[0].clone(), orig[2].clone()], "the atomic and the SEND go again, the READ does not");
    let ack = Headers { bth: bth(op::RC_ATOMIC_ACK, 10, A_QPN), aeth: Some(Aeth { syndrome: aeth::ACK, msn: 1 }), atomic_ack: Some(9), ..Headers::default() };
    let d = t.inject(ack, &[]);
    expect_resps(&d, &[(Op::AtomicResp, 0, Syndrome::Ok), (Op::ReadResp, 1, Syndrome::Ok)]);
    assert_eq!(resps(&d)[1].1, data);
    expect_resps(&t.inject(ack_h(12), &[]), &ok_acks(&[2]));
}

#[test]
fn roce_link_read_done_behind_send_behind_atomic() {
    // atomic, SEND, READ: the READ's response completes nothing (the atomic is first) and
    // waits; the ATOMIC ACK, then the SEND's ACK, let it through, in order.
    let t = rc(10, 0);
    let mut h = req(Op::CmpSwap, 0);
    h.aux = 1;
    t.frame(h, &[]); // 10
    t.send(1, &[1]); // 11
    t.read(2, 0x100, 1, 10); // 12
    t.sent();
    assert!(t.inject(rresp(op::RC_READ_RESPONSE_ONLY, 12), &pat(10, 1)).is_empty());
    let ack = Headers { bth: bth(op::RC_ATOMIC_ACK, 10, A_QPN), aeth: Some(Aeth { syndrome: aeth::ACK, msn: 1 }), atomic_ack: Some(9), ..Headers::default() };
    expect_resps(&t.inject(ack, &[]), &[(Op::AtomicResp, 0, Syndrome::Ok)]);
    expect_resps(&t.inject(ack_h(11), &[]), &[(Op::Ack, 1, Syndrome::Ok), (Op::ReadResp, 2, Syndrome::Ok)]);
    assert!(!t.l.busy());
}

#[test]
fn roce_link_reads_complete_in_order() {
    let t = rc(10, 0);
    t.read(0, 0x100, 1, 2000); // 10-11
    t.read(1, 0x900, 1, 100); // 12
    t.sent();
    let (a, b) = (pat(2000, 6), pat(100, 7));
    // The second READ's response comes first: held until the first READ is done.
    assert!(t.inject(rresp(op::RC_READ_RESPONSE_ONLY, 12), &b).is_empty());
    assert!(t.inject(rresp(op::RC_READ_RESPONSE_FIRST, 10), &a[..1024]).is_empty());
    let d = t.inject(rresp(op::RC_READ_RESPONSE_LAST, 11), &a[1024..]);
    expect_resps(&d, &[(Op::ReadResp, 0, Syndrome::Ok), (Op::ReadResp, 1, Syndrome::Ok)]);
    let r = resps(&d);
    assert_eq!((&r[0].1, &r[1].1), (&a, &b));
}

#[test]
fn roce_link_read_response_completes_earlier_sends() {
    let t = rc(10, 0);
    t.send(0, &pat(1500, 1)); // 10-11
    t.write(1, 0x10, 2, &[1]); // 12
    t.read(2, 0x100, 3, 100); // 13
    t.sent();
    let data = pat(100, 8);
    let d = t.inject(rresp(op::RC_READ_RESPONSE_ONLY, 13), &data);
    expect_resps(&d, &[(Op::Ack, 0, Syndrome::Ok), (Op::Ack, 1, Syndrome::Ok), (Op::ReadResp, 2, Syndrome::Ok)]);
    assert_eq!(resps(&d)[2].1, data);
}

// ---- requester: atomics ----

#[test]
fn roce_link_atomics() {
    let t = rc(10, 0);
    let mut h = req(Op::CmpSwap, 3);
    h.raddr = 0x1122_3344_5566_7780;
    h.rkey = 0x99;
    h.aux = 0xaaaa; // compare
    h.aux2 = 0xbbbb; // swap
    t.frame(h, &[]);
    let mut h = req(Op::FetchAdd, 4);
    h.raddr = 0x2000;
    h.rkey = 0x98;
    h.aux = 5; // add
    t.frame(h, &[]);
    t.send(5, &[1]);
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::RC_CMP_SWAP, op::RC_FETCH_ADD, op::RC_SEND_ONLY]);
    assert_eq!(psns(&p), [10, 11, 12], "an atomic takes one PSN");
    assert!(p[0].h.bth.ack_req && p[1].h.bth.ack_req);
    assert_eq!(p[0].h.atomic, Some(AtomicEth { va: 0x1122_3344_5566_7780, rkey: 0x99, swap_add: 0xbbbb, compare: 0xaaaa }));
    assert_eq!(p[1].h.atomic, Some(AtomicEth { va: 0x2000, rkey: 0x98, swap_add: 5, compare: 0 }));
    // Swap before compare on the wire (roce.md; rxe and wireshark agree).
    assert_eq!(p[0].raw[12 + 12..12 + 20], 0xbbbbu64.to_be_bytes());

    let atomic_ack = |psn: u32, orig: u64| Headers {
        bth: bth(op::RC_ATOMIC_ACK, psn, A_QPN),
        aeth: Some(Aeth { syndrome: aeth::ACK, msn: 1 }),
        atomic_ack: Some(orig),
        ..Headers::default()
    };
    let d = t.inject(atomic_ack(10, 0x0102_0304_0506_0708), &[]);
    expect_resps(&d, &[(Op::AtomicResp, 3, Syndrome::Ok)]);
    assert_eq!(resps(&d)[0].1, [1, 2, 3, 4, 5, 6, 7, 8], "the original value, big-endian");
    // An ATOMIC ACK for another PSN than the front atomic's completes nothing.
    assert!(t.inject(atomic_ack(10, 1), &[]).is_empty());
    let d = t.inject(atomic_ack(11, 42), &[]);
    expect_resps(&d, &[(Op::AtomicResp, 4, Syndrome::Ok)]);
    assert_eq!(resps(&d)[0].1, 42u64.to_be_bytes());
    expect_resps(&t.inject(ack(12, aeth::ACK, 3), &[]), &ok_acks(&[5]));
}

// ---- responder ----

/// B's link: QP `B_QPN`, peer `A_QPN`, expecting PSN 500.
fn resp_side() -> T {
    with(B_QPN, A_QPN, MTU, 9000, 500, T18, 7, 7, false)
}

fn answer_ack(t: &T, r: &Header) {
    t.frame(answer(r, Op::Ack, Syndrome::Ok), &[]);
}

#[test]
fn roce_link_responder_reassembles_send() {
    let t = resp_side();
    let data = pat(3000, 10);
    assert!(t.inject(rq(op::RC_SEND_FIRST, 500, false), &data[..1024]).is_empty());
    assert!(t.inject(rq(op::RC_SEND_MIDDLE, 501, false), &data[1024..2048]).is_empty());
    let mut last = rq(op::RC_SEND_LAST_IMM, 502, true);
    last.bth.se = true;
    last.imm = Some(0x0a0b_0c0d);
    let d = t.inject(last, &data[2048..]);
    t.nothing_sent();
    let r = reqs(&d);
    assert_eq!(r.len(), 1);
    assert!(resps(&d).is_empty());
    let (h, p) = &r[0];
    assert_eq!(h.op, Op::Send);
    assert_eq!(p, &data);
    assert_eq!(h.payload_len, 3000);
    assert_eq!(h.flags, F_IMM | F_SOLICITED);
    assert_eq!(h.imm.to_ne_bytes(), [0x0a, 0x0b, 0x0c, 0x0d], "the ImmDt bytes, as the application reads them");
    assert_eq!((h.dst_qpn, h.src_qpn), (B_QPN, A_QPN));

    // The QP layer's answer: an ACK for the message's last PSN, MSN 1.
    answer_ack(&t, h);
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::RC_ACK]);
    assert_eq!(psns(&p), [502]);
    assert_eq!(p[0].h.aeth, Some(Aeth { syndrome: aeth::ACK, msn: 1 }));

    // A WRITE: RETH from FIRST, one Write frame, next MSN.
    let data = pat(1500, 11);
    let mut first = rq(op::RC_WRITE_FIRST, 503, false);
    first.reth = Some(Reth { va: 0xfeed_0000, rkey: 0x1234, len: 1500 });
    assert!(t.inject(first, &data[..1024]).is_empty());
    let d = t.inject(rq(op::RC_WRITE_LAST, 504, true), &data[1024..]);
    let r = reqs(&d);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].0.op, r[0].0.raddr, r[0].0.rkey, r[0].0.flags), (Op::Write, 0xfeed_0000, 0x1234, 0));
    assert_eq!(r[0].1, data);
    assert_eq!(r[0].0.psn, h.psn + 1, "the QP layer's PSNs count messages");
    answer_ack(&t, &r[0].0);
    let p = t.sent();
    assert_eq!(psns(&p), [504]);
    assert_eq!(p[0].h.aeth.map(|a| a.msn), Some(2));
}

#[test]
fn roce_link_responder_middle_ack_req() {
    let t = resp_side();
    let data = pat(3000, 12);
    t.inject(rq(op::RC_SEND_FIRST, 500, false), &data[..1024]);
    t.nothing_sent();
    assert!(t.inject(rq(op::RC_SEND_MIDDLE, 501, true), &data[1024..2048]).is_empty());
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::RC_ACK]);
    assert_eq!(psns(&p), [501]);
    assert_eq!(p[0].h.aeth, Some(Aeth { syndrome: aeth::ACK, msn: 0 }));
    let d = t.inject(rq(op::RC_SEND_LAST, 502, true), &data[2048..]);
    assert_eq!(reqs(&d)[0].1, data);
}

#[test]
fn roce_link_responder_no_ack_before_earlier_message_answered() {
    // An ACK covers every earlier message: the responder must not send one (not even for a
    // MIDDLE that asks) while an earlier message still waits for the QP layer, whose answer
    // may be an error.
    let t = resp_side();
    let d = t.inject(rq(op::RC_SEND_ONLY, 500, true), &[1, 2, 3]);
    let first = reqs(&d)[0].0;
    let data = pat(3000, 13);
    t.inject(rq(op::RC_SEND_FIRST, 501, false), &data[..1024]);
    t.inject(rq(op::RC_SEND_MIDDLE, 502, true), &data[1024..2048]);
    t.nothing_sent();
    // The QP layer refuses the first message (e.g. its receive buffer is too small): NAK.
    t.frame(answer(&first, Op::Ack, Syndrome::RemOp), &[]);
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::RC_ACK]);
    assert_eq!(psns(&p), [500]);
    assert_eq!(p[0].h.aeth.map(|a| a.syndrome), Some(aeth::NAK_REM_OP));
}

#[test]
fn roce_link_responder_nak_codes() {
    for (syn, code) in [(Syndrome::RemAccess, aeth::NAK_REM_ACCESS), (Syndrome::RemInvReq, aeth::NAK_INV_REQ), (Syndrome::RemOp, aeth::NAK_REM_OP), (Syndrome::RnrExceeded, aeth::NAK_REM_OP)] {
        let t = resp_side();
        let mut w = rq(op::RC_WRITE_ONLY, 500, true);
        w.reth = Some(Reth { va: 1, rkey: 2, len: 1 });
        let d = t.inject(w, &[7]);
        t.frame(answer(&reqs(&d)[0].0, Op::Ack, syn), &[]);
        let p = t.sent();
        assert_eq!(psns(&p), [500]);
        assert_eq!(p[0].h.aeth, Some(Aeth { syndrome: code, msn: 0 }));
        // The responder takes no more requests.
        assert!(t.inject(rq(op::RC_SEND_ONLY, 501, true), &[1]).is_empty());
        t.nothing_sent();
    }
}

#[test]
fn roce_link_responder_sequence_gap() {
    let t = resp_side();
    // 500 and 501 lost: one NAK carrying the expected PSN.
    assert!(t.inject(rq(op::RC_SEND_ONLY, 502, true), &[2]).is_empty());
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::RC_ACK]);
    assert_eq!(psns(&p), [500]);
    assert_eq!(p[0].h.aeth, Some(Aeth { syndrome: aeth::NAK_PSN_SEQ, msn: 0 }));
    // Later out-of-order packets: silence.
    assert!(t.inject(rq(op::RC_SEND_ONLY, 503, true), &[3]).is_empty());
    assert!(t.inject(rq(op::RC_SEND_ONLY, 502, true), &[2]).is_empty());
    t.nothing_sent();
    // The expected PSN is accepted; a new gap gets a new NAK with the new expected PSN.
    let d = t.inject(rq(op::RC_SEND_ONLY, 500, true), &[0]);
    assert_eq!(reqs(&d).len(), 1);
    assert!(t.inject(rq(op::RC_SEND_ONLY, 502, true), &[2]).is_empty());
    let p = t.sent();
    assert_eq!(psns(&p), [501]);
    assert_eq!(p[0].h.aeth.map(|a| a.syndrome), Some(aeth::NAK_PSN_SEQ));
    let d = t.inject(rq(op::RC_SEND_ONLY, 501, true), &[1]);
    assert_eq!(reqs(&d)[0].1, [1]);
}

#[test]
fn roce_link_responder_duplicate_send() {
    let t = resp_side();
    let d = t.inject(rq(op::RC_SEND_ONLY, 500, true), &[1]);
    answer_ack(&t, &reqs(&d)[0].0);
    assert_eq!(psns(&t.sent()), [500]);
    let data = pat(2000, 14);
    t.inject(rq(op::RC_SEND_FIRST, 501, false), &data[..1024]);
    let d = t.inject(rq(op::RC_SEND_LAST, 502, true), &data[1024..]);
    answer_ack(&t, &reqs(&d)[0].0);
    assert_eq!(psns(&t.sent()), [502]);
    // Duplicates (the ACKs were lost): re-ACKed with the last acknowledged PSN and the
    // current MSN, never handed to the QP layer again.
    for (opc, psn, payload) in [(op::RC_SEND_ONLY, 500, &[1u8][..]), (op::RC_SEND_FIRST, 501, &data[..1024]), (op::RC_SEND_LAST, 502, &data[1024..])] {
        let d = t.inject(rq(opc, psn, opc != op::RC_SEND_FIRST), payload);
        assert!(d.is_empty(), "a duplicate is not delivered again");
        let p = t.sent();
        assert_eq!(opcodes(&p), [op::RC_ACK]);
        assert_eq!(psns(&p), [502]);
        assert_eq!(p[0].h.aeth, Some(Aeth { syndrome: aeth::ACK, msn: 2 }));
    }
}

#[test]
fn roce_link_responder_rnr_nak() {
    // No receive posted: the QP layer hands the SEND back (`refuse_rnr`, with its
    // min_rnr_timer); the link NAKs RNR at the message's last PSN, drops what came
    // after it, and hands the whole message over again when the last packet comes again.
    let t = resp_side();
    let data = pat(1524, 15);
    t.inject(rq(op::RC_SEND_FIRST, 500, false), &data[..1024]);
    let mut last = rq(op::RC_SEND_LAST_IMM, 501, false);
    last.bth.se = true;
    last.imm = Some(0x0102_0304);
    let d = t.inject(last, &data[1024..]);
    let (r1, p1) = reqs(&d)[0].clone();
    let mut w = rq(op::RC_WRITE_ONLY, 502, true);
    w.reth = Some(Reth { va: 0x9000, rkey: 7, len: 3 });
    let r2 = reqs(&t.inject(w, &[1, 2, 3]))[0].0;
    assert!(t.l.refuse_rnr(&r1, &p1, 14));
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::RC_ACK]);
    assert_eq!(psns(&p), [501]);
    assert_eq!(p[0].h.aeth, Some(Aeth { syndrome: aeth::RNR_NAK | 14, msn: 0 }));
    // The responder dropped the WRITE behind it: its late answer goes nowhere.
    answer_ack(&t, &r2);
    // Packets in flight behind the refused one: neither taken nor NAKed.
    assert!(t.inject(rq(op::RC_SEND_ONLY, 503, true), &[9]).is_empty());
    t.nothing_sent();
    // rxe resends from its first unacknowledged packet: the FIRST is a duplicate.
    assert!(t.inject(rq(op::RC_SEND_FIRST, 500, false), &data[..1024]).is_empty());
    t.sent();
    // The last packet again: the whole message, as first delivered, under a new PSN.
    let mut again = rq(op::RC_SEND_LAST_IMM, 501, true);
    again.bth.se = true;
    again.imm = Some(0x0102_0304);
    let d = t.inject(again, &data[1024..]);
    let (h, p) = reqs(&d)[0].clone();
    assert_eq!(p, data);
    assert_eq!((h.op, h.flags, h.imm, h.payload_len), (Op::Send, F_IMM | F_SOLICITED, r1.imm, 1524));
    assert_ne!(h.psn, r1.psn);
    answer_ack(&t, &h);
    let p = t.sent();
    assert_eq!(psns(&p), [501]);
    assert_eq!(p[0].h.aeth, Some(Aeth { syndrome: aeth::ACK, msn: 1 }));
    // And what followed it is taken again.
    let mut w = rq(op::RC_WRITE_ONLY, 502, true);
    w.reth = Some(Reth { va: 0x9000, rkey: 7, len: 3 });
    let d = t.inject(w, &[1, 2, 3]);
    assert_eq!(reqs(&d)[0].0.raddr, 0x9000);
}

#[test]
fn roce_link_responder_read_and_duplicate_read() {
    let t = resp_side();
    let mut r = rq(op::RC_READ_REQUEST, 500, true);
    r.reth = Some(Reth { va: 0x7000, rkey: 0x55, len: 2500 });
    let d = t.inject(r, &[]);
    t.nothing_sent();
    let q = reqs(&d);
    assert_eq!(q.len(), 1);
    assert_eq!((q[0].0.op, q[0].0.raddr, q[0].0.rkey, q[0].0.aux), (Op::ReadReq, 0x7000, 0x55, 2500));
    // The READ took 3 PSNs: the next request is 503.
    let d = t.inject(rq(op::RC_SEND_ONLY, 503, true), &[1]);
    let s = reqs(&d)[0].0;
    // READ RESPONSE segmentation: FIRST (AETH), MIDDLE (none), LAST (AETH), the READ's PSNs.
    let data = pat(2500, 15);
    t.frame(answer(&q[0].0, Op::ReadResp, Syndrome::Ok), &data);
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::RC_READ_RESPONSE_FIRST, op::RC_READ_RESPONSE_MIDDLE, op::RC_READ_RESPONSE_LAST]);
    assert_eq!(psns(&p), [500, 501, 502]);
    assert_eq!(p.iter().map(|p| p.h.aeth).collect::<Vec<_>>(), [Some(Aeth { syndrome: aeth::ACK, msn: 1 }), None, Some(Aeth { syndrome: aeth::ACK, msn: 1 })]);
    assert_eq!(p.iter().map(|p| p.payload.len()).collect::<Vec<_>>(), [1024, 1024, 452]);
    assert_eq!(p.iter().flat_map(|p| p.payload.clone()).collect::<Vec<_>>(), data);
    assert_eq!(p[2].h.bth.pad, 0);
    answer_ack(&t, &s);
    assert_eq!(psns(&t.sent()), [503]);

    // A duplicate READ is executed again (a new request frame) and answered at its PSNs.
    let d = t.inject(r, &[]);
    let q2 = reqs(&d);
    assert_eq!(q2.len(), 1);
    assert_eq!((q2[0].0.op, q2[0].0.raddr, q2[0].0.aux), (Op::ReadReq, 0x7000, 2500));
    assert_ne!(q2[0].0.psn, q[0].0.psn);
    t.frame(answer(&q2[0].0, Op::ReadResp, Syndrome::Ok), &data);
    assert_eq!(psns(&t.sent()), [500, 501, 502]);

    // A READ resumed mid-way (a response was lost): from its PSN, the rest of the range.
    let mut resumed = rq(op::RC_READ_REQUEST, 501, true);
    resumed.reth = Some(Reth { va: 0x7000 + 1024, rkey: 0x55, len: 2500 - 1024 });
    let q3 = reqs(&t.inject(resumed, &[]));
    assert_eq!((q3[0].0.raddr, q3[0].0.aux), (0x7400, 1476));
    t.frame(answer(&q3[0].0, Op::ReadResp, Syndrome::Ok), &data[1024..]);
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::RC_READ_RESPONSE_FIRST, op::RC_READ_RESPONSE_LAST]);
    assert_eq!(psns(&p), [501, 502]);

    // Outside the remembered READ (another R_Key, past its end): dropped.
    let mut bad = r;
    bad.reth = Some(Reth { va: 0x7000, rkey: 0x56, len: 2500 });
    assert!(t.inject(bad, &[]).is_empty());
    bad.reth = Some(Reth { va: 0x7000, rkey: 0x55, len: 2501 });
    assert!(t.inject(bad, &[]).is_empty());
    t.nothing_sent();
}

#[test]
fn roce_link_responder_duplicate_read_keeps_last_acked() {
    // A READ executed again after later messages were acknowledged must not move the PSN
    // that duplicates are re-ACKed with backwards: the requester would wait forever.
    let t = resp_side();
    let r = Headers { reth: Some(Reth { va: 0x10, rkey: 1, len: 100 }), ..rq(op::RC_READ_REQUEST, 500, true) };
    let q = reqs(&t.inject(r, &[]))[0].0;
    let s = reqs(&t.inject(rq(op::RC_SEND_ONLY, 501, true), &[1]))[0].0;
    t.frame(answer(&q, Op::ReadResp, Syndrome::Ok), &pat(100, 1));
    answer_ack(&t, &s);
    assert_eq!(psns(&t.sent()), [500, 501]);
    let q2 = reqs(&t.inject(r, &[]))[0].0;
    t.frame(answer(&q2, Op::ReadResp, Syndrome::Ok), &pat(100, 1));
    assert_eq!(opcodes(&t.sent()), [op::RC_READ_RESPONSE_ONLY]);
    assert!(t.inject(rq(op::RC_SEND_ONLY, 501, true), &[1]).is_empty());
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::RC_ACK]);
    assert_eq!(psns(&p), [501]);
}

#[test]
fn roce_link_responder_duplicate_atomic() {
    let t = resp_side();
    let cs = Headers { atomic: Some(AtomicEth { va: 0x8008, rkey: 3, swap_add: 0x5a5a, compare: 0xc0c0 }), ..rq(op::RC_CMP_SWAP, 500, true) };
    let d = t.inject(cs, &[]);
    let q = reqs(&d);
    assert_eq!(q.len(), 1);
    let h = q[0].0;
    assert_eq!((h.op, h.raddr, h.rkey, h.aux, h.aux2), (Op::CmpSwap, 0x8008, 3, 0xc0c0, 0x5a5a));
    // A duplicate before the answer: dropped (never executed twice).
    assert!(t.inject(cs, &[]).is_empty());
    t.nothing_sent();
    t.frame(answer(&h, Op::AtomicResp, Syndrome::Ok), &0x1122_3344_5566_7788u64.to_be_bytes());
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::RC_ATOMIC_ACK]);
    assert_eq!(psns(&p), [500]);
    assert_eq!(p[0].h.atomic_ack, Some(0x1122_3344_5566_7788));
    assert_eq!(p[0].h.aeth, Some(Aeth { syndrome: aeth::ACK, msn: 1 }));
    // After the answer: the saved ATOMIC ACK again, no new request.
    for _ in 0..2 {
        assert!(t.inject(cs, &[]).is_empty());
        let again = t.sent();
        assert_eq!(opcodes(&again), [op::RC_ATOMIC_ACK]);
        assert_eq!(again[0].h.atomic_ack, Some(0x1122_3344_5566_7788));
        assert_eq!(psns(&again), [500]);
    }
    // FETCH_ADD: the add goes in aux.
    let fa = Headers { atomic: Some(AtomicEth { va: 0x9000, rkey: 4, swap_add: 7, compare: 0 }), ..rq(op::RC_FETCH_ADD, 501, true) };
    let q = reqs(&t.inject(fa, &[]));
    assert_eq!((q[0].0.op, q[0].0.aux, q[0].0.raddr), (Op::FetchAdd, 7, 0x9000));
    // An unknown atomic PSN among the duplicates: dropped.
    let old = Headers { atomic: Some(AtomicEth { va: 0x8008, rkey: 3, swap_add: 0, compare: 0 }), ..rq(op::RC_FETCH_ADD, 499, true) };
    assert!(t.inject(old, &[]).is_empty());
    t.nothing_sent();
}

#[test]
fn roce_link_responder_bad_length() {
    // A FIRST shorter than the MTU.
    let t = resp_side();
    assert!(t.inject(rq(op::RC_SEND_FIRST, 500, false), &pat(1000, 1)).is_empty());
    let p = t.sent();
    assert_eq!(psns(&p), [500]);
    assert_eq!(p[0].h.aeth.map(|a| a.syndrome), Some(aeth::NAK_INV_REQ));
    assert!(t.inject(rq(op::RC_SEND_ONLY, 500, true), &[1]).is_empty());
    assert!(t.inject(rq(op::RC_SEND_ONLY, 501, true), &[1]).is_empty());
    t.nothing_sent();

    // A MIDDLE longer than the MTU.
    let t = resp_side();
    t.inject(rq(op::RC_SEND_FIRST, 500, false), &pat(1024, 1));
    assert!(t.inject(rq(op::RC_SEND_MIDDLE, 501, false), &pat(1025, 2)).is_empty());
    let p = t.sent();
    assert_eq!(psns(&p), [501]);
    assert_eq!(p[0].h.aeth.map(|a| a.syndrome), Some(aeth::NAK_INV_REQ));
    assert!(t.inject(rq(op::RC_SEND_LAST, 502, true), &[1]).is_empty());
    t.nothing_sent();

    // Opcode out of sequence (a MIDDLE with no FIRST) and a WRITE whose length is not its RETH's.
    let t = resp_side();
    assert!(t.inject(rq(op::RC_SEND_MIDDLE, 500, false), &pat(1024, 1)).is_empty());
    assert_eq!(t.sent()[0].h.aeth.map(|a| a.syndrome), Some(aeth::NAK_INV_REQ));
    let t = resp_side();
    let w = Headers { reth: Some(Reth { va: 0, rkey: 1, len: 10 }), ..rq(op::RC_WRITE_ONLY, 500, true) };
    assert!(t.inject(w, &[1, 2, 3]).is_empty());
    assert_eq!(t.sent()[0].h.aeth.map(|a| a.syndrome), Some(aeth::NAK_INV_REQ));
}

// ---- UC ----

#[test]
fn roce_link_uc_requester() {
    let t = with(A_QPN, B_QPN, MTU, 10, 0, T18, 7, 7, true);
    t.send(0, &pat(3000, 1));
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::UC_SEND_FIRST, op::UC_SEND_MIDDLE, op::UC_SEND_LAST]);
    assert_eq!(psns(&p), [10, 11, 12]);
    assert!(p.iter().all(|p| !p.h.bth.ack_req), "nothing acknowledges UC");
    t.write(1, 0x40, 2, &pat(1500, 2));
    let p = t.sent();
    assert_eq!(opcodes(&p), [op::UC_WRITE_FIRST, op::UC_WRITE_LAST]);
    assert_eq!(p[0].h.reth, Some(Reth { va: 0x40, rkey: 2, len: 1500 }));
    assert!(t.l.busy(), "completions wait for the timer");
    // The completions come out of the next tick, at once, in order.
    let (d, busy) = t.l.on_tick(Instant::now());
    expect_resps(&d, &ok_acks(&[0, 1]));
    assert!(!busy && !t.l.busy());
    // No timer, no retransmission.
    assert!(t.tick(later()).is_empty());
    t.nothing_sent();
}

#[test]
fn roce_link_uc_responder() {
    let t = with(B_QPN, A_QPN, MTU, 9000, 500, T18, 7, 7, true);
    let a = pat(3000, 3);
    // A whole message: delivered, no ACK even when asked.
    t.inject(rq(op::UC_SEND_FIRST, 500, true), &a[..1024]);
    t.inject(rq(op::UC_SEND_MIDDLE, 501, false), &a[1024..2048]);
    let d = t.inject(rq(op::UC_SEND_LAST, 502, true), &a[2048..]);
    let r = reqs(&d);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].1, a);
    answer_ack(&t, &r[0].0);
    t.nothing_sent();
    // 504 (MIDDLE) lost: the partial message is dropped; the next message starts over.
    let b = pat(3000, 4);
    t.inject(rq(op::UC_SEND_FIRST, 503, false), &b[..1024]);
    assert!(t.inject(rq(op::UC_SEND_LAST, 505, false), &b[2048..]).is_empty());
    let c = pat(1500, 5);
    assert!(t.inject(rq(op::UC_SEND_FIRST, 506, false), &c[..1024]).is_empty());
    let d = t.inject(rq(op::UC_SEND_LAST, 507, false), &c[1024..]);
    assert_eq!(reqs(&d).len(), 1);
    assert_eq!(reqs(&d)[0].1, c);
    // A gap inside a message (LAST lost, then a new FIRST): only the new message arrives.
    let e = pat(2048, 6);
    t.inject(rq(op::UC_SEND_FIRST, 508, false), &b[..1024]);
    assert!(t.inject(rq(op::UC_SEND_FIRST, 510, false), &e[..1024]).is_empty());
    let d = t.inject(rq(op::UC_SEND_LAST, 511, false), &e[1024..]);
    assert_eq!(reqs(&d).len(), 1);
    assert_eq!(reqs(&d)[0].1, e);
    // An old PSN is not a duplicate to answer: dropped silently.
    assert!(t.inject(rq(op::UC_SEND_ONLY, 505, true), &[1]).is_empty());
    t.nothing_sent();
}

// ---- randomized: two links over a lossy, duplicating, reordering network ----

/// xorshift64*: deterministic, no crates.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pct(&mut self, p: usize) -> bool {
        self.below(100) < p
    }
}

/// The responder's memory: byte `a` holds a function of `a`, so a READ resumed mid-way
/// returns the same bytes as the original would have.
fn mem(addr: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| ((addr + i).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8).collect()
}

#[derive(Clone, Debug, PartialEq)]
enum Msg {
    Send(Vec<u8>),
    Write(u64, Vec<u8>),
    Read(u64, usize),
    FetchAdd(u64),
}

/// One side: a link and the QP layer above it, simulated.
struct Side {
    t: T,
    /// Requester: the QP layer's next PSN, messages posted, responses awaited in order.
    int_psn: u32,
    posted: usize,
    waiting: VecDeque<(u32, Msg, Vec<u8>)>,
    /// Sum of the FETCH_ADDs posted: the original value the next one must return.
    adds: u64,
    /// SEND/WRITE posted, in order, for the peer's responder to check against.
    log: Vec<Msg>,
    /// Responder: answers the QP layer has not handed to the link yet (in order).
    answers: VecDeque<Vec<u8>>,
    /// SEND/WRITE requests received so far.
    got: usize,
    /// The 8 bytes FETCH_ADDs work on.
    counter: u64,
}

fn sim_side(lqpn: u32, rqpn: u32, mtu: usize, sq_psn: u32, rq_psn: u32) -> Side {
    Side { t: with(lqpn, rqpn, mtu, sq_psn, rq_psn, 14, 7, 7, false), int_psn: 0x00ff_fff0, posted: 0, waiting: VecDeque::new(), adds: 0, log: Vec::new(), answers: VecDeque::new(), got: 0, counter: 0 }
}

struct Net {
    seed: u64,
    rng: Rng,
    sides: [Side; 2],
    /// Packets in flight: (destination side, bytes).
    wire: Vec<(usize, Vec<u8>)>,
    loss: usize,
    dup: usize,
    /// Percent of deliveries that take a packet up to `window` places behind the oldest.
    reorder: usize,
    window: usize,
    messages: usize,
    rd_limit: usize,
    mtu: usize,
}

impl Net {
    fn collect(&mut self, i: usize) {
        for p in std::mem::take(&mut *lock(&self.sides[i].t.tx)) {
            self.sides[i].t.check(p.clone());
            self.wire.push((1 - i, p));
        }
    }

    fn deliver(&mut self, i: usize, d: Vec<Deliver>) {
        for x in d {
            match x {
                Deliver::Request(h, payload) => self.on_request(i, h, payload),
                Deliver::Response(h, payload) => {
                    let s = &mut self.sides[i];
                    let (psn, msg, want) = s.waiting.pop_front().unwrap_or_else(|| panic!("side {i}: response {h:?} with nothing outstanding"));
                    assert_eq!(h.psn, psn, "side {i}: responses in order, each once ({msg:?})");
                    assert_eq!(h.syndrome, Syndrome::Ok, "side {i}: {msg:?}");
                    let op = match msg {
                        Msg::Send(_) | Msg::Write(..) => Op::Ack,
                        Msg::Read(..) => Op::ReadResp,
                        Msg::FetchAdd(_) => Op::AtomicResp,
                    };
                    assert_eq!(h.op, op, "side {i}: {msg:?}");
                    assert!(payload == want, "side {i}: wrong bytes for {msg:?}");
                }
                Deliver::Drained => {}
            }
        }
    }

    /// The QP layer's responder: checks SEND/WRITE against what the peer posted (each once,
    /// in order) and queues its answer.
    fn on_request(&mut self, i: usize, h: Header, payload: Vec<u8>) {
        let answer = match h.op {
            Op::Send | Op::Write => {
                let k = self.sides[i].got;
                let want = self.sides[1 - i].log.get(k).cloned().unwrap_or_else(|| panic!("side {i}: request #{k} {:?} was never posted (delivered twice?)", h.op));
                let got = if h.op == Op::Send { Msg::Send(payload) } else { Msg::Write(h.raddr, payload) };
                assert!(got == want, "side {i}: request #{k} is not what the peer posted");
                self.sides[i].got += 1;
                answer(&h, Op::Ack, Syndrome::Ok).frame(&[])
            }
            Op::ReadReq => answer(&h, Op::ReadResp, Syndrome::Ok).frame(&mem(h.raddr, h.aux as usize)),
            Op::FetchAdd => {
                let s = &mut self.sides[i];
                let orig = s.counter;
                s.counter = s.counter.wrapping_add(h.aux);
                answer(&h, Op::AtomicResp, Syndrome::Ok).frame(&orig.to_be_bytes())
            }
            op => panic!("unexpected request {op:?}"),
        };
        self.sides[i].answers.push_back(answer);
    }

    fn flush(&mut self, i: usize, n: usize) {
        for _ in 0..n {
            let Some(f) = self.sides[i].answers.pop_front() else { break };
            self.sides[i].t.l.send(f);
        }
        self.collect(i);
    }

    fn post(&mut self, i: usize) {
        let rd_limit = self.rd_limit;
        let mtu = self.mtu;
        let rng = &mut self.rng;
        let s = &mut self.sides[i];
        if s.posted >= self.messages || s.t.l.backlog() {
            return;
        }
        let len = match rng.below(10) {
            0..=5 => rng.below(300),
            6..=8 => rng.below(4 * mtu),
            _ => rng.below(20_000),
        };
        // READs and atomics in flight stay within max_rd_atomic, as the QP layer keeps them,
        // here at most the 16 the responder remembers for duplicates.
        let rd = s.waiting.iter().filter(|w| matches!(w.1, Msg::Read(..) | Msg::FetchAdd(_))).count();
        let msg = match rng.below(4) {
            0 => Msg::Write(rng.next() >> 20, (0..len).map(|_| rng.next() as u8).collect()),
            1 if rd < rd_limit => Msg::Read(rng.next() >> 20, len),
            2 if rd < rd_limit && rng.pct(30) => Msg::FetchAdd(rng.next() >> 40),
            _ => Msg::Send((0..len).map(|_| rng.next() as u8).collect()),
        };
        let mut h = req(Op::Send, s.int_psn);
        h.src_qpn = s.t.l.lqpn;
        h.dst_qpn = s.t.l.rqpn;
        let (frame, want) = match &msg {
            Msg::Send(p) => (h.frame(p), Vec::new()),
            Msg::Write(va, p) => {
                h.op = Op::Write;
                h.raddr = *va;
                h.rkey = 1;
                (h.frame(p), Vec::new())
            }
            Msg::Read(va, len) => {
                h.op = Op::ReadReq;
                h.raddr = *va;
                h.rkey = 2;
                h.aux = *len as u64;
                (h.frame(&[]), mem(*va, *len))
            }
            Msg::FetchAdd(add) => {
                h.op = Op::FetchAdd;
                h.raddr = 8;
                h.rkey = 3;
                h.aux = *add;
                let orig = s.adds;
                s.adds = s.adds.wrapping_add(*add);
                (h.frame(&[]), orig.to_be_bytes().to_vec())
            }
        };
        if matches!(msg, Msg::Send(_) | Msg::Write(..)) {
            s.log.push(msg.clone());
        }
        s.waiting.push_back((s.int_psn, msg, want));
        s.int_psn = (s.int_psn + 1) & 0x00ff_ffff;
        s.posted += 1;
        if rng.pct(50) {
            s.t.l.send(frame);
        } else {
            // The QP layer's gather path: header and payload apart.
            let cut = HDR_LEN + rng.below(frame.len() - HDR_LEN + 1);
            s.t.l.send_parts(&[&frame[..HDR_LEN], &frame[HDR_LEN..cut], &frame[cut..]]);
        }
        self.collect(i);
    }

    fn tick(&mut self, i: usize) {
        let (d, _) = self.sides[i].t.l.on_tick(later());
        self.deliver(i, d);
        self.collect(i);
    }

    fn done(&self) -> bool {
        self.wire.is_empty()
            && self.sides.iter().enumerate().all(|(i, s)| s.posted == self.messages && s.waiting.is_empty() && s.answers.is_empty() && s.got == self.sides[1 - i].log.len())
    }

    fn step(&mut self) {
        // Resends that breed more resends (each duplicate re-ACKed, each ACK resending)
        // flood the wire; a sound link keeps it near its window.
        assert!(self.wire.len() < 10_000, "seed {}: packet storm ({} packets in flight)", self.seed, self.wire.len());
        let r = self.rng.below(100);
        if r < 60 && !self.wire.is_empty() {
            // Mostly the oldest packet; sometimes one a little behind it (reordering).
            let k = if self.rng.pct(self.reorder) { self.rng.below(self.wire.len().min(self.window)) } else { 0 };
            let (to, bytes) = self.wire.remove(k);
            if self.rng.pct(self.dup) {
                self.wire.push((to, bytes.clone()));
            }
            if self.rng.pct(self.loss) {
                return;
            }
            let (h, payload) = packet::decode(&bytes).expect("decodes");
            assert_eq!(h.bth.dqpn, self.sides[to].t.l.lqpn);
            let d = self.sides[to].t.l.on_packet(&h, payload);
            self.deliver(to, d);
            self.collect(to);
        } else if r < 75 {
            let i = self.rng.below(2);
            self.post(i);
        } else if r < 90 {
            let i = self.rng.below(2);
            let n = self.rng.below(4);
            self.flush(i, n);
        } else if r < 91 && self.wire.len() < 32 {
            // A timer fires although packets are in flight (not too often: a timer that
            // fires faster than the wire drains only floods it).
            let i = self.rng.below(2);
            self.tick(i);
        }
        if self.wire.is_empty() && self.sides.iter().all(|s| s.answers.is_empty()) {
            // Quiet: what is outstanding was lost; the ACK timer fires.
            self.tick(0);
            self.tick(1);
        }
    }
}

#[test]
/// Two links talking both ways at once (each side's requester to the other's responder)
/// through a wire that loses, duplicates and reorders packets, with the QP layers played by
/// `Net`: SENDs, WRITEs, READs and FETCH_ADDs of random sizes (0 to 20000 bytes, MTU 256
/// or 1024, PSNs across the wrap), timers fired by a fake clock when the wire is quiet and
/// now and then early. Every message completes exactly once, in order, with the right bytes;
/// the responder's QP layer gets each SEND/WRITE exactly once, in order, and executes each
/// FETCH_ADD once; the wire never floods.
fn roce_link_random_loss_dup_reorder() {
    // ROCE_LINK_SEEDS=n: a longer run.
    let seeds = std::env::var("ROCE_LINK_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(40u64);
    for seed in 1..=seeds {
        let mut rng = Rng(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
        let mtu = [256, 1024][rng.below(2)];
        // Start PSNs near the wrap on some seeds.
        let (pa, pb) = if seed % 2 == 0 { (0x00ff_ff00 + rng.below(0xff) as u32, 0x00ff_fff0) } else { (rng.next() as u32 & 0x00ff_ffff, rng.next() as u32 & 0x00ff_ffff) };
        let loss = [0, 3, 8, 20][rng.below(4)];
        let dup = [0, 3, 10][rng.below(3)];
        let reorder = [0, 15, 40][rng.below(3)];
        let window = [2, 8, 32][rng.below(3)];
        let mut net = Net {
            seed,
            rd_limit: 1 + rng.below(16),
            rng,
            sides: [sim_side(A_QPN, B_QPN, mtu, pa, pb), sim_side(B_QPN, A_QPN, mtu, pb, pa)],
            wire: Vec::new(),
            loss,
            dup,
            reorder,
            window,
            messages: 150,
            mtu,
        };
        let mut steps = 0;
        while !net.done() {
            steps += 1;
            assert!(steps < 1_500_000, "seed {seed}: no progress (posted {:?}, waiting {:?}, got {:?})", net.sides.iter().map(|s| s.posted).collect::<Vec<_>>(), net.sides.iter().map(|s| s.waiting.len()).collect::<Vec<_>>(), net.sides.iter().map(|s| s.got).collect::<Vec<_>>());
            net.step();
        }
        for (i, s) in net.sides.iter().enumerate() {
            assert_eq!(s.counter, net.sides[1 - i].adds, "seed {seed}: every FETCH_ADD executed exactly once");
        }
    }
}
