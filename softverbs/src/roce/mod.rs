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

#[cfg(test)]
mod packet_tests;
#[cfg(test)]
mod link_tests;
