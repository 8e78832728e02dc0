//! InfiniBand transport headers as RoCEv2 carries them in a UDP datagram to port 4791.
//!
//! ```text
//! UDP payload = BTH (12) | extension headers | payload | pad 0-3 | ICRC (4)
//! BTH: 0 opcode | 1 SE M PadCnt(2) TVer(4) | 2-3 P_Key | 4 FECN BECN resv6 ("resv8a")
//!      5-7 DestQP | 8 AckReq resv7 | 9-11 PSN
//! ```
//!
//! Extension headers follow the BTH in a fixed order (DETH, RETH or AtomicETH, AETH,
//! AtomicAckETH, ImmDt or IETH), and which of them are present is a function of the opcode
//! alone ([`op_info`]); so are their lengths ([`headers_len`]). Multi-byte fields are
//! big-endian; only the ICRC (see [`super::icrc`]) goes out least-significant byte first.
//!
//! [`decode`] is a pure function over bytes that never panics: it checks the framing the
//! opcode implies (lengths, PadCnt, TVer) and nothing that needs QP state (P_Key, Q_Key,
//! DestQP, PSN), which belongs to the caller. It does not check the ICRC either, because
//! the receiver may have to solve for the IPv4 ID first ([`super::icrc::solve_id_v4`]).

use std::cmp::Ordering;

/// UDP destination port of RoCEv2 (`ROCE_V2_UDP_DPORT`).
pub const ROCE_PORT: u16 = 4791;
/// Base Transport Header.
pub const BTH_LEN: usize = 12;
/// Invariant CRC trailer.
pub const ICRC_LEN: usize = 4;
/// DestQP of multicast UD packets.
pub const MCAST_QPN: u32 = 0x00ff_ffff;
/// Q_Key of the General Services Interface (QP1, the CM's MADs).
pub const GSI_QKEY: u32 = 0x8001_0000;

/// 24-bit fields (QPNs, PSNs, MSN).
const MASK24: u32 = 0x00ff_ffff;

pub const RETH_LEN: usize = 16;
pub const AETH_LEN: usize = 4;
pub const ATOMIC_ETH_LEN: usize = 28;
pub const ATOMIC_ACK_ETH_LEN: usize = 8;
pub const IMMDT_LEN: usize = 4;
pub const IETH_LEN: usize = 4;
pub const DETH_LEN: usize = 8;

/// Opcodes as the full BTH byte: transport (RC 0x00, UC 0x20, RD 0x40, UD 0x60) | operation.
pub mod op {
    pub const RC_SEND_FIRST: u8 = 0x00;
    pub const RC_SEND_MIDDLE: u8 = 0x01;
    pub const RC_SEND_LAST: u8 = 0x02;
    pub const RC_SEND_LAST_IMM: u8 = 0x03;
    pub const RC_SEND_ONLY: u8 = 0x04;
    pub const RC_SEND_ONLY_IMM: u8 = 0x05;
    pub const RC_WRITE_FIRST: u8 = 0x06;
    pub const RC_WRITE_MIDDLE: u8 = 0x07;
    pub const RC_WRITE_LAST: u8 = 0x08;
    pub const RC_WRITE_LAST_IMM: u8 = 0x09;
    pub const RC_WRITE_ONLY: u8 = 0x0a;
    pub const RC_WRITE_ONLY_IMM: u8 = 0x0b;
    pub const RC_READ_REQUEST: u8 = 0x0c;
    pub const RC_READ_RESPONSE_FIRST: u8 = 0x0d;
    pub const RC_READ_RESPONSE_MIDDLE: u8 = 0x0e;
    pub const RC_READ_RESPONSE_LAST: u8 = 0x0f;
    pub const RC_READ_RESPONSE_ONLY: u8 = 0x10;
    pub const RC_ACK: u8 = 0x11;
    pub const RC_ATOMIC_ACK: u8 = 0x12;
    pub const RC_CMP_SWAP: u8 = 0x13;
    pub const RC_FETCH_ADD: u8 = 0x14;
    pub const RC_SEND_LAST_INV: u8 = 0x16;
    pub const RC_SEND_ONLY_INV: u8 = 0x17;

    pub const UC_SEND_FIRST: u8 = 0x20;
    pub const UC_SEND_MIDDLE: u8 = 0x21;
    pub const UC_SEND_LAST: u8 = 0x22;
    pub const UC_SEND_LAST_IMM: u8 = 0x23;
    pub const UC_SEND_ONLY: u8 = 0x24;
    pub const UC_SEND_ONLY_IMM: u8 = 0x25;
    pub const UC_WRITE_FIRST: u8 = 0x26;
    pub const UC_WRITE_MIDDLE: u8 = 0x27;
    pub const UC_WRITE_LAST: u8 = 0x28;
    pub const UC_WRITE_LAST_IMM: u8 = 0x29;
    pub const UC_WRITE_ONLY: u8 = 0x2a;
    pub const UC_WRITE_ONLY_IMM: u8 = 0x2b;

    pub const UD_SEND_ONLY: u8 = 0x64;
    pub const UD_SEND_ONLY_IMM: u8 = 0x65;

    /// Transport bits of an opcode.
    pub const TRANSPORT_MASK: u8 = 0xe0;
    pub const RC: u8 = 0x00;
    pub const UC: u8 = 0x20;
    pub const UD: u8 = 0x60;

    /// A short name for traces; "?" for opcodes [`super::op_info`] does not accept.
    pub fn name(opcode: u8) -> &'static str {
        const RC_NAMES: [&str; 24] = [
            "SEND_FIRST",
            "SEND_MIDDLE",
            "SEND_LAST",
            "SEND_LAST_IMM",
            "SEND_ONLY",
            "SEND_ONLY_IMM",
            "WRITE_FIRST",
            "WRITE_MIDDLE",
            "WRITE_LAST",
            "WRITE_LAST_IMM",
            "WRITE_ONLY",
            "WRITE_ONLY_IMM",
            "READ_REQUEST",
            "READ_RESPONSE_FIRST",
            "READ_RESPONSE_MIDDLE",
            "READ_RESPONSE_LAST",
            "READ_RESPONSE_ONLY",
            "ACK",
            "ATOMIC_ACK",
            "CMP_SWAP",
            "FETCH_ADD",
            "?",
            "SEND_LAST_INV",
            "SEND_ONLY_INV",
        ];
        if super::op_info(opcode).is_none() {
            return "?";
        }
        match opcode & TRANSPORT_MASK {
            UD if opcode == UD_SEND_ONLY => "UD_SEND_ONLY",
            UD => "UD_SEND_ONLY_IMM",
            // op_info accepted it, so the low bits index the RC row (UC is a subset).
            _ => RC_NAMES.get(usize::from(opcode & 0x1f)).copied().unwrap_or("?"),
        }
    }
}

/// Base Transport Header. `resv8a` is byte 4 whole (FECN, BECN, reserved): kept so a
/// decoded packet re-encodes bit for bit; the ICRC masks it. The 7 reserved bits next to
/// AckReq are dropped on decode and sent as 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Bth {
    pub opcode: u8,
    /// Solicited event.
    pub se: bool,
    /// MigReq (path migration); rxe sends 0.
    pub mig: bool,
    /// PadCnt as received; [`encode_headers`] derives it from the payload length instead.
    pub pad: u8,
    pub pkey: u16,
    pub resv8a: u8,
    /// Destination QP, 24 bits.
    pub dqpn: u32,
    pub ack_req: bool,
    /// 24 bits.
    pub psn: u32,
}

/// RDMA Extended Transport Header (WRITE FIRST/ONLY, READ REQUEST).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Reth {
    pub va: u64,
    pub rkey: u32,
    /// DMA length of the whole message, not of this packet.
    pub len: u32,
}

/// ACK Extended Transport Header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Aeth {
    /// See [`aeth::kind`].
    pub syndrome: u8,
    /// Messages the responder has completed, 24 bits.
    pub msn: u32,
}

/// Atomic Extended Transport Header. Swap-or-add comes before compare on the wire (rxe,
/// wireshark); the order is easy to get wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AtomicEth {
    pub va: u64,
    pub rkey: u32,
    pub swap_add: u64,
    pub compare: u64,
}

/// Datagram Extended Transport Header (UD). The reserved byte before SrcQP is sent as 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Deth {
    pub qkey: u32,
    /// 24 bits.
    pub src_qp: u32,
}

/// Which extension headers an opcode carries and whether it has a payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct OpInfo {
    pub reth: bool,
    pub aeth: bool,
    pub atomic: bool,
    pub atomic_ack: bool,
    pub imm: bool,
    pub ieth: bool,
    pub deth: bool,
    pub payload: bool,
}

impl OpInfo {
    /// Bytes of BTH plus extension headers.
    pub const fn headers_len(&self) -> usize {
        BTH_LEN
            + if self.deth { DETH_LEN } else { 0 }
            + if self.reth { RETH_LEN } else { 0 }
            + if self.atomic { ATOMIC_ETH_LEN } else { 0 }
            + if self.aeth { AETH_LEN } else { 0 }
            + if self.atomic_ack { ATOMIC_ACK_ETH_LEN } else { 0 }
            + if self.imm { IMMDT_LEN } else { 0 }
            + if self.ieth { IETH_LEN } else { 0 }
    }
}

/// Extension headers of each opcode, in wire order. `None` for what we do not accept, as
/// rxe drops them too: RD (no RD QPs), READ with invalidate (0x15, local only), FLUSH and
/// ATOMIC WRITE (0x1C/0x1D, not in kernel 6.1), CNP (0x81) and anything undefined.
pub fn op_info(opcode: u8) -> Option<OpInfo> {
    const NONE: OpInfo = OpInfo {
        reth: false,
        aeth: false,
        atomic: false,
        atomic_ack: false,
        imm: false,
        ieth: false,
        deth: false,
        payload: false,
    };
    const DATA: OpInfo = OpInfo { payload: true, ..NONE };
    const DATA_IMM: OpInfo = OpInfo { imm: true, ..DATA };
    const DATA_RETH: OpInfo = OpInfo { reth: true, ..DATA };
    const DATA_AETH: OpInfo = OpInfo { aeth: true, ..DATA };

    let transport = opcode & op::TRANSPORT_MASK;
    let low = opcode & 0x1f;
    match transport {
        op::RC | op::UC => {}
        op::UD => {
            return match opcode {
                op::UD_SEND_ONLY => Some(OpInfo { deth: true, ..DATA }),
                op::UD_SEND_ONLY_IMM => Some(OpInfo { deth: true, ..DATA_IMM }),
                _ => None,
            };
        }
        _ => return None,
    }
    // UC has only the SEND and WRITE rows (0x00-0x0B).
    if transport == op::UC && low > op::RC_WRITE_ONLY_IMM {
        return None;
    }
    Some(match low {
        op::RC_SEND_FIRST | op::RC_SEND_MIDDLE | op::RC_SEND_LAST | op::RC_SEND_ONLY => DATA,
        op::RC_SEND_LAST_IMM | op::RC_SEND_ONLY_IMM => DATA_IMM,
        op::RC_WRITE_FIRST | op::RC_WRITE_ONLY => DATA_RETH,
        op::RC_WRITE_MIDDLE | op::RC_WRITE_LAST => DATA,
        op::RC_WRITE_LAST_IMM => DATA_IMM,
        op::RC_WRITE_ONLY_IMM => OpInfo { imm: true, ..DATA_RETH },
        op::RC_READ_REQUEST => OpInfo { reth: true, ..NONE },
        op::RC_READ_RESPONSE_FIRST | op::RC_READ_RESPONSE_LAST | op::RC_READ_RESPONSE_ONLY => {
            DATA_AETH
        }
        op::RC_READ_RESPONSE_MIDDLE => DATA,
        op::RC_ACK => OpInfo { aeth: true, ..NONE },
        op::RC_ATOMIC_ACK => OpInfo { aeth: true, atomic_ack: true, ..NONE },
        op::RC_CMP_SWAP | op::RC_FETCH_ADD => OpInfo { atomic: true, ..NONE },
        op::RC_SEND_LAST_INV | op::RC_SEND_ONLY_INV => OpInfo { ieth: true, ..DATA },
        _ => return None,
    })
}

/// Length of the headers [`encode_headers`] writes for this opcode (BTH included). An
/// opcode [`op_info`] rejects gets a bare BTH.
pub fn headers_len(opcode: u8) -> usize {
    op_info(opcode).map_or(BTH_LEN, |i| i.headers_len())
}

/// Zero bytes that pad a payload of `len` to a multiple of 4 (PadCnt).
pub fn pad_len(len: usize) -> usize {
    len.wrapping_neg() & 3
}

/// A decoded packet's headers. `imm` is the ImmDt field read big-endian (the application's
/// value when it stored a big-endian one, as verbs apps do).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Headers {
    pub bth: Bth,
    pub reth: Option<Reth>,
    pub aeth: Option<Aeth>,
    pub atomic: Option<AtomicEth>,
    /// AtomicAckETH: the original remote value.
    pub atomic_ack: Option<u64>,
    pub imm: Option<u32>,
    /// R_Key to invalidate.
    pub ieth: Option<u32>,
    pub deth: Option<Deth>,
}

impl Headers {
    /// Whether the extension headers present are exactly those `info` asks for.
    fn matches(&self, info: &OpInfo) -> bool {
        self.reth.is_some() == info.reth
            && self.aeth.is_some() == info.aeth
            && self.atomic.is_some() == info.atomic
            && self.atomic_ack.is_some() == info.atomic_ack
            && self.imm.is_some() == info.imm
            && self.ieth.is_some() == info.ieth
            && self.deth.is_some() == info.deth
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than BTH + the opcode's extension headers + ICRC.
    Short,
    /// TVer is not 0.
    Version,
    /// An opcode [`op_info`] does not accept.
    Opcode,
    /// PadCnt on an opcode without payload, or larger than the bytes present.
    Pad,
    /// Bytes between the headers and the ICRC on an opcode that carries no payload.
    Payload,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DecodeError::Short => "packet too short for its opcode",
            DecodeError::Version => "BTH transport version is not 0",
            DecodeError::Opcode => "unsupported opcode",
            DecodeError::Pad => "bad pad count",
            DecodeError::Payload => "payload on an opcode without one",
        })
    }
}

impl std::error::Error for DecodeError {}

/// A cursor over a slice whose length the caller has already checked; reads past the end
/// yield zeros instead of panicking, so a length bug cannot become a panic.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        if let Some(src) = self.buf.get(self.pos..self.pos + N) {
            out.copy_from_slice(src);
        }
        self.pos += N;
        out
    }
    fn u8(&mut self) -> u8 {
        self.bytes::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.bytes())
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.bytes())
    }
    fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.bytes())
    }
    /// A reserved byte then a 24-bit value (DestQP, PSN, MSN, SrcQP, ...).
    fn split8_24(&mut self) -> (u8, u32) {
        let v = self.u32();
        ((v >> 24) as u8, v & MASK24)
    }
}

fn decode_bth(r: &mut Reader) -> Bth {
    let opcode = r.u8();
    let flags = r.u8();
    let pkey = r.u16();
    let (resv8a, dqpn) = r.split8_24();
    let (ack, psn) = r.split8_24();
    Bth {
        opcode,
        se: flags & 0x80 != 0,
        mig: flags & 0x40 != 0,
        pad: (flags >> 4) & 3,
        pkey,
        resv8a,
        dqpn,
        ack_req: ack & 0x80 != 0,
        psn,
    }
}

/// Decodes a UDP payload (BTH .. ICRC) into its headers and the payload proper (pad and
/// ICRC excluded). Does not check the ICRC (see [`super::icrc`]). Never panics.
pub fn decode(udp_payload: &[u8]) -> Result<(Headers, &[u8]), DecodeError> {
    if udp_payload.len() < BTH_LEN + ICRC_LEN {
        return Err(DecodeError::Short);
    }
    let mut r = Reader { buf: udp_payload, pos: 0 };
    let bth = decode_bth(&mut r);
    if udp_payload[1] & 0x0f != 0 {
        return Err(DecodeError::Version);
    }
    let info = op_info(bth.opcode).ok_or(DecodeError::Opcode)?;
    let hlen = info.headers_len();
    let body_end = udp_payload.len() - ICRC_LEN;
    let body = udp_payload.get(hlen..body_end).ok_or(DecodeError::Short)?;
    let pad = usize::from(bth.pad);
    let payload = if info.payload {
        if pad > body.len() {
            return Err(DecodeError::Pad);
        }
        &body[..body.len() - pad]
    } else if pad != 0 {
        return Err(DecodeError::Pad);
    } else if !body.is_empty() {
        return Err(DecodeError::Payload);
    } else {
        body
    };

    // Wire order: DETH, RETH or AtomicETH, AETH, AtomicAckETH, ImmDt or IETH.
    let mut h = Headers { bth, ..Headers::default() };
    if info.deth {
        let qkey = r.u32();
        let (_resv, src_qp) = r.split8_24();
        h.deth = Some(Deth { qkey, src_qp });
    }
    if info.reth {
        h.reth = Some(Reth { va: r.u64(), rkey: r.u32(), len: r.u32() });
    }
    if info.atomic {
        h.atomic = Some(AtomicEth { va: r.u64(), rkey: r.u32(), swap_add: r.u64(), compare: r.u64() });
    }
    if info.aeth {
        let (syndrome, msn) = r.split8_24();
        h.aeth = Some(Aeth { syndrome, msn });
    }
    if info.atomic_ack {
        h.atomic_ack = Some(r.u64());
    }
    if info.imm {
        h.imm = Some(r.u32());
    }
    if info.ieth {
        h.ieth = Some(r.u32());
    }
    debug_assert_eq!(r.pos, hlen);
    Ok((h, payload))
}

/// Appends BTH and the extension headers of `h.bth.opcode` to `out`: exactly
/// [`headers_len`] bytes. PadCnt comes from `payload_len` (`(-len) & 3`), not `h.bth.pad`;
/// the caller appends payload, [`pad_len`] zeros and the ICRC. The headers present in `h`
/// must be those [`op_info`] lists (checked in debug builds); a missing one is written as
/// zeros and an extra one is ignored, so the length always matches the opcode.
pub fn encode_headers(h: &Headers, payload_len: usize, out: &mut Vec<u8>) {
    let info = op_info(h.bth.opcode);
    debug_assert!(info.is_some(), "encoding unsupported opcode {:#x}", h.bth.opcode);
    let info = info.unwrap_or_default();
    debug_assert!(h.matches(&info), "headers do not match opcode {:#x}: {h:?}", h.bth.opcode);
    debug_assert!(info.payload || payload_len == 0, "payload on opcode {:#x}", h.bth.opcode);

    let b = &h.bth;
    let pad = pad_len(payload_len) as u8;
    out.reserve(info.headers_len());
    out.push(b.opcode);
    out.push(u8::from(b.se) << 7 | u8::from(b.mig) << 6 | pad << 4);
    out.extend_from_slice(&b.pkey.to_be_bytes());
    out.extend_from_slice(&(u32::from(b.resv8a) << 24 | (b.dqpn & MASK24)).to_be_bytes());
    out.extend_from_slice(&(u32::from(b.ack_req) << 31 | (b.psn & MASK24)).to_be_bytes());
    if info.deth {
        let d = h.deth.unwrap_or_default();
        out.extend_from_slice(&d.qkey.to_be_bytes());
        out.extend_from_slice(&(d.src_qp & MASK24).to_be_bytes());
    }
    if info.reth {
        let r = h.reth.unwrap_or_default();
        out.extend_from_slice(&r.va.to_be_bytes());
        out.extend_from_slice(&r.rkey.to_be_bytes());
        out.extend_from_slice(&r.len.to_be_bytes());
    }
    if info.atomic {
        let a = h.atomic.unwrap_or_default();
        out.extend_from_slice(&a.va.to_be_bytes());
        out.extend_from_slice(&a.rkey.to_be_bytes());
        out.extend_from_slice(&a.swap_add.to_be_bytes());
        out.extend_from_slice(&a.compare.to_be_bytes());
    }
    if info.aeth {
        let a = h.aeth.unwrap_or_default();
        out.extend_from_slice(&(u32::from(a.syndrome) << 24 | (a.msn & MASK24)).to_be_bytes());
    }
    if info.atomic_ack {
        out.extend_from_slice(&h.atomic_ack.unwrap_or_default().to_be_bytes());
    }
    if info.imm {
        out.extend_from_slice(&h.imm.unwrap_or_default().to_be_bytes());
    }
    if info.ieth {
        out.extend_from_slice(&h.ieth.unwrap_or_default().to_be_bytes());
    }
}

/// AETH syndromes: bit 7 = 0, bits 6-5 the kind, bits 4-0 its value.
pub mod aeth {
    use super::AckKind;

    /// ACK without credit information (all rxe ever sends; it ignores credits on receipt).
    pub const ACK: u8 = 0x1f;
    /// RNR NAK; OR the timer code (see [`super::rnr_timer_us`]).
    pub const RNR_NAK: u8 = 0x20;
    pub const NAK_PSN_SEQ: u8 = 0x60;
    pub const NAK_INV_REQ: u8 = 0x61;
    pub const NAK_REM_ACCESS: u8 = 0x62;
    pub const NAK_REM_OP: u8 = 0x63;
    pub const NAK_INV_RD: u8 = 0x64;

    /// Classifies a syndrome byte.
    pub fn kind(s: u8) -> AckKind {
        let value = s & 0x1f;
        match s >> 5 {
            0 => AckKind::Ack,
            1 => AckKind::Rnr(value),
            3 => AckKind::Nak(value),
            // Type 10 is reserved, and bit 7 must be 0.
            _ => AckKind::Reserved,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckKind {
    /// Positive ACK (the credit count is ignored, as rxe does).
    Ack,
    /// Receiver not ready; the timer code (0-31).
    Rnr(u8),
    /// NAK code 0-31 (0 PSN sequence error, 1 invalid request, 2 remote access error,
    /// 3 remote operational error, 4 invalid RD request).
    Nak(u8),
    Reserved,
}

/// RNR NAK timer code (5 bits; higher bits ignored) → minimum wait in microseconds. Code 0
/// is the longest wait, 655.36 ms, and is what rdma_cm QPs ask for.
pub fn rnr_timer_us(code: u8) -> u64 {
    const US: [u64; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560,
        3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880,
        163_840, 245_760, 327_680, 491_520,
    ];
    US[usize::from(code & 0x1f)]
}

/// `a + n` in the 24-bit PSN space.
pub fn psn_add(a: u32, n: u32) -> u32 {
    a.wrapping_add(n) & MASK24
}

/// Signed distance `a - b` in the 24-bit PSN space, in [-2^23, 2^23): the half of the
/// space ahead of `b` counts as later, the half behind as earlier (rxe's `psn_compare`).
pub fn psn_diff(a: u32, b: u32) -> i32 {
    (a.wrapping_sub(b) << 8) as i32 >> 8
}

/// Orders PSNs across the wrap: `a` is Greater when it lies in the half-space after `b`.
pub fn psn_cmp(a: u32, b: u32) -> Ordering {
    psn_diff(a, b).cmp(&0)
}
