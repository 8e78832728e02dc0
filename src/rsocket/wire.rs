//! The rsocket wire format (shared/reference/rsocket.md §3, §4, §8): the
//! connection private data, the 32-bit messages carried as immediate data,
//! the buffer adverts written into the peer's memory and the datagram headers.
//! Pure functions over bytes; nothing here touches a device.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

// Message operations (bits 31..29 of the immediate data).
pub const OP_DATA: u32 = 0;
pub const OP_WRITE: u32 = 2;
pub const OP_SGL: u32 = 4;
pub const OP_IOMAP_SGL: u32 = 6;
pub const OP_CTRL: u32 = 7;

// Data of an OP_CTRL message.
pub const CTRL_DISCONNECT: u32 = 0;
pub const CTRL_KEEPALIVE: u32 = 1;
pub const CTRL_SHUTDOWN: u32 = 2;

const DATA_MASK: u32 = 0x1FFF_FFFF;

pub fn msg(op: u32, data: u32) -> u32 {
    (op << 29) | (data & DATA_MASK)
}
pub fn msg_op(m: u32) -> u32 {
    m >> 29
}
pub fn msg_data(m: u32) -> u32 {
    m & DATA_MASK
}

pub const CONN_DATA_LEN: usize = 40;
pub const CONN_VERSION: u8 = 1;
pub const CONN_FLAG_NET: u8 = 1;
pub const CONN_FLAG_IOMAP: u8 = 2;

/// Whether this host is big-endian ("network order"), for RS_CONN_FLAG_NET.
pub const HOST_IS_NET: bool = cfg!(target_endian = "big");

/// An address/key/length triple (`struct rs_sge`), host form.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub key: u32,
    pub length: u32,
}

pub const SGE_LEN: usize = 16;
pub const IOMAP_LEN: usize = 24;

impl Sge {
    /// The 16 bytes written into a peer's target SGL: the receiver's host
    /// order, i.e. ours byte-swapped when `swap` says the peer differs.
    pub fn to_mem(&self, swap: bool) -> [u8; SGE_LEN] {
        let (a, k, l) = if swap {
            (self.addr.swap_bytes(), self.key.swap_bytes(), self.length.swap_bytes())
        } else {
            (self.addr, self.key, self.length)
        };
        let mut b = [0u8; SGE_LEN];
        b[0..8].copy_from_slice(&a.to_ne_bytes());
        b[8..12].copy_from_slice(&k.to_ne_bytes());
        b[12..16].copy_from_slice(&l.to_ne_bytes());
        b
    }

    /// Reads an SGE the peer wrote into our memory (already in our order).
    pub fn from_mem(b: &[u8; SGE_LEN]) -> Sge {
        Sge {
            addr: u64::from_ne_bytes(b[0..8].try_into().unwrap_or([0; 8])),
            key: u32::from_ne_bytes(b[8..12].try_into().unwrap_or([0; 4])),
            length: u32::from_ne_bytes(b[12..16].try_into().unwrap_or([0; 4])),
        }
    }

    fn to_be(self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.addr.to_be_bytes());
        out[8..12].copy_from_slice(&self.key.to_be_bytes());
        out[12..16].copy_from_slice(&self.length.to_be_bytes());
    }

    fn from_be(b: &[u8]) -> Sge {
        Sge {
            addr: u64::from_be_bytes(b[0..8].try_into().unwrap_or([0; 8])),
            key: u32::from_be_bytes(b[8..12].try_into().unwrap_or([0; 4])),
            length: u32::from_be_bytes(b[12..16].try_into().unwrap_or([0; 4])),
        }
    }
}

/// One entry of a peer-visible iomap table (`struct rs_iomap`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoMapEntry {
    pub offset: u64,
    pub sge: Sge,
}

impl IoMapEntry {
    pub fn to_mem(&self, swap: bool) -> [u8; IOMAP_LEN] {
        let off = if swap { self.offset.swap_bytes() } else { self.offset };
        let mut b = [0u8; IOMAP_LEN];
        b[0..8].copy_from_slice(&off.to_ne_bytes());
        b[8..24].copy_from_slice(&self.sge.to_mem(swap));
        b
    }

    pub fn from_mem(b: &[u8; IOMAP_LEN]) -> IoMapEntry {
        let mut s = [0u8; SGE_LEN];
        s.copy_from_slice(&b[8..24]);
        IoMapEntry { offset: u64::from_ne_bytes(b[0..8].try_into().unwrap_or([0; 8])), sge: Sge::from_mem(&s) }
    }
}

/// `struct rs_conn_data`: what each side tells the other in the CM private data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnData {
    pub version: u8,
    pub flags: u8,
    pub credits: u16,
    pub target_iomap_size: u8,
    pub target_sgl: Sge,
    pub data_buf: Sge,
}

impl ConnData {
    pub fn encode(&self) -> [u8; CONN_DATA_LEN] {
        let mut b = [0u8; CONN_DATA_LEN];
        b[0] = self.version;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.credits.to_be_bytes());
        // 4..7 reserved
        b[7] = self.target_iomap_size;
        self.target_sgl.to_be(&mut b[8..24]);
        self.data_buf.to_be(&mut b[24..40]);
        b
    }

    /// Parses the private data of a request or reply (CM padding after it is ignored).
    pub fn decode(b: &[u8]) -> Option<ConnData> {
        if b.len() < CONN_DATA_LEN {
            return None;
        }
        Some(ConnData {
            version: b[0],
            flags: b[1],
            credits: u16::from_be_bytes([b[2], b[3]]),
            target_iomap_size: b[7],
            target_sgl: Sge::from_be(&b[8..24]),
            data_buf: Sge::from_be(&b[24..40]),
        })
    }

    /// Whether the peer's byte order differs from ours (RS_OPT_SWAP_SGL).
    pub fn needs_swap(&self) -> bool {
        (self.flags & CONN_FLAG_NET != 0) != HOST_IS_NET
    }
}

/// 8-bit "scale" encoding of an iomap size: up to 128 as is, larger in units of 256.
pub fn scale_encode(n: u16) -> u8 {
    if n <= 128 {
        n as u8
    } else {
        0x80 | ((n >> 8) as u8 & 0x7F)
    }
}

pub fn scale_decode(v: u8) -> u16 {
    if v <= 128 {
        v as u16
    } else {
        ((v & 0x7F) as u16) << 8
    }
}

// ---- datagram service ----

pub const DS_UDP_TAG: u32 = 0x5555_5555;
pub const DS_IPV4_HDR_LEN: usize = 8;
pub const DS_IPV6_HDR_LEN: usize = 24;
pub const DS_UDP_IPV4_HDR_LEN: usize = 16;
pub const DS_UDP_IPV6_HDR_LEN: usize = 28;

/// `struct ds_udp_header`: in front of a datagram sent over the UDP socket
/// (data while the peer's QP is unknown, or a bare reply carrying our QPN).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpHdr {
    pub op: u8,
    pub qpn: u32,
    pub addr: IpAddr,
}

impl UdpHdr {
    pub fn encode(&self) -> Vec<u8> {
        let (version, len) = match self.addr {
            IpAddr::V4(_) => (4u8, DS_UDP_IPV4_HDR_LEN),
            IpAddr::V6(_) => (6u8, DS_UDP_IPV6_HDR_LEN),
        };
        let mut b = vec![0u8; len];
        b[0..4].copy_from_slice(&DS_UDP_TAG.to_be_bytes());
        b[4] = version;
        b[5] = self.op;
        b[6] = len as u8;
        b[8..12].copy_from_slice(&(self.qpn & 0xFF_FFFF).to_be_bytes());
        match self.addr {
            IpAddr::V4(a) => b[12..16].copy_from_slice(&a.octets()),
            IpAddr::V6(a) => b[12..28].copy_from_slice(&a.octets()),
        }
        b
    }

    /// Header and its length; `None` for anything malformed.
    pub fn decode(b: &[u8]) -> Option<(UdpHdr, usize)> {
        if b.len() < DS_UDP_IPV4_HDR_LEN || u32::from_be_bytes(b[0..4].try_into().ok()?) != DS_UDP_TAG {
            return None;
        }
        let (version, op, len) = (b[4], b[5], b[6] as usize);
        if op != OP_DATA as u8 && op != OP_CTRL as u8 {
            return None;
        }
        let addr = match (version, len) {
            (4, DS_UDP_IPV4_HDR_LEN) => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(&b[12..16]).ok()?)),
            (6, DS_UDP_IPV6_HDR_LEN) if b.len() >= DS_UDP_IPV6_HDR_LEN => {
                IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&b[12..28]).ok()?))
            }
            _ => return None,
        };
        let qpn = u32::from_be_bytes(b[8..12].try_into().ok()?) & 0xFF_FFFF;
        Some((UdpHdr { op, qpn, addr }, len))
    }
}

/// `struct ds_header`: in front of every datagram carried by a UD QP; says
/// which UDP address sent it (so `rrecvfrom` can report it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DsHdr {
    pub port: u16,
    pub addr: IpAddr,
    pub flowinfo: u32,
}

impl DsHdr {
    pub fn len_for(addr: &IpAddr) -> usize {
        match addr {
            IpAddr::V4(_) => DS_IPV4_HDR_LEN,
            IpAddr::V6(_) => DS_IPV6_HDR_LEN,
        }
    }

    pub fn encode(&self, out: &mut [u8]) -> usize {
        let len = Self::len_for(&self.addr);
        out[2..4].copy_from_slice(&self.port.to_be_bytes());
        match self.addr {
            IpAddr::V4(a) => {
                out[0] = 4;
                out[4..8].copy_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                out[0] = 6;
                out[4..8].copy_from_slice(&self.flowinfo.to_be_bytes());
                out[8..24].copy_from_slice(&a.octets());
            }
        }
        out[1] = len as u8;
        len
    }

    pub fn decode(b: &[u8]) -> Option<(DsHdr, usize)> {
        if b.len() < DS_IPV4_HDR_LEN {
            return None;
        }
        let port = u16::from_be_bytes([b[2], b[3]]);
        match (b[0], b[1] as usize) {
            (4, DS_IPV4_HDR_LEN) => Some((
                DsHdr { port, addr: IpAddr::V4(Ipv4Addr::new(b[4], b[5], b[6], b[7])), flowinfo: 0 },
                DS_IPV4_HDR_LEN,
            )),
            (6, DS_IPV6_HDR_LEN) if b.len() >= DS_IPV6_HDR_LEN => Some((
                DsHdr {
                    port,
                    addr: IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&b[8..24]).ok()?)),
                    flowinfo: u32::from_be_bytes(b[4..8].try_into().ok()?),
                },
                DS_IPV6_HDR_LEN,
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages() {
        let m = msg(OP_SGL, 0x2345);
        assert_eq!(msg_op(m), OP_SGL);
        assert_eq!(msg_data(m), 0x2345);
        assert_eq!(msg(OP_CTRL, CTRL_SHUTDOWN), 0xE000_0002);
        assert_eq!(msg(OP_DATA, 0xFFFF_FFFF), 0x1FFF_FFFF);
    }

    #[test]
    fn conn_data_layout() {
        let c = ConnData {
            version: 1,
            flags: CONN_FLAG_IOMAP,
            credits: 384,
            target_iomap_size: 1,
            target_sgl: Sge { addr: 0x1122_3344_5566_7788, key: 0xAABB_CCDD, length: 2 },
            data_buf: Sge { addr: 0x1000, key: 7, length: 65536 },
        };
        let b = c.encode();
        assert_eq!(&b[0..8], &[1, 2, 0x01, 0x80, 0, 0, 0, 1]);
        assert_eq!(&b[8..16], &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
        assert_eq!(&b[16..24], &[0xAA, 0xBB, 0xCC, 0xDD, 0, 0, 0, 2]);
        assert_eq!(&b[36..40], &[0, 1, 0, 0]);
        let mut padded = b.to_vec();
        padded.resize(56, 0);
        assert_eq!(ConnData::decode(&padded), Some(c));
        assert!(ConnData::decode(&b[..39]).is_none());
        assert!(!c.needs_swap() || HOST_IS_NET);
    }

    #[test]
    fn scale() {
        for n in [0u16, 1, 64, 127, 128] {
            assert_eq!(scale_decode(scale_encode(n)), n);
        }
        assert_eq!(scale_encode(256), 0x81);
        assert_eq!(scale_decode(0x81), 256);
        assert_eq!(scale_decode(scale_encode(1000)), 768);
    }

    #[test]
    fn sge_mem() {
        let s = Sge { addr: 0x0102_0304_0506_0708, key: 0x0A0B_0C0D, length: 0x100 };
        assert_eq!(Sge::from_mem(&s.to_mem(false)), s);
        let sw = s.to_mem(true);
        assert_eq!(&sw[0..8], &s.addr.to_be_bytes()[..]);
        let e = IoMapEntry { offset: 42, sge: s };
        assert_eq!(IoMapEntry::from_mem(&e.to_mem(false)), e);
    }

    #[test]
    fn ds_headers() {
        let h = UdpHdr { op: OP_DATA as u8, qpn: 0x12_3456, addr: "10.1.2.3".parse().unwrap() };
        let b = h.encode();
        assert_eq!(b.len(), 16);
        assert_eq!(&b[0..8], &[0x55, 0x55, 0x55, 0x55, 4, 0, 16, 0]);
        assert_eq!(&b[8..16], &[0, 0x12, 0x34, 0x56, 10, 1, 2, 3]);
        assert_eq!(UdpHdr::decode(&b), Some((h, 16)));
        let h6 = UdpHdr { op: OP_CTRL as u8, qpn: 5, addr: "fe80::1".parse().unwrap() };
        assert_eq!(UdpHdr::decode(&h6.encode()), Some((h6, 28)));
        let mut bad = b.clone();
        bad[0] = 0;
        assert!(UdpHdr::decode(&bad).is_none());

        let mut buf = [0u8; 24];
        let d = DsHdr { port: 7174, addr: "127.0.0.1".parse().unwrap(), flowinfo: 0 };
        assert_eq!(d.encode(&mut buf), 8);
        assert_eq!(&buf[..8], &[4, 8, 0x1C, 0x06, 127, 0, 0, 1]);
        assert_eq!(DsHdr::decode(&buf), Some((d, 8)));
        let d6 = DsHdr { port: 1, addr: "::1".parse().unwrap(), flowinfo: 9 };
        assert_eq!(d6.encode(&mut buf), 24);
        assert_eq!(DsHdr::decode(&buf), Some((d6, 24)));
    }
}
