//! The soft CM's messages between two librdmacm instances (the IB CM's
//! REQ/REP/REJ/RTU/DREQ/DREP and SIDR REQ/REP, carried over TCP or UDP).
//!
//! Frame: `magic u16 | version u8 | kind u8 | body_len u16 | body`, all
//! big-endian. Every field is checked on decode; anything malformed is an
//! error, never a panic.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

pub const MAGIC: u16 = 0x5243; // "RC"
/// 2: REQ carries the traffic class (TOS) after `srq`.
pub const VERSION: u8 = 2;
pub const HEADER: usize = 6;
pub const MAX_BODY: usize = 1024;
pub const MAX_PRIVATE: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Req = 1,
    Rep = 2,
    Rej = 3,
    Rtu = 4,
    Dreq = 5,
    Drep = 6,
    SidrReq = 7,
    SidrRep = 8,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Req,
            2 => Kind::Rep,
            3 => Kind::Rej,
            4 => Kind::Rtu,
            5 => Kind::Dreq,
            6 => Kind::Drep,
            7 => Kind::SidrReq,
            8 => Kind::SidrRep,
            _ => return None,
        })
    }
}

/// Everything a CM message may carry; unused fields are zero.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Msg {
    pub kind: Kind,
    /// REJ reason / SIDR REP status.
    pub status: u32,
    pub port_space: u16,
    pub qp_num: u32,
    pub qkey: u32,
    pub psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub flow_control: u8,
    pub srq: u8,
    /// REQ: the active side's traffic class (its RDMA_OPTION_ID_TOS).
    pub tclass: u8,
    /// Source and destination addresses as the sender sees them (REQ, SIDR REQ).
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    /// The verbs transport endpoint of the sender's QP.
    pub endpoint: Option<SocketAddr>,
    pub ece_vendor: u32,
    pub ece_options: u32,
    /// SIDR: a request id to match replies.
    pub tid: u64,
    pub private: Vec<u8>,
}

impl Msg {
    pub fn new(kind: Kind) -> Msg {
        Msg {
            kind,
            status: 0,
            port_space: 0,
            qp_num: 0,
            qkey: 0,
            psn: 0,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: 0,
            rnr_retry_count: 0,
            flow_control: 0,
            srq: 0,
            tclass: 0,
            src: None,
            dst: None,
            endpoint: None,
            ece_vendor: 0,
            ece_options: 0,
            tid: 0,
            private: Vec::new(),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Error {
    /// More bytes are needed (stream framing).
    Short,
    Malformed(&'static str),
}

fn put_addr(out: &mut Vec<u8>, a: &Option<SocketAddr>) {
    match a {
        None => out.push(0),
        Some(SocketAddr::V4(v)) => {
            out.push(4);
            out.extend_from_slice(&v.ip().octets());
            out.extend_from_slice(&v.port().to_be_bytes());
        }
        Some(SocketAddr::V6(v)) => {
            out.push(6);
            out.extend_from_slice(&v.ip().octets());
            out.extend_from_slice(&v.port().to_be_bytes());
        }
    }
}

/// Encodes a message into one frame.
pub fn encode(m: &Msg) -> Vec<u8> {
    let mut b = Vec::with_capacity(64 + m.private.len());
    b.extend_from_slice(&m.status.to_be_bytes());
    b.extend_from_slice(&m.port_space.to_be_bytes());
    b.extend_from_slice(&m.qp_num.to_be_bytes());
    b.extend_from_slice(&m.qkey.to_be_bytes());
    b.extend_from_slice(&m.psn.to_be_bytes());
    b.extend_from_slice(&[
        m.responder_resources,
        m.initiator_depth,
        m.retry_count,
        m.rnr_retry_count,
        m.flow_control,
        m.srq,
        m.tclass,
    ]);
    put_addr(&mut b, &m.src);
    put_addr(&mut b, &m.dst);
    put_addr(&mut b, &m.endpoint);
    b.extend_from_slice(&m.ece_vendor.to_be_bytes());
    b.extend_from_slice(&m.ece_options.to_be_bytes());
    b.extend_from_slice(&m.tid.to_be_bytes());
    let n = m.private.len().min(MAX_PRIVATE);
    b.extend_from_slice(&(n as u16).to_be_bytes());
    b.extend_from_slice(&m.private[..n]);
    let mut f = Vec::with_capacity(HEADER + b.len());
    f.extend_from_slice(&MAGIC.to_be_bytes());
    f.push(VERSION);
    f.push(m.kind as u8);
    f.extend_from_slice(&(b.len() as u16).to_be_bytes());
    f.extend_from_slice(&b);
    f
}

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if self.b.len() < n {
            return Err(Error::Malformed("truncated body"));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, Error> {
        Ok(u16::from_be_bytes(self.take(2)?.try_into().map_err(|_| Error::Malformed("u16"))?))
    }
    fn u32(&mut self) -> Result<u32, Error> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().map_err(|_| Error::Malformed("u32"))?))
    }
    fn u64(&mut self) -> Result<u64, Error> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().map_err(|_| Error::Malformed("u64"))?))
    }
    fn addr(&mut self) -> Result<Option<SocketAddr>, Error> {
        Ok(match self.u8()? {
            0 => None,
            4 => {
                let o: [u8; 4] = self.take(4)?.try_into().map_err(|_| Error::Malformed("v4"))?;
                Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(o)), self.u16()?))
            }
            6 => {
                let o: [u8; 16] = self.take(16)?.try_into().map_err(|_| Error::Malformed("v6"))?;
                Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(o)), self.u16()?))
            }
            _ => return Err(Error::Malformed("address family")),
        })
    }
}

/// Decodes one frame from the front of `buf`; returns it and its length.
pub fn decode(buf: &[u8]) -> Result<(Msg, usize), Error> {
    if buf.len() < HEADER {
        return Err(Error::Short);
    }
    if u16::from_be_bytes([buf[0], buf[1]]) != MAGIC {
        return Err(Error::Malformed("magic"));
    }
    if buf[2] != VERSION {
        return Err(Error::Malformed("version"));
    }
    let kind = Kind::from_u8(buf[3]).ok_or(Error::Malformed("kind"))?;
    let len = u16::from_be_bytes([buf[4], buf[5]]) as usize;
    if len > MAX_BODY {
        return Err(Error::Malformed("body too long"));
    }
    if buf.len() < HEADER + len {
        return Err(Error::Short);
    }
    let mut r = Reader { b: &buf[HEADER..HEADER + len] };
    let mut m = Msg::new(kind);
    m.status = r.u32()?;
    m.port_space = r.u16()?;
    m.qp_num = r.u32()?;
    m.qkey = r.u32()?;
    m.psn = r.u32()?;
    m.responder_resources = r.u8()?;
    m.initiator_depth = r.u8()?;
    m.retry_count = r.u8()?;
    m.rnr_retry_count = r.u8()?;
    m.flow_control = r.u8()?;
    m.srq = r.u8()?;
    m.tclass = r.u8()?;
    m.src = r.addr()?;
    m.dst = r.addr()?;
    m.endpoint = r.addr()?;
    m.ece_vendor = r.u32()?;
    m.ece_options = r.u32()?;
    m.tid = r.u64()?;
    let n = r.u16()? as usize;
    if n > MAX_PRIVATE {
        return Err(Error::Malformed("private data too long"));
    }
    m.private = r.take(n)?.to_vec();
    if !r.b.is_empty() {
        return Err(Error::Malformed("trailing bytes"));
    }
    Ok((m, HEADER + len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Msg {
        let mut m = Msg::new(Kind::Req);
        m.qp_num = 0xabcdef;
        m.psn = 0x123456;
        m.responder_resources = 1;
        m.src = Some("127.0.0.1:4000".parse().unwrap());
        m.dst = Some("[::1]:7174".parse().unwrap());
        m.endpoint = Some("10.0.0.1:5555".parse().unwrap());
        m.tid = 99;
        m.tclass = 0x60;
        m.private = b"hello".to_vec();
        m
    }

    #[test]
    fn round_trip_and_stream_framing() {
        let m = sample();
        let mut f = encode(&m);
        let (d, n) = decode(&f).unwrap();
        assert_eq!((d, n), (m.clone(), f.len()));
        for cut in 0..f.len() {
            assert_eq!(decode(&f[..cut]).unwrap_err(), Error::Short, "cut at {cut}");
        }
        f.extend_from_slice(&encode(&Msg::new(Kind::Rtu)));
        let (_, n1) = decode(&f).unwrap();
        assert_eq!(decode(&f[n1..]).unwrap().0.kind, Kind::Rtu);
    }

    #[test]
    fn garbage_is_rejected_without_panic() {
        let good = encode(&sample());
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in 0..20000 {
            let mut f = good.clone();
            for _ in 0..(i % 7 + 1) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let pos = (x as usize) % f.len();
                f[pos] = (x >> 32) as u8;
            }
            if i % 3 == 0 {
                f.truncate((x as usize) % (f.len() + 1));
            }
            let _ = decode(&f);
        }
        assert!(matches!(decode(&[0x52, 0x43, VERSION, 99, 0, 0]), Err(Error::Malformed("kind"))));
        // A peer of the previous layout (no traffic class) is refused, not misread.
        assert!(matches!(decode(&[0x52, 0x43, 1, 1, 0, 0]), Err(Error::Malformed("version"))));
    }
}
