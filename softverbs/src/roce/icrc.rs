//! The RoCEv2 invariant CRC (ICRC) over IPv4.
//!
//! The ICRC is zlib's CRC-32 over a pseudo packet: 8 bytes of 0xFF (standing in for the IB
//! LRH), the IPv4 header with TOS, TTL and checksum set to all-ones, the UDP header with its
//! checksum set to 0xFFFF, the BTH with byte 4 (FECN, BECN, reserved) set to 0xFF, then the
//! rest of the UDP payload up to the ICRC. It goes on the wire least-significant byte first.
//!
//! The IPv4 Identification and the flags are *not* masked, which is awkward for a user-space
//! endpoint on a UDP socket: a sender must make the kernel's choice predictable (an
//! unconnected `IP_PMTUDISC_DO` socket sends ID 0 with DF), and a receiver never sees the ID.
//! CRC is affine, so the receiver solves for the ID instead ([`solve_id_v4`]).
//!
//! IPv6 (which masks traffic class, flow label and hop limit instead and has no ID) is not
//! implemented yet.

use std::net::Ipv4Addr;

use super::packet::ICRC_LEN;

/// CRC-32 (IEEE 802.3) polynomial, bit-reflected.
const POLY: u32 = 0xedb8_8320;

/// Slicing-by-16 tables: `T[0]` is the classic byte table; `T[k][b]` is the register
/// contribution of byte `b` followed by `k` zero bytes, so 16 input bytes fold into the
/// register with 16 independent lookups.
static TABLES: [[u32; 256]; 16] = make_tables();

const fn make_tables() -> [[u32; 256]; 16] {
    let mut t = [[0u32; 256]; 16];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut i = 0;
    while i < 256 {
        let mut k = 1;
        while k < 16 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            k += 1;
        }
        i += 1;
    }
    t
}

/// Advances a raw CRC register (no initial or final inversion) over `data`.
fn update_reg(mut reg: u32, data: &[u8]) -> u32 {
    let t = &TABLES;
    let mut chunks = data.chunks_exact(16);
    for c in &mut chunks {
        let w = |i: usize| u32::from_le_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]]);
        let a = w(0) ^ reg;
        let b = w(4);
        let d = w(8);
        let e = w(12);
        reg = t[15][(a & 0xff) as usize]
            ^ t[14][((a >> 8) & 0xff) as usize]
            ^ t[13][((a >> 16) & 0xff) as usize]
            ^ t[12][(a >> 24) as usize]
            ^ t[11][(b & 0xff) as usize]
            ^ t[10][((b >> 8) & 0xff) as usize]
            ^ t[9][((b >> 16) & 0xff) as usize]
            ^ t[8][(b >> 24) as usize]
            ^ t[7][(d & 0xff) as usize]
            ^ t[6][((d >> 8) & 0xff) as usize]
            ^ t[5][((d >> 16) & 0xff) as usize]
            ^ t[4][(d >> 24) as usize]
            ^ t[3][(e & 0xff) as usize]
            ^ t[2][((e >> 8) & 0xff) as usize]
            ^ t[1][((e >> 16) & 0xff) as usize]
            ^ t[0][(e >> 24) as usize];
    }
    for &byte in chunks.remainder() {
        reg = t[0][((reg ^ u32::from(byte)) & 0xff) as usize] ^ (reg >> 8);
    }
    reg
}

/// Standard CRC-32 (zlib's `crc32`: reflected 0xEDB88320, init and final XOR 0xFFFFFFFF),
/// fed incrementally so a packet can be checksummed from its pieces without copying.
#[derive(Clone, Copy, Debug)]
pub struct Crc32 {
    reg: u32,
}

impl Crc32 {
    pub fn new() -> Self {
        Crc32 { reg: !0 }
    }

    pub fn update(&mut self, data: &[u8]) {
        self.reg = update_reg(self.reg, data);
    }

    /// The CRC of everything fed so far; the state stays usable.
    pub fn finish(&self) -> u32 {
        !self.reg
    }
}

impl Default for Crc32 {
    fn default() -> Self {
        Self::new()
    }
}

/// One-shot [`Crc32`].
pub fn crc32(data: &[u8]) -> u32 {
    let mut c = Crc32::new();
    c.update(data);
    c.finish()
}

// GF(2)[x] arithmetic modulo the CRC polynomial, in the reflected representation the
// register uses: bit 31 holds x^0, bit 0 holds x^31. A raw register R after a message M is
// M·x^32 mod P, so appending n zero bytes maps R to R·x^(8n) mod P. This is what lets the
// receiver find the effect of the IPv4 ID bits without re-running the CRC per bit.

/// The polynomial 1 (x^0).
const ONE: u32 = 0x8000_0000;

/// `a·b mod P`.
const fn mul_mod(a: u32, mut b: u32) -> u32 {
    let mut p = 0;
    let mut bit = ONE;
    while bit != 0 {
        if a & bit != 0 {
            p ^= b;
        }
        // b ← b·x: the x^31 coefficient (bit 0) wraps around through P.
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
        bit >>= 1;
    }
    p
}

/// `X8_POW2[i] = x^(8·2^i) mod P`: the operator "append 2^i zero bytes".
static X8_POW2: [u32; 64] = make_x8_pow2();

const fn make_x8_pow2() -> [u32; 64] {
    let mut t = [0u32; 64];
    t[0] = ONE >> 8; // x^8
    let mut i = 1;
    while i < 64 {
        t[i] = mul_mod(t[i - 1], t[i - 1]);
        i += 1;
    }
    t
}

/// `x^(8n) mod P`, by square-and-multiply over the bits of `n`.
fn x8_pow(n: u64) -> u32 {
    let mut r = ONE;
    let mut i = 0;
    let mut n = n;
    while n != 0 {
        if n & 1 != 0 {
            r = mul_mod(r, X8_POW2[i]);
        }
        n >>= 1;
        i += 1;
    }
    r
}

/// The IPv4 and UDP header fields the ICRC covers (TOS, TTL and both checksums are masked
/// and so absent). Total and UDP lengths follow from the UDP payload.
#[derive(Clone, Copy, Debug)]
pub struct Ipv4Udp {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub id: u16,
    /// Don't Fragment; the fragment offset and MF are taken as 0.
    pub df: bool,
    pub sport: u16,
    pub dport: u16,
}

impl Ipv4Udp {
    /// What a sender on an unconnected, bound UDP socket with `IP_PMTUDISC_DO` puts on the
    /// wire: DF set and ID 0 (the kernel writes 0 when DF is set and it may not fragment).
    pub fn predicted(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16) -> Self {
        Ipv4Udp { src, dst, id: 0, df: true, sport, dport }
    }
}

/// IPv4 flags + fragment offset word with only DF set.
const DF: u16 = 0x4000;
/// Pseudo header: 8 bytes LRH stand-in + 20 IPv4 + 8 UDP.
const PSEUDO_LEN: usize = 36;
/// Offset of the IPv4 Identification in the pseudo header; flags follow it.
const ID_OFF: usize = 12;
/// Offset of the BTH byte the ICRC masks (FECN, BECN, reserved).
const BTH_MASKED_BYTE: usize = 4;

/// The CRC input up to the end of the UDP header. `roce_len` is the UDP payload length,
/// ICRC included; lengths beyond IPv4's limit wrap as the 16-bit fields would.
fn pseudo_v4(ip: &Ipv4Udp, roce_len: usize) -> [u8; PSEUDO_LEN] {
    let total = (20 + 8 + roce_len) as u16;
    let udp_len = (8 + roce_len) as u16;
    let flags = if ip.df { DF } else { 0 };
    let mut p = [0xffu8; PSEUDO_LEN];
    // p[8] version/IHL; p[9] TOS stays masked.
    p[8] = 0x45;
    p[10..12].copy_from_slice(&total.to_be_bytes());
    p[12..14].copy_from_slice(&ip.id.to_be_bytes());
    p[14..16].copy_from_slice(&flags.to_be_bytes());
    // p[16] TTL stays masked.
    p[17] = 17; // UDP
    // p[18..20] header checksum stays masked.
    p[20..24].copy_from_slice(&ip.src.octets());
    p[24..28].copy_from_slice(&ip.dst.octets());
    p[28..30].copy_from_slice(&ip.sport.to_be_bytes());
    p[30..32].copy_from_slice(&ip.dport.to_be_bytes());
    p[32..34].copy_from_slice(&udp_len.to_be_bytes());
    // p[34..36] UDP checksum stays masked.
    p
}

/// Feeds the UDP payload pieces, with BTH byte 4 masked wherever it falls.
fn update_masked(crc: &mut Crc32, parts: &[&[u8]]) {
    let mut off = 0;
    for part in parts {
        match BTH_MASKED_BYTE.checked_sub(off) {
            Some(i) if i < part.len() => {
                crc.update(&part[..i]);
                crc.update(&[0xff]);
                crc.update(&part[i + 1..]);
            }
            _ => crc.update(part),
        }
        off += part.len();
    }
}

/// ICRC of a packet whose UDP payload without the ICRC is the concatenation of `parts`
/// (BTH first; splitting anywhere is fine), sent with the header `ip` describes. The IPv4
/// total length is 28 + the parts + 4. Put `to_le_bytes()` of the result on the wire.
pub fn icrc_v4(ip: &Ipv4Udp, parts: &[&[u8]]) -> u32 {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut crc = Crc32::new();
    crc.update(&pseudo_v4(ip, len + ICRC_LEN));
    update_masked(&mut crc, parts);
    crc.finish()
}

/// The ICRC trailer of a received UDP payload, and the bytes it covers.
fn split_icrc(udp_payload: &[u8]) -> Option<(&[u8], u32)> {
    let body_len = udp_payload.len().checked_sub(ICRC_LEN)?;
    let (body, tail) = udp_payload.split_at(body_len);
    Some((body, u32::from_le_bytes(tail.try_into().ok()?)))
}

/// Exact check of a received UDP payload (ending in its ICRC) against a known header.
pub fn check_v4(ip: &Ipv4Udp, udp_payload: &[u8]) -> bool {
    split_icrc(udp_payload).is_some_and(|(body, want)| icrc_v4(ip, &[body]) == want)
}

/// Checks a received UDP payload (ending in its ICRC) from `src:sport` to `dst:dport`
/// when the IPv4 ID and DF bit are unknown, as on a UDP socket: returns the `(id, df)` that
/// makes the ICRC match, or None if none does (a corrupt packet, or one not from that
/// address). rxe and our sender set DF; DF clear is accepted as well.
///
/// This is weaker than an exact ICRC check, the price of not seeing the header: 2^17 of
/// the 2^32 CRC values are explained by some (ID, DF), so random corruption passes with
/// probability about 2^-15. Single-byte errors are caught except for a few values at a few
/// offsets where CRC-32 cannot tell them from an ID change (e.g. 15 of the 255 possible
/// errors of UDP payload byte 93, whatever the packet; see the `BLIND` table in the tests).
/// An accepted packet is always consistent with *some* real header, never a solver artefact.
///
/// Cost: one CRC pass over the packet plus a constant amount of work. The ICRC is affine in
/// the 32-bit (ID, flags) word `w`: `icrc(w) = icrc(0) ^ L(w)`, where `L(w)` is the raw CRC
/// of `w` shifted past the bytes that follow it, i.e. multiplied by `x^(8n)`. The 17 columns
/// of `L` for the ID and DF bits are independent (any error within 32 bits changes a CRC-32),
/// so Gaussian elimination finds at most one solution.
pub fn solve_id_v4(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    udp_payload: &[u8],
) -> Option<(u16, bool)> {
    if 20 + 8 + udp_payload.len() > usize::from(u16::MAX) {
        return None;
    }
    let (body, want) = split_icrc(udp_payload)?;
    let base = Ipv4Udp { src, dst, id: 0, df: false, sport, dport };
    let target = want ^ icrc_v4(&base, &[body]);

    // Bytes of CRC input after the (ID, flags) word.
    let after = (PSEUDO_LEN - (ID_OFF + 4) + body.len()) as u64;
    let shift = x8_pow(after);
    let column = |w: u32| mul_mod(update_reg(0, &w.to_be_bytes()), shift);

    // Reduced row echelon basis of (image, w) pairs: each pivot (the image's top bit) is
    // set in its own vector only, so reducing a target by the basis is order-independent.
    let mut basis = [(0u32, 0u32); 17];
    let mut n = 0;
    let unknowns = (16..32).map(|bit| 1u32 << bit).chain([u32::from(DF)]);
    for w in unknowns {
        let (mut v, mut m) = (column(w), w);
        for &(bv, bm) in &basis[..n] {
            if v & pivot(bv) != 0 {
                v ^= bv;
                m ^= bm;
            }
        }
        if v == 0 {
            continue; // dependent: cannot happen for CRC-32 (see above); harmless if it did
        }
        let p = pivot(v);
        for b in &mut basis[..n] {
            if b.0 & p != 0 {
                b.0 ^= v;
                b.1 ^= m;
            }
        }
        basis[n] = (v, m);
        n += 1;
    }
    let (mut t, mut w) = (target, 0u32);
    for &(bv, bm) in &basis[..n] {
        if t & pivot(bv) != 0 {
            t ^= bv;
            w ^= bm;
        }
    }
    (t == 0).then_some(((w >> 16) as u16, w & u32::from(DF) != 0))
}

/// Highest set bit of a nonzero vector.
fn pivot(v: u32) -> u32 {
    1 << (31 - v.leading_zeros())
}
