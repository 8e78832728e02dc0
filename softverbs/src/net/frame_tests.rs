//! Codec tests and the deterministic fuzz run of `decode` (200k random and mutated frames,
//! own xorshift PRNG): never panics, and whatever it accepts re-encodes to the same bytes.

use super::frame::*;

struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn sample(op: Op, payload: &[u8]) -> Vec<u8> {
    let mut h = Header::new(op);
    h.dst_qpn = 0x123456;
    h.src_qpn = 0x00abcd;
    h.psn = 77;
    h.imm = 0xdeadbeef;
    h.rkey = 0x1111;
    h.raddr = 0x1000;
    h.src_lid = 9;
    h.sgid = [3; 16];
    if op == Op::ReadReq {
        h.aux = 4096;
    }
    h.frame(payload)
}

#[test]
fn roundtrip_every_opcode() {
    for op in [Op::Hello, Op::Send, Op::Write, Op::ReadReq, Op::CmpSwap, Op::FetchAdd, Op::Ack, Op::ReadResp, Op::AtomicResp, Op::UdSend] {
        let payload: Vec<u8> = match op {
            Op::AtomicResp => vec![1; 8],
            Op::Send | Op::Write | Op::ReadResp | Op::UdSend => vec![7; 100],
            _ => vec![],
        };
        let f = sample(op, &payload);
        let (h, total) = decode(&f).unwrap_or_else(|e| panic!("{op:?}: {e:?}"));
        assert_eq!(total, f.len());
        assert_eq!(h.op, op);
        assert_eq!(&f[HDR_LEN..], &payload[..]);
        let mut again = Vec::new();
        h.encode_into(&mut again);
        assert_eq!(&again[..], &f[..HDR_LEN]);
    }
}

#[test]
fn incomplete_and_malformed() {
    let f = sample(Op::Send, &[1, 2, 3]);
    assert_eq!(decode(&f[..10]), Err(DecodeError::Incomplete(HDR_LEN)));
    assert_eq!(decode(&f[..HDR_LEN + 1]), Err(DecodeError::Incomplete(HDR_LEN + 3)));
    let mut bad = f.clone();
    bad[0] = 0;
    assert!(matches!(decode(&bad), Err(DecodeError::Malformed(_))));
    let mut bad = f.clone();
    bad[3] = 99; // opcode
    assert!(matches!(decode(&bad), Err(DecodeError::Malformed(_))));
    let mut bad = f.clone();
    bad[8] = 1; // dst qpn > 24 bits
    assert!(matches!(decode(&bad), Err(DecodeError::Malformed(_))));
    // UD payload larger than the MTU
    let mut h = Header::new(Op::UdSend);
    h.payload_len = MAX_UD + 1;
    let mut v = Vec::new();
    h.encode_into(&mut v);
    assert!(matches!(decode(&v), Err(DecodeError::Malformed(_))));
    // atomic response must carry exactly 8 bytes
    let f = sample(Op::AtomicResp, &[0; 4]);
    assert!(matches!(decode(&f), Err(DecodeError::Malformed(_))));
    // syndrome only on ACK
    let mut f = sample(Op::Send, &[]);
    f[6] = 2;
    assert!(matches!(decode(&f), Err(DecodeError::Malformed(_))));
    // write range overflow
    let mut h = Header::new(Op::Write);
    h.raddr = u64::MAX - 1;
    let f = h.frame(&[0; 8]);
    assert!(matches!(decode(&f), Err(DecodeError::Malformed(_))));
}

/// Checks one input: no panic; accepted frames re-encode identically and respect limits.
fn check(buf: &[u8]) -> bool {
    match decode(buf) {
        Ok((h, total)) => {
            assert!(total <= buf.len() && total == HDR_LEN + h.payload_len as usize);
            assert!(h.validate().is_ok());
            assert!(h.dst_qpn <= QPN_MASK && h.src_qpn <= QPN_MASK);
            let mut again = Vec::new();
            h.encode_into(&mut again);
            assert_eq!(&again[..], &buf[..HDR_LEN]);
            true
        }
        Err(DecodeError::Incomplete(n)) => {
            assert!(n > buf.len());
            false
        }
        Err(DecodeError::Malformed(_)) => false,
    }
}

#[test]
fn fuzz_decode_200k() {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let seeds: Vec<Vec<u8>> = [Op::Hello, Op::Send, Op::Write, Op::ReadReq, Op::CmpSwap, Op::FetchAdd, Op::Ack, Op::ReadResp, Op::AtomicResp, Op::UdSend]
        .iter()
        .map(|&op| sample(op, if op == Op::AtomicResp { &[5; 8] } else if matches!(op, Op::Send | Op::Write | Op::ReadResp | Op::UdSend) { &[9; 40] } else { &[] }))
        .collect();
    let start = std::time::Instant::now();
    let mut accepted = 0usize;
    for i in 0..200_000u32 {
        let buf: Vec<u8> = if i % 4 == 0 {
            let n = rng.below(300) as usize;
            (0..n).map(|_| rng.next() as u8).collect()
        } else {
            let mut b = seeds[rng.below(seeds.len() as u64) as usize].clone();
            for _ in 0..=rng.below(4) {
                match rng.below(4) {
                    0 => {
                        let at = rng.below(b.len() as u64) as usize;
                        b[at] ^= 1 << rng.below(8);
                    }
                    1 => {
                        let at = rng.below(b.len() as u64) as usize;
                        b[at] = rng.next() as u8;
                    }
                    2 => {
                        let n = rng.below(b.len() as u64 + 1) as usize;
                        b.truncate(n);
                    }
                    _ => {
                        for _ in 0..rng.below(16) {
                            b.push(rng.next() as u8);
                        }
                    }
                }
                if b.is_empty() {
                    break;
                }
            }
            b
        };
        if check(&buf) {
            accepted += 1;
        }
    }
    assert!(accepted > 1000, "mutations should keep many frames valid ({accepted})");
    assert!(start.elapsed().as_secs() < 30);
}

#[test]
fn the_datagram_link_flag_belongs_to_hello_only() {
    let mut h = Header::new(Op::Hello);
    h.flags = F_DATAGRAMS;
    h.aux = 40000;
    let (d, _) = decode(&h.frame(&[])).expect("a datagram link's Hello");
    assert_eq!((d.flags, d.aux), (F_DATAGRAMS, 40000));
    for op in [Op::Send, Op::UdSend, Op::Ack] {
        let mut h = Header::new(op);
        h.flags = F_DATAGRAMS;
        assert!(matches!(decode(&h.frame(&[])), Err(DecodeError::Malformed(_))), "{op:?}");
    }
}
