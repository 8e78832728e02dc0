//! The wire format: one fixed 96-byte header (network byte order) plus a payload.
//!
//! ```text
//!  0 u16 magic 0x5356 ("SV")   2 u8 version (1)   3 u8 opcode
//!  4 u16 flags                 6 u8 syndrome      7 u8 rnr_retry
//!  8 u32 dst_qpn              12 u32 src_qpn     16 u32 psn
//! 20 u32 imm (opaque, as the application gave it)
//! 24 u32 rkey                 28 u32 qkey
//! 32 u64 raddr                40 u64 aux (READ length / atomic compare-or-add)
//! 48 u64 aux2 (atomic swap)   56 u32 payload_len 60 u16 src_lid  62 u16 reserved (0)
//! 64 [16] sgid                80 [16] dgid       96 payload
//! ```
//!
//! [`decode`] is a pure function over bytes: it never panics, and every frame it accepts
//! satisfies the per-opcode rules of [`Header::validate`] (lengths, QPNs, flags, syndrome),
//! so the engine can use the fields without further checks.

pub const MAGIC: u16 = 0x5356;
pub const VERSION: u8 = 1;
pub const HDR_LEN: usize = 96;
/// Largest RC message (SEND/WRITE payload, READ length): the port's `max_msg_sz`.
pub const MAX_MSG: u32 = 1 << 26;
/// Largest UD payload: the port MTU (4096).
pub const MAX_UD: u32 = 4096;
/// QPNs are 24-bit.
pub const QPN_MASK: u32 = 0x00ff_ffff;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// First frame on an RC connection: src_qpn → dst_qpn, sgid.
    Hello = 1,
    Send = 2,
    Write = 3,
    ReadReq = 4,
    CmpSwap = 5,
    FetchAdd = 6,
    /// Positive (syndrome 0) or negative acknowledgement of a SEND/WRITE.
    Ack = 7,
    ReadResp = 8,
    AtomicResp = 9,
    /// UD datagram.
    UdSend = 10,
}

impl Op {
    pub fn from_u8(v: u8) -> Option<Op> {
        Some(match v {
            1 => Op::Hello,
            2 => Op::Send,
            3 => Op::Write,
            4 => Op::ReadReq,
            5 => Op::CmpSwap,
            6 => Op::FetchAdd,
            7 => Op::Ack,
            8 => Op::ReadResp,
            9 => Op::AtomicResp,
            10 => Op::UdSend,
            _ => return None,
        })
    }

    /// Requests an RC responder answers (exactly one response each).
    pub fn is_request(self) -> bool {
        matches!(self, Op::Send | Op::Write | Op::ReadReq | Op::CmpSwap | Op::FetchAdd)
    }

    pub fn is_response(self) -> bool {
        matches!(self, Op::Ack | Op::ReadResp | Op::AtomicResp)
    }
}

/// `flags` bits.
pub const F_IMM: u16 = 1 << 0;
pub const F_SOLICITED: u16 = 1 << 1;
/// UD: the datagram was sent to a multicast group (`dgid` is the group).
pub const F_MCAST: u16 = 1 << 2;
/// Hello: the stream carries only UD datagrams (a same-host datagram link), no QP pair.
pub const F_DATAGRAMS: u16 = 1 << 3;
const F_ALL: u16 = F_IMM | F_SOLICITED | F_MCAST | F_DATAGRAMS;

/// Response syndromes (NAK reasons). 0 = success.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Syndrome {
    Ok = 0,
    /// No receive posted within the requester's RNR retry budget.
    RnrExceeded = 1,
    /// R_Key, bounds, alignment or access flags refused.
    RemAccess = 2,
    /// Request not valid for this QP (e.g. READ with no responder resources).
    RemInvReq = 3,
    /// Responder-side failure (e.g. receive buffer too small).
    RemOp = 4,
    /// The responder QP does not exist or is in the error state.
    NoQp = 5,
}

impl Syndrome {
    pub fn from_u8(v: u8) -> Option<Syndrome> {
        Some(match v {
            0 => Syndrome::Ok,
            1 => Syndrome::RnrExceeded,
            2 => Syndrome::RemAccess,
            3 => Syndrome::RemInvReq,
            4 => Syndrome::RemOp,
            5 => Syndrome::NoQp,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub op: Op,
    pub flags: u16,
    pub syndrome: Syndrome,
    pub rnr_retry: u8,
    pub dst_qpn: u32,
    pub src_qpn: u32,
    pub psn: u32,
    pub imm: u32,
    pub rkey: u32,
    pub qkey: u32,
    pub raddr: u64,
    pub aux: u64,
    pub aux2: u64,
    pub payload_len: u32,
    pub src_lid: u16,
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// More bytes are needed: the whole frame is this long.
    Incomplete(usize),
    /// Not a valid frame; the reason is for counters/logs.
    Malformed(&'static str),
}

impl Header {
    pub fn new(op: Op) -> Header {
        Header {
            op,
            flags: 0,
            syndrome: Syndrome::Ok,
            rnr_retry: 0,
            dst_qpn: 0,
            src_qpn: 0,
            psn: 0,
            imm: 0,
            rkey: 0,
            qkey: 0,
            raddr: 0,
            aux: 0,
            aux2: 0,
            payload_len: 0,
            src_lid: 0,
            sgid: [0; 16],
            dgid: [0; 16],
        }
    }

    /// The per-opcode rules every accepted frame satisfies.
    pub fn validate(&self) -> Result<(), &'static str> {
        if self.flags & !F_ALL != 0 {
            return Err("unknown flag bits");
        }
        if self.dst_qpn & !QPN_MASK != 0 || self.src_qpn & !QPN_MASK != 0 {
            return Err("qpn wider than 24 bits");
        }
        if self.rnr_retry > 7 {
            return Err("rnr_retry > 7");
        }
        if self.psn & !QPN_MASK != 0 {
            return Err("psn wider than 24 bits");
        }
        if self.op != Op::Ack && self.syndrome != Syndrome::Ok {
            return Err("syndrome on a non-ACK frame");
        }
        if self.op != Op::UdSend && self.flags & F_MCAST != 0 {
            return Err("multicast flag on an RC frame");
        }
        if self.op != Op::Hello && self.flags & F_DATAGRAMS != 0 {
            return Err("datagram-link flag on a frame other than Hello");
        }
        let len = self.payload_len;
        let ok = match self.op {
            Op::Hello | Op::Ack => len == 0,
            Op::Send | Op::Write => len <= MAX_MSG,
            Op::ReadReq => len == 0 && self.aux <= MAX_MSG as u64,
            Op::CmpSwap | Op::FetchAdd => len == 0,
            Op::ReadResp => len <= MAX_MSG,
            Op::AtomicResp => len == 8,
            Op::UdSend => len <= MAX_UD,
        };
        if !ok {
            return Err("payload length not allowed for opcode");
        }
        if self.op == Op::Write && self.raddr.checked_add(len as u64).is_none() {
            return Err("remote range overflows");
        }
        if self.op == Op::ReadReq && self.raddr.checked_add(self.aux).is_none() {
            return Err("remote range overflows");
        }
        Ok(())
    }

    /// Header bytes (the payload follows separately).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC.to_be_bytes());
        out.push(VERSION);
        out.push(self.op as u8);
        out.extend_from_slice(&self.flags.to_be_bytes());
        out.push(self.syndrome as u8);
        out.push(self.rnr_retry);
        for v in [self.dst_qpn, self.src_qpn, self.psn, self.imm, self.rkey, self.qkey] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        for v in [self.raddr, self.aux, self.aux2] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        out.extend_from_slice(&self.payload_len.to_be_bytes());
        out.extend_from_slice(&self.src_lid.to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&self.sgid);
        out.extend_from_slice(&self.dgid);
    }

    /// The header bytes, as `encode_into` writes them.
    pub fn to_bytes(&self) -> [u8; HDR_LEN] {
        let mut v = Vec::with_capacity(HDR_LEN);
        self.encode_into(&mut v);
        let mut out = [0u8; HDR_LEN];
        out.copy_from_slice(&v);
        out
    }

    /// A whole frame: header with `payload_len` set from `payload`, then the payload.
    pub fn frame(self, payload: &[u8]) -> Vec<u8> {
        self.frame_parts(&[payload])
    }

    /// A whole frame whose payload is `parts` one after the other (gathered in one copy).
    pub fn frame_parts(mut self, parts: &[&[u8]]) -> Vec<u8> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.payload_len = len as u32;
        let mut out = Vec::with_capacity(HDR_LEN + len);
        self.encode_into(&mut out);
        for p in parts {
            out.extend_from_slice(p);
        }
        out
    }
}

fn be16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}
fn be32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn be64(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_be_bytes(a)
}

/// The validated header at the start of `buf`, whose payload may still be missing (the
/// checks of [`decode`]; `Incomplete(HDR_LEN)` while the header itself is short).
pub fn decode_header(buf: &[u8]) -> Result<Header, DecodeError> {
    if buf.len() < HDR_LEN {
        // Reject garbage early when the prefix already shows it.
        if buf.len() >= 2 && be16(buf, 0) != MAGIC {
            return Err(DecodeError::Malformed("bad magic"));
        }
        if buf.len() >= 3 && buf[2] != VERSION {
            return Err(DecodeError::Malformed("unsupported version"));
        }
        return Err(DecodeError::Incomplete(HDR_LEN));
    }
    if be16(buf, 0) != MAGIC {
        return Err(DecodeError::Malformed("bad magic"));
    }
    if buf[2] != VERSION {
        return Err(DecodeError::Malformed("unsupported version"));
    }
    let op = Op::from_u8(buf[3]).ok_or(DecodeError::Malformed("unknown opcode"))?;
    let syndrome = Syndrome::from_u8(buf[6]).ok_or(DecodeError::Malformed("unknown syndrome"))?;
    if be16(buf, 62) != 0 {
        return Err(DecodeError::Malformed("reserved bits set"));
    }
    let mut sgid = [0u8; 16];
    sgid.copy_from_slice(&buf[64..80]);
    let mut dgid = [0u8; 16];
    dgid.copy_from_slice(&buf[80..96]);
    let h = Header {
        op,
        flags: be16(buf, 4),
        syndrome,
        rnr_retry: buf[7],
        dst_qpn: be32(buf, 8),
        src_qpn: be32(buf, 12),
        psn: be32(buf, 16),
        imm: be32(buf, 20),
        rkey: be32(buf, 24),
        qkey: be32(buf, 28),
        raddr: be64(buf, 32),
        aux: be64(buf, 40),
        aux2: be64(buf, 48),
        payload_len: be32(buf, 56),
        src_lid: be16(buf, 60),
        sgid,
        dgid,
    };
    h.validate().map_err(DecodeError::Malformed)?;
    Ok(h)
}

/// The opcode of an encoded frame (or of its header), if it names one.
pub fn op_of(frame: &[u8]) -> Option<Op> {
    frame.get(3).copied().and_then(Op::from_u8)
}

/// Decodes the frame at the start of `buf`. On success returns the header and the total
/// frame length (header + payload); the payload is `buf[HDR_LEN..total]`.
pub fn decode(buf: &[u8]) -> Result<(Header, usize), DecodeError> {
    let h = decode_header(buf)?;
    let total = HDR_LEN + h.payload_len as usize;
    if buf.len() < total {
        return Err(DecodeError::Incomplete(total));
    }
    Ok((h, total))
}
