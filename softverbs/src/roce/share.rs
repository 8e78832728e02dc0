//! Many processes, one port: RoCEv2 peers send to UDP 4791 of an address, and a port binds
//! once. The first soft-fabric process of a network namespace to bind 4791 on an address
//! owns it (the host registry says so: `roce-<netns>-<ip>`); the user's later processes
//! there send from a port of their own on that address and receive what the owner hands
//! on: a packet for a QP the owner does not have goes to the process that registered that
//! QP number, in a forward frame to its context's UDP port on 127.0.0.1 (the same socket
//! that carries the stream protocol's datagrams, told apart by the magic). MADs for QP1
//! go by what they name: a REQ or SIDR_REQ by its service ID (listening processes
//! register theirs: `svc-<netns>-<id>`), every other CM message by the comm ID it answers,
//! whose high 16 bits our CM sets to the context port of the process that chose it.
//!
//! When the owner exits, the next process that needs the port binds it (the others retry
//! on their timer). Meanwhile packets to the address are lost, which RC retransmission and
//! the CM's resends repair. Processes of another user never share: their registries are
//! apart, as the stream path's are.

use super::packet::{self, BTH_LEN};
use std::net::Ipv4Addr;

/// Forward frame: "RF", version, 0, source address, destination address, source port,
/// 0 (16 bytes), then the UDP payload as received (BTH .. ICRC).
pub const FWD_MAGIC: [u8; 2] = *b"RF";
pub const FWD_VERSION: u8 = 1;
pub const FWD_HDR: usize = 16;

pub fn encode_fwd(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(FWD_HDR + payload.len());
    v.extend_from_slice(&FWD_MAGIC);
    v.push(FWD_VERSION);
    v.push(0);
    v.extend_from_slice(&src.octets());
    v.extend_from_slice(&dst.octets());
    v.extend_from_slice(&sport.to_be_bytes());
    v.extend_from_slice(&[0, 0]);
    v.extend_from_slice(payload);
    v
}

/// A forward frame's (source, destination, source port, payload); None if it is not one.
pub fn decode_fwd(b: &[u8]) -> Option<(Ipv4Addr, Ipv4Addr, u16, &[u8])> {
    if b.len() < FWD_HDR || b[..2] != FWD_MAGIC || b[2] != FWD_VERSION || b[3] != 0 || b[14..16] != [0, 0] {
        return None;
    }
    let ip = |o: usize| Ipv4Addr::new(b[o], b[o + 1], b[o + 2], b[o + 3]);
    Some((ip(4), ip(8), u16::from_be_bytes([b[12], b[13]]), &b[FWD_HDR..]))
}

/// Where a packet that arrived at the owner of 4791 belongs.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// This process (or nobody: it is dropped or answered here).
    Local,
    /// The process whose context listens on this UDP port.
    Forward(u16),
}

/// What a packet names: a QP, or (QP1) a service ID or one of our comm IDs.
#[derive(Debug, PartialEq, Eq)]
pub enum Target {
    Qpn(u32),
    Service(u64),
    /// The context port our CM put in the comm ID's high 16 bits.
    CommPort(u16),
    None,
}

const MAD_AT: usize = BTH_LEN + packet::DETH_LEN;

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Reads what a (decodable) UDP payload is addressed to. MAD offsets: the attribute ID at
/// 16, the CM message at 24 (REQ and SIDR_REQ: service ID at 8; SIDR_REP: request ID at
/// 0; the others: the comm ID they answer at 4).
pub fn target(udp_payload: &[u8]) -> Target {
    let Some(dqpn) = be32(udp_payload, 4).map(|v| v & 0x00ff_ffff) else { return Target::None };
    if dqpn != 1 {
        return Target::Qpn(dqpn);
    }
    let mad = &udp_payload[MAD_AT.min(udp_payload.len())..];
    let Some(attr) = mad.get(16..18).map(|a| u16::from_be_bytes([a[0], a[1]])) else { return Target::None };
    let comm = |at: usize| be32(mad, 24 + at).map(|c| Target::CommPort((c >> 16) as u16)).unwrap_or(Target::None);
    match attr {
        0x10 | 0x17 => be32(mad, 32).zip(be32(mad, 36)).map(|(h, l)| Target::Service((h as u64) << 32 | l as u64)).unwrap_or(Target::None),
        0x18 => comm(0),
        0x11..=0x16 => comm(4),
        _ => Target::None,
    }
}

/// The services this process listens on (registered while it does).
static SERVICES: std::sync::Mutex<Vec<(u64, crate::net::peers::RegFile)>> = std::sync::Mutex::new(Vec::new());

/// The CM listens (or stops listening) on service `sid`; `port` is the context's.
pub fn listen(sid: u64, port: u16, on: bool) {
    let mut v = crate::core::registry::lock(&SERVICES);
    if on {
        if !v.iter().any(|(s, _)| *s == sid) {
            if let Some(f) = crate::net::peers::roce_claim_service(sid, port) {
                v.push((sid, f));
            }
        }
    } else {
        v.retain(|(s, _)| *s != sid);
    }
}

/// A comm ID (or SIDR request ID) that routes back to the process on context port `port`.
pub fn comm_id(port: u16, random: u16) -> u32 {
    (port as u32) << 16 | random as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A UDP payload to QP1 carrying `mad`.
    fn to_qp1(mad: &[u8]) -> Vec<u8> {
        let mut v = vec![0x64, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 0];
        v.extend_from_slice(&[0x80, 1, 0, 0, 0, 0, 0, 1]);
        v.extend_from_slice(mad);
        v.extend_from_slice(&[0; 4]);
        v
    }

    #[test]
    fn forward_frames_round_trip_and_reject_other_datagrams() {
        let (a, b) = (Ipv4Addr::new(10, 77, 0, 2), Ipv4Addr::new(10, 77, 0, 1));
        let f = encode_fwd(a, b, 0xd872, b"payload");
        assert_eq!(decode_fwd(&f), Some((a, b, 0xd872, &b"payload"[..])));
        assert_eq!(decode_fwd(&f[..FWD_HDR - 1]), None, "short");
        let mut bad = f.clone();
        bad[0] = b'S';
        assert_eq!(decode_fwd(&bad), None, "a stream-protocol datagram starts with \"SV\"");
        bad = f.clone();
        bad[2] = 2;
        assert_eq!(decode_fwd(&bad), None, "another version");
    }

    #[test]
    fn packets_name_their_qp_service_or_comm_id() {
        let mut rc = vec![0x04, 0x30, 0xff, 0xff, 0, 0x12, 0x34, 0x56, 0x80, 0, 0, 1];
        rc.extend_from_slice(&[0; 8]);
        assert_eq!(target(&rc), Target::Qpn(0x123456));
        assert_eq!(target(&rc[..6]), Target::None);
        // The kernel's REQ (rping -c in the guest): service ID RDMA_PS_TCP port 7174.
        let req = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/roce/req-from-guest-1.bin")).unwrap();
        assert_eq!(target(&to_qp1(&req)), Target::Service(0x0000_0000_0106_1c06));
        // A REP answering comm ID 0x1234abcd goes to context port 0x1234.
        let mut rep = vec![0u8; 256];
        rep[16..18].copy_from_slice(&0x13u16.to_be_bytes());
        rep[28..32].copy_from_slice(&comm_id(0x1234, 0xabcd).to_be_bytes());
        assert_eq!(target(&to_qp1(&rep)), Target::CommPort(0x1234));
        // SIDR_REP: the request ID is first.
        let mut sidr = vec![0u8; 256];
        sidr[16..18].copy_from_slice(&0x18u16.to_be_bytes());
        sidr[24..28].copy_from_slice(&comm_id(7, 1).to_be_bytes());
        assert_eq!(target(&to_qp1(&sidr)), Target::CommPort(7));
        let mut other = vec![0u8; 256];
        other[16..18].copy_from_slice(&0x01u16.to_be_bytes());
        assert_eq!(target(&to_qp1(&other)), Target::None, "ClassPortInfo names no one");
    }
}
