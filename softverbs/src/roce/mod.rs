//! RoCEv2 on the wire: InfiniBand transport packets in UDP datagrams to port 4791, so a
//! soft-fabric QP can talk to kernel rxe and RoCE NICs.
//!
//! `packet` encodes and decodes the transport headers; `icrc` computes and checks the
//! invariant CRC; `endpoint` is a context's UDP port 4791 and chooses the wire
//! ([`endpoint::choose`]); `link` is one RC/UC QP's reliable connection over it.

pub mod endpoint;
pub mod icrc;
pub mod link;
pub mod mcast;
pub mod packet;
pub mod share;

use std::net::Ipv4Addr;

/// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`).
pub fn v4_of_gid(gid: &[u8; 16]) -> Option<Ipv4Addr> {
    std::net::Ipv6Addr::from(*gid).to_ipv4_mapped()
}

pub fn gid_of_v4(ip: Ipv4Addr) -> [u8; 16] {
    ip.to_ipv6_mapped().octets()
}

/// Immediate data: the application's `imm_data` is `__be32`, its bytes in memory are the
/// ImmDt bytes on the wire; `packet` reads and writes ImmDt as a big-endian number.
pub fn imm_to_wire(app: u32) -> u32 {
    u32::from_be_bytes(app.to_ne_bytes())
}

pub fn imm_from_wire(wire: u32) -> u32 {
    u32::from_ne_bytes(wire.to_be_bytes())
}

/// The stream protocol's UD frame for a RoCEv2 UD packet from `src` to `dst` (a unicast
/// address or a group): what `qp::ud::on_datagram` takes, on either path.
pub fn ud_frame(h: &packet::Headers, d: packet::Deth, src: Ipv4Addr, dst: Ipv4Addr, payload_len: usize) -> crate::net::frame::Header {
    use crate::net::frame::{Header, Op, F_IMM, F_SOLICITED};
    let mut f = Header::new(Op::UdSend);
    f.dst_qpn = h.bth.dqpn;
    f.src_qpn = d.src_qp;
    f.qkey = d.qkey;
    f.sgid = gid_of_v4(src);
    f.dgid = gid_of_v4(dst);
    if let Some(imm) = h.imm {
        f.flags |= F_IMM;
        f.imm = imm_from_wire(imm);
    }
    if h.bth.se {
        f.flags |= F_SOLICITED;
    }
    f.payload_len = payload_len as u32;
    f
}

#[cfg(test)]
mod packet_tests;
#[cfg(test)]
mod link_tests;
