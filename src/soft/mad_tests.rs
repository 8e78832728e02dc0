//! Tests of the CM MAD layer (`mad.rs`) against what Linux really sent.
//!
//! The vectors in `tests/data/roce-cm/` are captures from the RoCE probe
//! (`shared/vm-rdma/roce-probe/`): a REQ MAD the guest kernel sent, and pcaps
//! of whole exchanges between kernel rxe and a userspace peer. Decoding them
//! checks every field's position and width; re-encoding them byte for byte
//! checks that nothing the kernel sends is lost or moved. Random round trips,
//! an all-ones layout check and a fuzz loop cover what the captures do not.

use super::mad::cma::{self, CmaHdr};
use super::mad::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

fn data(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/roce-cm/{}", env!("CARGO_MANIFEST_DIR"), name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn mad_of(v: &[u8]) -> [u8; MAD_LEN] {
    v.try_into().expect("a MAD is 256 bytes")
}

/// Hex bytes separated by spaces; `xx*n` repeats a byte n times (for the
/// long zero runs of roce.md's dump).
fn hex(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for tok in s.split_whitespace() {
        let (b, n) = match tok.split_once('*') {
            Some((b, n)) => (b, n.parse::<usize>().unwrap()),
            None => (tok, 1),
        };
        out.extend(std::iter::repeat_n(u8::from_str_radix(b, 16).unwrap(), n));
    }
    out
}

fn v4(a: u8, b: u8, c: u8, d: u8) -> Ipv4Addr {
    Ipv4Addr::new(a, b, c, d)
}

// ---------------------------------------------------------------------------
// A tiny pcap reader: Ethernet / IPv4 / UDP 4791 / BTH / DETH / MAD / ICRC.

/// A MAD from a capture, with the IP endpoints it travelled between.
struct Captured {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    mad: [u8; MAD_LEN],
}

const UD_SEND_ONLY: u8 = 0x64;
const BTH_LEN: usize = 12;
const DETH_LEN: usize = 8;
const ICRC_LEN: usize = 4;

fn be16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}

/// Every MAD sent to QP 1 in a pcap, in capture order.
fn pcap_mads(name: &str) -> Vec<Captured> {
    let f = data(name);
    let magic = u32::from_le_bytes(f[0..4].try_into().unwrap());
    let le = match magic {
        0xA1B2_C3D4 | 0xA1B2_3C4D => true,
        0xD4C3_B2A1 | 0x4D3C_B2A1 => false,
        _ => panic!("{name}: not a pcap (magic {magic:#x})"),
    };
    let rd32 = |o: usize| {
        let b: [u8; 4] = f[o..o + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    assert_eq!(rd32(20), 1, "{name}: link type must be Ethernet");
    let mut out = Vec::new();
    let mut o = 24;
    while o + 16 <= f.len() {
        let incl = rd32(o + 8) as usize;
        let fr = &f[o + 16..o + 16 + incl];
        o += 16 + incl;
        if fr.len() < 14 || be16(fr, 12) != 0x0800 {
            continue;
        }
        let ip = &fr[14..];
        let ihl = usize::from(ip[0] & 0x0F) * 4;
        if ip[9] != 17 {
            continue;
        }
        let src = v4(ip[12], ip[13], ip[14], ip[15]);
        let dst = v4(ip[16], ip[17], ip[18], ip[19]);
        let udp = &ip[ihl..usize::from(be16(ip, 2))];
        if be16(udp, 2) != 4791 {
            continue;
        }
        let pl = &udp[8..usize::from(be16(udp, 4))];
        if pl.len() < BTH_LEN + ICRC_LEN {
            continue; // the probes include deliberately truncated packets
        }
        let dest_qp = u32::from_be_bytes([0, pl[5], pl[6], pl[7]]);
        if pl[0] != UD_SEND_ONLY || dest_qp != 1 {
            continue;
        }
        assert_eq!(pl.len(), BTH_LEN + DETH_LEN + MAD_LEN + ICRC_LEN, "{name}: QP1 payload size");
        let deth = &pl[BTH_LEN..BTH_LEN + DETH_LEN];
        assert_eq!(u32::from_be_bytes(deth[0..4].try_into().unwrap()), GSI_QKEY);
        assert_eq!(&deth[5..8], &[0, 0, 1], "{name}: MADs come from QP 1");
        let m = &pl[BTH_LEN + DETH_LEN..BTH_LEN + DETH_LEN + MAD_LEN];
        out.push(Captured { src, dst, sport: be16(udp, 0), mad: mad_of(m) });
    }
    out
}

// ---------------------------------------------------------------------------
// The kernel's REQ.

/// The REQ the guest kernel sent for `rping -c -a 10.77.0.1` (port 7174).
#[test]
fn mad_kernel_req_from_guest() {
    let raw = mad_of(&data("req-from-guest-1.bin"));
    let (h, msg) = decode(&raw).unwrap();
    assert_eq!(h, MadHdr::cm(0x0000_0002_e2f7_0ccb, attr::REQ, 0));
    let CmMsg::Req(r) = msg else { panic!("not a REQ: {msg:?}") };
    // The kernel's TID: agent id << 32 | the comm ID as a little-endian host wrote it.
    assert_eq!(h.tid as u32, r.local_comm_id.swap_bytes());
    assert_eq!(r.local_comm_id, 0xcb0c_f7e2);
    assert_eq!(r.vendor_id, 0);
    assert_eq!(r.service_id, 0x0000_0000_0106_1c06);
    assert_eq!(cma::split_service_id(r.service_id), Some((cma::PS_TCP, 7174)));
    assert_eq!(r.local_ca_guid, 0x5054_00ff_fe77_0002, "EUI-64 of MAC 52:54:00:77:00:02");
    assert_eq!(r.local_qkey, 0);
    assert_eq!(r.local_qpn, 0x15);
    assert_eq!(r.responder_resources, 1);
    assert_eq!(r.local_eecn, 0);
    assert_eq!(r.initiator_depth, 1);
    assert_eq!(r.remote_eecn, 0);
    assert_eq!(r.remote_cm_response_timeout, 20);
    assert_eq!(r.transport_type, transport::RC);
    assert!(!r.e2e_flow_control);
    assert_eq!(r.starting_psn, 0x04_3086);
    assert_eq!(r.local_cm_response_timeout, 20);
    assert_eq!(r.retry_count, 7, "rping asks for 7");
    assert_eq!(r.pkey, 0xFFFF);
    assert_eq!(r.path_mtu, 3);
    assert!(!r.rdc_exists);
    assert_eq!(r.rnr_retry_count, 7, "rping asks for 7");
    assert_eq!(r.max_cm_retries, 15);
    assert!(!r.srq);
    assert_eq!(r.ext_transport_type, 0);
    let p = r.primary;
    assert_eq!((p.local_lid, p.remote_lid), (0xFFFF, 0xFFFF));
    assert_eq!(p.local_gid, gid_of_v4(v4(10, 77, 0, 2)));
    assert_eq!(p.remote_gid, gid_of_v4(v4(10, 77, 0, 1)));
    assert_eq!(p.flow_label, 0x8_8267);
    assert_eq!(p.packet_rate, 0);
    assert_eq!(p.traffic_class, 0);
    assert_eq!(p.hop_limit, 64);
    assert_eq!(p.sl, 0);
    assert!(!p.subnet_local);
    assert_eq!(p.local_ack_timeout, 19);
    assert_eq!(r.alternate, Path::default());
    assert!(!r.sap_supported);

    let ch = cma::decode_hdr(&r.private_data).unwrap();
    assert_eq!(
        ch,
        CmaHdr {
            version: 0,
            ip_version: 4,
            port: 0xc97f,
            src: IpAddr::V4(v4(10, 77, 0, 2)),
            dst: IpAddr::V4(v4(10, 77, 0, 1)),
        }
    );
    assert_eq!(p.flow_label, flow_label(ch.port, 7174));
    assert_eq!(&r.private_data[cma::CMA_HDR_LEN..], &[0u8; cma::REQ_USER_DATA_LEN][..]);

    assert_eq!(encode(h.tid, h.attr_mod, &msg), raw, "re-encoded REQ differs");
}

/// roce.md's "Observed kernel REQ" dump (from `ucmatose -s` at 10.20.0.2),
/// typed in as documented: the reference and this decoder must agree.
#[test]
fn mad_roce_md_observed_req() {
    let body = hex("81 71 a2 4b 00 00 00 00 00 00 00 00 01 06 1d 2f
         9c 23 2e ff fe ca ae 4f 00 00 00 00 00 00 00 00
         00 00 13 01 00 00 00 01 00 00 00 a0 6d 52 47 a5
         ff ff 30 f0 ff ff ff ff 00*10 ff ff 0a 14 00 01
         00*10 ff ff 0a 14 00 02 35 ba 40 00 00 40 00 98
         00*44
         00 40 9e eb 00*12 0a 14 00 01 00*12 0a 14 00 02 00*56");
    assert_eq!(body.len(), CM_MSG_LEN);
    let mut raw = [0u8; MAD_LEN];
    MadHdr::cm(0x1234, attr::REQ, 0).write(&mut raw);
    raw[MAD_HDR_LEN..].copy_from_slice(&body);
    let (_, msg) = decode(&raw).unwrap();
    let CmMsg::Req(r) = msg else { panic!("not a REQ") };
    assert_eq!(r.local_comm_id, 0x8171_a24b);
    assert_eq!(cma::split_service_id(r.service_id), Some((cma::PS_TCP, 7471)));
    assert_eq!(r.local_ca_guid, 0x9c23_2eff_feca_ae4f);
    assert_eq!((r.local_qkey, r.local_qpn, r.responder_resources), (0, 0x13, 1));
    assert_eq!((r.local_eecn, r.initiator_depth, r.remote_eecn), (0, 1, 0));
    assert_eq!((r.remote_cm_response_timeout, r.transport_type, r.e2e_flow_control), (20, 0, false));
    assert_eq!(r.starting_psn, 0x6d_5247);
    assert_eq!((r.local_cm_response_timeout, r.retry_count), (20, 5));
    assert_eq!((r.pkey, r.path_mtu, r.rdc_exists, r.rnr_retry_count), (0xFFFF, 3, false, 0));
    assert_eq!((r.max_cm_retries, r.srq, r.ext_transport_type), (15, false, 0));
    let p = r.primary;
    assert_eq!((p.local_lid, p.remote_lid), (0xFFFF, 0xFFFF));
    assert_eq!(v4_of_gid(&p.local_gid), Some(v4(10, 20, 0, 1)));
    assert_eq!(v4_of_gid(&p.remote_gid), Some(v4(10, 20, 0, 2)));
    assert_eq!((p.flow_label, p.packet_rate), (0x3_5ba4, 0));
    assert_eq!((p.traffic_class, p.hop_limit, p.sl, p.subnet_local), (0, 64, 0, false));
    assert_eq!(p.local_ack_timeout, 19);
    assert_eq!(r.alternate, Path::default());
    let ch = cma::decode_hdr(&r.private_data).unwrap();
    assert_eq!(ch, CmaHdr::new(0x9eeb, v4(10, 20, 0, 1).into(), v4(10, 20, 0, 2).into()));
    assert_eq!(p.flow_label, flow_label(ch.port, 7471));
    assert_eq!(encode(0x1234, 0, &msg), raw);
}

// ---------------------------------------------------------------------------
// Whole exchanges from the pcaps.

fn names(mads: &[Captured]) -> Vec<&'static str> {
    mads.iter().map(|c| attr::name(MadHdr::read(&c.mad).unwrap().attr_id)).collect()
}

/// Decodes every MAD of a capture and checks it re-encodes byte for byte.
fn decode_all(name: &str, mads: &[Captured]) -> Vec<(MadHdr, CmMsg)> {
    println!("{name}: {}", names(mads).join(" "));
    mads.iter()
        .enumerate()
        .map(|(i, c)| {
            let (h, m) = decode(&c.mad).unwrap_or_else(|e| panic!("{name} #{i}: {e}"));
            assert_eq!(h.status, 0);
            assert_eq!(h.class_specific, 0);
            assert_eq!(h.attr_mod, 0, "ECE is not used");
            assert_eq!(encode(h.tid, h.attr_mod, &m), c.mad, "{name} #{i} {} re-encodes differently", m.name());
            (h, m)
        })
        .collect()
}

/// Checks what every REQ says about its own addresses: GIDs and cma_hdr
/// name the packet's IP source and destination.
fn check_req_addresses(c: &Captured, r: &Req) {
    assert_eq!(v4_of_gid(&r.primary.local_gid), Some(c.src));
    assert_eq!(v4_of_gid(&r.primary.remote_gid), Some(c.dst));
    let ch = cma::decode_hdr(&r.private_data).unwrap();
    assert_eq!((ch.src, ch.dst), (IpAddr::V4(c.src), IpAddr::V4(c.dst)));
    assert_eq!(r.pkey, 0xFFFF);
    assert_eq!((r.primary.local_lid, r.primary.remote_lid), (0xFFFF, 0xFFFF));
}

#[test]
fn mad_pcap_cm_req_exchange() {
    for file in ["cm-req.pcap", "demo.pcap"] {
        let caps = pcap_mads(file);
        assert_eq!(names(&caps), ["REQ", "REP", "RTU", "DREQ", "DREP"], "{file}");
        let msgs = decode_all(file, &caps);
        let (CmMsg::Req(req), CmMsg::Rep(rep), CmMsg::Rtu(rtu), CmMsg::Dreq(dreq), CmMsg::Drep(drep)) =
            (msgs[0].1, msgs[1].1, msgs[2].1, msgs[3].1, msgs[4].1)
        else {
            panic!("{file}: unexpected kinds")
        };
        check_req_addresses(&caps[0], &req);
        assert_eq!(cma::split_service_id(req.service_id), Some((cma::PS_TCP, 7174)));
        // The kernel passive's REP (rping -s in the guest).
        assert_eq!(rep.remote_comm_id, req.local_comm_id);
        assert_eq!(rep.local_qkey, 0);
        assert_eq!(rep.target_ack_delay, 15, "rxe's ack delay");
        assert_eq!((rep.responder_resources, rep.initiator_depth), (1, 1));
        assert_eq!(rep.local_ca_guid, 0x5054_00ff_fe77_0002);
        // REQ/REP/RTU share the REQ's TID; DREQ has its own, echoed by DREP.
        assert_eq!(msgs[1].0.tid, msgs[0].0.tid);
        assert_eq!(msgs[2].0.tid, msgs[0].0.tid);
        assert_ne!(msgs[3].0.tid, msgs[0].0.tid);
        assert_eq!(msgs[4].0.tid, msgs[3].0.tid);
        assert_eq!((rtu.local_comm_id, rtu.remote_comm_id), (req.local_comm_id, rep.local_comm_id));
        assert_eq!((dreq.local_comm_id, dreq.remote_comm_id), (req.local_comm_id, rep.local_comm_id));
        assert_eq!(dreq.remote_qpn, rep.local_qpn, "DREQ names the receiver's QP");
        assert_eq!((drep.local_comm_id, drep.remote_comm_id), (rep.local_comm_id, req.local_comm_id));
    }
}

#[test]
fn mad_pcap_rc_sidr_probes() {
    let file = "cm-rc-sidr-probes.pcap";
    let caps = pcap_mads(file);
    let expect = [
        "REQ", "REJ", // no listener
        "REQ", "REP", "RTU", "DREQ", "DREP", // ucmatose, we are active
        "SIDR_REQ", "SIDR_REP", "SIDR_REQ", "SIDR_REP", // udaddy: no listener, then a listener
        "REQ", "REJ", // the kernel's REQ, refused
        "REQ", "REP", "RTU", "DREQ", "DREP", // the kernel's REQ, accepted
    ];
    assert_eq!(names(&caps), expect);
    let msgs = decode_all(file, &caps);
    let kinds: std::collections::BTreeSet<u16> = msgs.iter().map(|(_, m)| m.attr_id()).collect();
    for a in [attr::REQ, attr::REP, attr::RTU, attr::REJ, attr::DREQ, attr::DREP, attr::SIDR_REQ, attr::SIDR_REP] {
        assert!(kinds.contains(&a), "{} missing", attr::name(a));
    }
    let m = |i: usize| msgs[i].1;
    let tid = |i: usize| msgs[i].0.tid;

    // 0-1: REQ to a port nobody listens on → REJ 8 with no comm ID of its own.
    let (CmMsg::Req(req), CmMsg::Rej(rej)) = (m(0), m(1)) else { panic!() };
    check_req_addresses(&caps[0], &req);
    assert_eq!(cma::split_service_id(req.service_id), Some((cma::PS_TCP, 7999)));
    assert_eq!((rej.local_comm_id, rej.remote_comm_id), (0, req.local_comm_id));
    assert_eq!((rej.reason, rej.msg_rejected, rej.ari_len), (rej_reason::INVALID_SERVICE_ID, msg_kind::REQ, 0));
    assert_eq!(tid(1), tid(0), "REJ echoes the TID");

    // 2-6: a connection to ucmatose; the kernel is passive.
    let (CmMsg::Req(req), CmMsg::Rep(rep)) = (m(2), m(3)) else { panic!() };
    check_req_addresses(&caps[2], &req);
    assert_eq!(&req.private_data[cma::CMA_HDR_LEN..cma::CMA_HDR_LEN + 8], b"USERDATA");
    assert_eq!(rep.remote_comm_id, req.local_comm_id);
    assert_eq!((rep.local_qpn, rep.starting_psn), (0x11, 0x47_be82));
    assert_eq!((rep.target_ack_delay, rep.failover_accepted, rep.e2e_flow_control), (15, 0, false));
    assert_eq!((rep.rnr_retry_count, rep.srq, rep.vendor_id), (7, false, 0));
    assert_eq!(rep.local_ca_guid, 0xd8c2_79ff_feb4_5e16);
    let (CmMsg::Dreq(dreq), CmMsg::Drep(drep)) = (m(5), m(6)) else { panic!() };
    assert_eq!((dreq.local_comm_id, dreq.remote_comm_id), (rep.local_comm_id, req.local_comm_id));
    assert_eq!(dreq.remote_qpn, req.local_qpn, "the kernel's DREQ names our QP");
    assert_eq!((drep.local_comm_id, drep.remote_comm_id), (req.local_comm_id, rep.local_comm_id));
    assert_eq!(tid(6), tid(5));

    // 7-10: SIDR, first to a port with no listener (status 1), then to udaddy.
    for (q, p, port, status) in [(7, 8, 7998, sidr_status::NO_LISTENER), (9, 10, 7174, sidr_status::OK)] {
        let (CmMsg::SidrReq(sreq), CmMsg::SidrRep(srep)) = (m(q), m(p)) else { panic!() };
        assert_eq!(sreq.pkey, 0xFFFF);
        assert_eq!(cma::split_service_id(sreq.service_id), Some((cma::PS_UDP, port)));
        let ch = cma::decode_hdr(&sreq.private_data).unwrap();
        assert_eq!((ch.src, ch.dst), (IpAddr::V4(caps[q].src), IpAddr::V4(caps[q].dst)));
        assert_eq!((srep.request_id, srep.service_id, srep.status), (sreq.request_id, sreq.service_id, status));
        assert_eq!(tid(p), tid(q));
    }
    let CmMsg::SidrRep(srep) = m(10) else { panic!() };
    assert_eq!((srep.qpn, srep.qkey, srep.vendor_id, srep.add_info_len), (0x12, 0x0123_4567, 0, 0));

    // 11-12 and 13-17: the kernel active (ucmatose -s … at 10.20.0.2 ← 10.20.0.1).
    for i in [11, 13] {
        let CmMsg::Req(req) = m(i) else { panic!() };
        check_req_addresses(&caps[i], &req);
        assert_eq!(tid(i) as u32, req.local_comm_id.swap_bytes());
        let ch = cma::decode_hdr(&req.private_data).unwrap();
        let (_, port) = cma::split_service_id(req.service_id).unwrap();
        assert_eq!(req.primary.flow_label, flow_label(ch.port, port));
        assert_eq!((req.primary.hop_limit, req.primary.local_ack_timeout), (64, 19));
        assert_eq!((req.remote_cm_response_timeout, req.local_cm_response_timeout), (20, 20));
        assert_eq!((req.max_cm_retries, req.path_mtu, req.retry_count, req.rnr_retry_count), (15, 3, 5, 0));
        assert_eq!(req.local_ca_guid, 0xd8c2_79ff_feb4_5e16);
        assert_ne!(caps[i].sport, 4791, "rxe sends from its own hashed port");
    }
    let (CmMsg::Req(req), CmMsg::Rej(rej)) = (m(11), m(12)) else { panic!() };
    assert_eq!(rej.remote_comm_id, req.local_comm_id);
    assert_eq!(rej.reason, rej_reason::CONSUMER_DEFINED);
    assert!(rej.private_data.starts_with(b"soft-reject\0"));
    let (CmMsg::Req(req), CmMsg::Rep(rep), CmMsg::Rtu(rtu)) = (m(13), m(14), m(15)) else { panic!() };
    assert_eq!(rep.remote_comm_id, req.local_comm_id);
    assert!(rep.private_data.starts_with(b"rep-private!\0"));
    assert_eq!((rtu.local_comm_id, rtu.remote_comm_id), (req.local_comm_id, rep.local_comm_id));
    let CmMsg::Dreq(dreq) = m(16) else { panic!() };
    assert_eq!(dreq.remote_qpn, req.local_qpn);
    let reasons: Vec<u16> =
        msgs.iter().filter_map(|(_, m)| if let CmMsg::Rej(r) = m { Some(r.reason) } else { None }).collect();
    assert_eq!(reasons, [8, 28]);
}

// ---------------------------------------------------------------------------
// Generated messages.

/// xorshift64*: deterministic, no crates.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Supplies a value of a given bit width: random for round trips, all ones
/// for the layout check.
type Gen<'a> = &'a mut dyn FnMut(u32) -> u64;

fn g8(g: Gen) -> u8 {
    g(8) as u8
}
fn gb(g: Gen) -> bool {
    g(1) != 0
}
fn gw(g: Gen, w: u32) -> u32 {
    g(w) as u32
}
fn garr<const N: usize>(g: Gen) -> [u8; N] {
    std::array::from_fn(|_| g(8) as u8)
}

fn gen_path(g: Gen) -> Path {
    Path {
        local_lid: g(16) as u16,
        remote_lid: g(16) as u16,
        local_gid: garr(g),
        remote_gid: garr(g),
        flow_label: gw(g, 20),
        packet_rate: g(6) as u8,
        traffic_class: g8(g),
        hop_limit: g8(g),
        sl: g(4) as u8,
        subnet_local: gb(g),
        local_ack_timeout: g(5) as u8,
    }
}

fn gen_msg(kind: u16, g: Gen) -> CmMsg {
    match kind {
        attr::REQ => CmMsg::Req(Req {
            local_comm_id: gw(g, 32),
            vendor_id: gw(g, 24),
            service_id: g(64),
            local_ca_guid: g(64),
            local_qkey: gw(g, 32),
            local_qpn: gw(g, 24),
            responder_resources: g8(g),
            local_eecn: gw(g, 24),
            initiator_depth: g8(g),
            remote_eecn: gw(g, 24),
            remote_cm_response_timeout: g(5) as u8,
            transport_type: g(2) as u8,
            e2e_flow_control: gb(g),
            starting_psn: gw(g, 24),
            local_cm_response_timeout: g(5) as u8,
            retry_count: g(3) as u8,
            pkey: g(16) as u16,
            path_mtu: g(4) as u8,
            rdc_exists: gb(g),
            rnr_retry_count: g(3) as u8,
            max_cm_retries: g(4) as u8,
            srq: gb(g),
            ext_transport_type: g(3) as u8,
            primary: gen_path(g),
            alternate: gen_path(g),
            sap_supported: gb(g),
            private_data: garr(g),
        }),
        attr::MRA => CmMsg::Mra(Mra {
            local_comm_id: gw(g, 32),
            remote_comm_id: gw(g, 32),
            msg_mraed: g(2) as u8,
            service_timeout: g(5) as u8,
            private_data: garr(g),
        }),
        attr::REJ => CmMsg::Rej(Rej {
            local_comm_id: gw(g, 32),
            remote_comm_id: gw(g, 32),
            msg_rejected: g(2) as u8,
            ari_len: g(7) as u8,
            reason: g(16) as u16,
            ari: garr(g),
            private_data: garr(g),
        }),
        attr::REP => CmMsg::Rep(Rep {
            local_comm_id: gw(g, 32),
            remote_comm_id: gw(g, 32),
            local_qkey: gw(g, 32),
            local_qpn: gw(g, 24),
            vendor_id: gw(g, 24),
            local_eecn: gw(g, 24),
            starting_psn: gw(g, 24),
            responder_resources: g8(g),
            initiator_depth: g8(g),
            target_ack_delay: g(5) as u8,
            failover_accepted: g(2) as u8,
            e2e_flow_control: gb(g),
            rnr_retry_count: g(3) as u8,
            srq: gb(g),
            local_ca_guid: g(64),
            private_data: garr(g),
        }),
        attr::RTU => CmMsg::Rtu(Rtu { local_comm_id: gw(g, 32), remote_comm_id: gw(g, 32), private_data: garr(g) }),
        attr::DREQ => CmMsg::Dreq(Dreq {
            local_comm_id: gw(g, 32),
            remote_comm_id: gw(g, 32),
            remote_qpn: gw(g, 24),
            private_data: garr(g),
        }),
        attr::DREP => CmMsg::Drep(Drep { local_comm_id: gw(g, 32), remote_comm_id: gw(g, 32), private_data: garr(g) }),
        attr::SIDR_REQ => CmMsg::SidrReq(SidrReq {
            request_id: gw(g, 32),
            pkey: g(16) as u16,
            service_id: g(64),
            private_data: garr(g),
        }),
        attr::SIDR_REP => CmMsg::SidrRep(SidrRep {
            request_id: gw(g, 32),
            status: g8(g),
            add_info_len: g8(g),
            vendor_id: gw(g, 24),
            qpn: gw(g, 24),
            service_id: g(64),
            qkey: gw(g, 32),
            info: garr(g),
            private_data: garr(g),
        }),
        _ => unreachable!(),
    }
}

const KINDS: [u16; 9] =
    [attr::REQ, attr::MRA, attr::REJ, attr::REP, attr::RTU, attr::DREQ, attr::DREP, attr::SIDR_REQ, attr::SIDR_REP];

#[test]
fn mad_round_trip_random() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut n = 0;
    for kind in KINDS {
        for _ in 0..2000 {
            let msg = gen_msg(kind, &mut |w| if w == 64 { rng.next() } else { rng.next() & ((1 << w) - 1) });
            let (tid, attr_mod) = (rng.next(), rng.next() as u32);
            let mad = encode(tid, attr_mod, &msg);
            let (h, back) = decode(&mad).unwrap();
            assert_eq!(h, MadHdr::cm(tid, kind, attr_mod));
            assert_eq!(back, msg);
            assert_eq!(back.attr_id(), kind);
            assert_eq!(encode(tid, attr_mod, &back), mad);
            n += 1;
        }
    }
    println!("{n} random messages round-tripped");
}

/// Reserved bits per message, as (message offset, mask of reserved bits).
fn reserved(kind: u16) -> Vec<(usize, u8)> {
    let path = |p: usize, last: u8| vec![(p + 38, 0x0F), (p + 39, 0xC0), (p + 42, 0x07), (p + 43, last)];
    match kind {
        attr::REQ => {
            let mut v = vec![(4, 0xFF), (24, 0xFF), (25, 0xFF), (26, 0xFF), (27, 0xFF)];
            v.extend(path(52, 0x07));
            v.extend(path(96, 0x03)); // bit 5 of the last byte is SAP supported
            v
        }
        attr::REP => vec![(27, 0x0F)],
        attr::DREQ => vec![(11, 0xFF)],
        attr::MRA => vec![(8, 0x3F), (9, 0x07)],
        attr::REJ => vec![(8, 0x3F), (9, 0x01)],
        attr::SIDR_REQ => vec![(6, 0xFF), (7, 0xFF)],
        _ => vec![],
    }
}

/// Every field at its maximum sets every bit of the message except the
/// reserved ones: no field overlaps another, none is missing, and each is
/// exactly as wide as roce.md §7 says.
#[test]
fn mad_layout_all_ones() {
    for kind in KINDS {
        let msg = gen_msg(kind, &mut |w| if w == 64 { u64::MAX } else { (1 << w) - 1 });
        let mad = encode(0, 0, &msg);
        let mut want = [0xFFu8; CM_MSG_LEN];
        for (o, m) in reserved(kind) {
            want[o] &= !m;
        }
        for (o, (&got, &w)) in mad[MAD_HDR_LEN..].iter().zip(want.iter()).enumerate() {
            assert_eq!(got, w, "{} byte {o}: {got:#04x}, want {w:#04x}", attr::name(kind));
        }
        assert_eq!(decode(&mad).unwrap().1, msg);
        // Reserved bits set on the wire are ignored.
        let mut dirty = mad;
        for (o, m) in reserved(kind) {
            dirty[MAD_HDR_LEN + o] |= m;
        }
        dirty[18] = 0xAB;
        assert_eq!(decode(&dirty).unwrap().1, msg, "{}", attr::name(kind));
    }
}

/// Out-of-range values are cut to their field rather than spilling over.
#[test]
fn mad_encode_truncates() {
    let req = Req {
        local_qpn: u32::MAX,
        vendor_id: u32::MAX,
        starting_psn: u32::MAX,
        remote_cm_response_timeout: 0xFF,
        path_mtu: 0xFF,
        primary: Path { flow_label: u32::MAX, local_ack_timeout: 0xFF, ..Path::default() },
        ..Req::default()
    };
    let mad = encode(0, 0, &CmMsg::Req(req));
    let m = &mad[MAD_HDR_LEN..];
    assert_eq!(m[4], 0, "reserved byte before the vendor ID");
    assert_eq!(&m[5..8], &[0xFF; 3]);
    assert_eq!(&m[32..36], &[0xFF, 0xFF, 0xFF, 0], "QPN must not reach responder resources");
    assert_eq!(m[43], 0xF8, "timeout must not reach transport type or E2E");
    assert_eq!(m[47], 0, "PSN must not reach the byte after it");
    assert_eq!(m[50], 0xF0, "MTU must not reach RDC / RNR retry");
    assert_eq!(&m[88..92], &[0xFF, 0xFF, 0xF0, 0], "flow label must not reach the packet rate");
    assert_eq!(m[95], 0xF8);
    let CmMsg::Req(back) = decode(&mad).unwrap().1 else { panic!() };
    assert_eq!((back.local_qpn, back.vendor_id, back.starting_psn), (0xFF_FFFF, 0xFF_FFFF, 0xFF_FFFF));
    assert_eq!((back.remote_cm_response_timeout, back.path_mtu), (31, 15));
    assert_eq!((back.primary.flow_label, back.primary.local_ack_timeout), (0xF_FFFF, 31));

    let rep = Rep { vendor_id: 0xAB_CDEF, local_qpn: 0x0111_2233, ..Rep::default() };
    let mad = encode(0, 0, &CmMsg::Rep(rep));
    let m = &mad[MAD_HDR_LEN..];
    assert_eq!((&m[12..15], m[15], m[19], m[23]), (&[0x11, 0x22, 0x33][..], 0xAB, 0xCD, 0xEF));
    let srep = SidrRep { vendor_id: 0xAB_CDEF, qpn: 0xFF01_0203, ..SidrRep::default() };
    let mad = encode(0, 0, &CmMsg::SidrRep(srep));
    let m = &mad[MAD_HDR_LEN..];
    assert_eq!((&m[6..8], &m[8..11], m[11]), (&[0xAB, 0xCD][..], &[1, 2, 3][..], 0xEF));
}

#[test]
fn mad_defaults_are_zero() {
    for (msg, kind) in [
        (CmMsg::Req(Req::default()), attr::REQ),
        (CmMsg::Mra(Mra::default()), attr::MRA),
        (CmMsg::Rej(Rej::default()), attr::REJ),
        (CmMsg::Rep(Rep::default()), attr::REP),
        (CmMsg::Rtu(Rtu::default()), attr::RTU),
        (CmMsg::Dreq(Dreq::default()), attr::DREQ),
        (CmMsg::Drep(Drep::default()), attr::DREP),
        (CmMsg::SidrReq(SidrReq::default()), attr::SIDR_REQ),
        (CmMsg::SidrRep(SidrRep::default()), attr::SIDR_REP),
    ] {
        assert_eq!(msg.attr_id(), kind);
        assert!(msg.private_data().iter().all(|&b| b == 0));
        let mad = encode(7, 9, &msg);
        assert_eq!(&mad[..24], &[1, 7, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, kind as u8, 0, 0, 0, 0, 0, 9]);
        assert!(mad[24..].iter().all(|&b| b == 0), "{}", msg.name());
    }
    let pd_lens: Vec<usize> = KINDS.iter().map(|&k| gen_msg(k, &mut |_| 0).private_data().len()).collect();
    assert_eq!(pd_lens, [92, 222, 148, 196, 224, 220, 224, 216, 136]);
}

// ---------------------------------------------------------------------------
// Malformed input.

#[test]
fn mad_decode_errors() {
    let good = encode(1, 0, &CmMsg::Rtu(Rtu::default()));
    assert!(decode(&good).is_ok());
    for len in [0, 1, 23, 24, 255, 257, 512] {
        let v = vec![0u8; len];
        let mut w = good.to_vec();
        w.resize(len, 0);
        assert_eq!(decode(&v).unwrap_err(), MadError::Length, "{len}");
        assert_eq!(decode(&w).unwrap_err(), MadError::Length, "{len}");
    }
    for (off, val) in [(0, 2), (1, 0x04), (1, 0x81), (2, 1), (2, 3)] {
        let mut m = good;
        m[off] = val;
        assert_eq!(decode(&m).unwrap_err(), MadError::Version, "byte {off} = {val:#x}");
    }
    for method in [0x01, 0x02, 0x81, 0x83, 0x07] {
        let mut m = good;
        m[3] = method;
        assert_eq!(decode(&m).unwrap_err(), MadError::Method, "method {method:#x}");
    }
    for a in [0u16, attr::CLASS_PORT_INFO, attr::LAP, attr::APR, 0x0F, 0x1B, 0x1010, 0xFFFF] {
        let mut m = good;
        m[16..18].copy_from_slice(&a.to_be_bytes());
        assert_eq!(decode(&m).unwrap_err(), MadError::Attr, "attr {a:#x}");
    }
    // Status and class-specific bits do not make a CM MAD undecodable.
    let mut m = good;
    m[4] = 0x80;
    m[7] = 1;
    let (h, _) = decode(&m).unwrap();
    assert_eq!((h.status, h.class_specific), (0x8000, 1));
    assert_eq!(MadHdr::read(&good[..23]), None);
    assert_eq!(MadHdr::read(&good[..24]).unwrap().attr_id, attr::RTU);
}

/// 100 000 random and mutated inputs: decode never panics, and whatever it
/// accepts is a fixed point of encode ∘ decode.
#[test]
fn mad_decode_fuzz() {
    let mut seeds: Vec<[u8; MAD_LEN]> = vec![mad_of(&data("req-from-guest-1.bin"))];
    for f in ["cm-req.pcap", "cm-rc-sidr-probes.pcap"] {
        seeds.extend(pcap_mads(f).into_iter().map(|c| c.mad));
    }
    let mut rng = Rng(0xDEAD_BEEF_CAFE_F00D);
    let (mut ok, mut err) = (0u32, 0u32);
    for i in 0..100_000u32 {
        let input: Vec<u8> = match i % 4 {
            // Random bytes of a random length around 256.
            0 => (0..rng.below(300)).map(|_| rng.next() as u8).collect(),
            // Random body behind a valid CM header of a random (mostly known) attribute.
            1 => {
                let mut m: Vec<u8> = (0..MAD_LEN).map(|_| rng.next() as u8).collect();
                m[..4].copy_from_slice(&[BASE_VERSION, CM_CLASS, CM_CLASS_VERSION, METHOD_SEND]);
                let a = 0x0F + rng.below(0x0D) as u16;
                m[16..18].copy_from_slice(&a.to_be_bytes());
                m
            }
            // A captured MAD with a few bytes changed.
            2 => {
                let mut m = seeds[rng.below(seeds.len() as u64) as usize].to_vec();
                for _ in 0..1 + rng.below(8) {
                    let at = rng.below(MAD_LEN as u64) as usize;
                    m[at] = rng.next() as u8;
                }
                m
            }
            // A captured MAD cut or extended.
            _ => {
                let mut m = seeds[rng.below(seeds.len() as u64) as usize].to_vec();
                m.resize(rng.below(2 * MAD_LEN as u64) as usize, rng.next() as u8);
                m
            }
        };
        match decode(&input) {
            Ok((h, msg)) => {
                ok += 1;
                assert_eq!(input.len(), MAD_LEN);
                assert_eq!(msg.attr_id(), h.attr_id);
                let again = encode(h.tid, h.attr_mod, &msg);
                assert_eq!(decode(&again).unwrap(), (MadHdr { status: 0, class_specific: 0, ..h }, msg));
            }
            Err(_) => err += 1,
        }
        let _ = cma::decode_hdr(&input);
        let _ = MadHdr::read(&input);
    }
    println!("fuzz: {ok} decoded, {err} refused");
    assert!(ok > 25_000 && err > 25_000, "the fuzz must exercise both paths ({ok}/{err})");
}

// ---------------------------------------------------------------------------
// rdma_cm helpers.

#[test]
fn mad_cma_hdr() {
    let h = CmaHdr::new(0x9eeb, v4(10, 20, 0, 1).into(), v4(10, 20, 0, 2).into());
    assert_eq!((h.version, h.ip_version), (0, 4));
    let mut b = [0xEEu8; 40];
    cma::encode_hdr(&h, &mut b);
    assert_eq!(&b[..36], &hex("00 40 9e eb 00*12 0a 14 00 01 00*12 0a 14 00 02")[..]);
    assert_eq!(&b[36..], &[0xEE; 4], "only 36 bytes are written");
    assert_eq!(cma::decode_hdr(&b), Some(h));
    assert_eq!(cma::decode_hdr(&b[..36]), Some(h));
    assert_eq!(cma::decode_hdr(&b[..35]), None);
    let mut bad = b;
    bad[0] = 1;
    assert_eq!(cma::decode_hdr(&bad), None, "cma version must be 0");
    for ipv in [0x00, 0x50, 0xF0, 0x04] {
        bad = b;
        bad[1] = ipv;
        assert_eq!(cma::decode_hdr(&bad), None, "ip_version byte {ipv:#x}");
    }
    bad = b;
    bad[1] = 0x4F; // the low nibble is not looked at
    assert_eq!(cma::decode_hdr(&bad), Some(h));

    let s6: Ipv6Addr = "fe80::1234:5678".parse().unwrap();
    let d6: Ipv6Addr = "2001:db8::7".parse().unwrap();
    let h6 = CmaHdr::new(65535, s6.into(), d6.into());
    assert_eq!(h6.ip_version, 6);
    let mut b6 = [0u8; 36];
    cma::encode_hdr(&h6, &mut b6);
    assert_eq!(b6[1], 0x60);
    assert_eq!(&b6[2..4], &[0xFF, 0xFF]);
    assert_eq!(&b6[4..20], &s6.octets());
    assert_eq!(&b6[20..36], &d6.octets());
    assert_eq!(cma::decode_hdr(&b6), Some(h6));

    let user = b"hello, kernel";
    let pd = cma::req_private_data(&h, user).unwrap();
    assert_eq!(cma::decode_hdr(&pd), Some(h));
    assert_eq!(&pd[36..36 + user.len()], user);
    assert!(pd[36 + user.len()..].iter().all(|&x| x == 0));
    assert!(cma::req_private_data(&h, &[1; 56]).is_some());
    assert!(cma::req_private_data(&h, &[1; 57]).is_none());
    assert!(cma::sidr_req_private_data(&h, &[1; 180]).is_some());
    assert!(cma::sidr_req_private_data(&h, &[1; 181]).is_none());
    assert_eq!(
        (cma::REQ_USER_DATA_LEN, cma::SIDR_REQ_USER_DATA_LEN, cma::REP_DATA_LEN, cma::REJ_DATA_LEN),
        (56, 180, 196, 148)
    );
    assert_eq!(
        (cma::SIDR_REP_DATA_LEN, cma::RTU_DATA_LEN, cma::DREP_DATA_LEN, cma::DREQ_DATA_LEN),
        (136, 224, 224, 220)
    );
}

#[test]
fn mad_service_ids() {
    assert_eq!(cma::service_id(cma::PS_TCP, 7471), 0x0000_0000_0106_1D2F);
    assert_eq!(cma::service_id(cma::PS_UDP, 0), 0x0111_0000);
    assert_eq!(cma::service_id(cma::PS_IB, 0xFFFF), 0x013F_FFFF);
    assert_eq!(cma::service_id(cma::PS_IPOIB, 1), 0x0002_0001);
    for ps in [cma::PS_TCP, cma::PS_UDP, cma::PS_IB, cma::PS_IPOIB] {
        for port in [0, 1, 7174, 65535] {
            assert_eq!(cma::split_service_id(cma::service_id(ps, port)), Some((ps, port)));
        }
    }
    assert_eq!(cma::split_service_id(0x0001_0000_0106_1D2F), None, "high 32 bits set");
    assert_eq!(cma::split_service_id(0x8000_0000_0000_0000), None);
    assert_eq!(cma::split_service_id(0x0107_1D2F), None, "unknown port space");
    assert_eq!(cma::split_service_id(0), None);
}

#[test]
fn mad_gid_helpers() {
    let g = gid_of_v4(v4(10, 20, 0, 1));
    assert_eq!(g, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 20, 0, 1]);
    assert_eq!(v4_of_gid(&g), Some(v4(10, 20, 0, 1)));
    assert_eq!(v4_of_gid(&gid_of_v4(Ipv4Addr::UNSPECIFIED)), Some(Ipv4Addr::UNSPECIFIED));
    let mut link_local = [0u8; 16];
    link_local[0] = 0xFE;
    link_local[1] = 0x80;
    link_local[15] = 1;
    assert_eq!(v4_of_gid(&link_local), None);
    assert_eq!(v4_of_gid(&[0; 16]), None);
    let mut compat = g; // ::a.b.c.d (IPv4-compatible) is not a RoCEv2 IPv4 GID
    compat[10] = 0;
    compat[11] = 0;
    assert_eq!(v4_of_gid(&compat), None);

    assert_eq!(flow_label(0x9eeb, 7471), 0x3_5ba4);
    assert_eq!(flow_label(0xc97f, 7174), 0x8_8267);
    assert_eq!(flow_label(0, 0), 0);
    assert_eq!(flow_label(65535, 65535), (65535 * 32) & 0xF_FFFF);
    assert!(flow_label(0xFFFF, 0xFFFF) <= 0xF_FFFF);
}

#[test]
fn mad_timeouts() {
    assert_eq!(cm_timeout_ms(20), 4096);
    assert_eq!(cm_timeout_ms(19), 2048, "timewait with ack timeout 19");
    assert_eq!(cm_timeout_ms(18), 1024);
    assert_eq!(cm_timeout_ms(24), 65536, "rdma_cm's MRA service timeout");
    assert_eq!(cm_timeout_ms(9), 2);
    assert_eq!(cm_timeout_ms(8), 1);
    assert_eq!(cm_timeout_ms(1), 1);
    assert_eq!(cm_timeout_ms(0), 1);
    assert_eq!(cm_timeout_ms(31), 1 << 23);
    assert_eq!(cm_timeout_ms(255), 1 << 23);
    // The kernel active's REP wait: 2·ms(packet life 18) + ms(20).
    assert_eq!(2 * cm_timeout_ms(18) + cm_timeout_ms(20), 6144);
}

#[test]
fn mad_attr_names() {
    let names: Vec<&str> = KINDS.iter().map(|&k| attr::name(k)).collect();
    assert_eq!(names, ["REQ", "MRA", "REJ", "REP", "RTU", "DREQ", "DREP", "SIDR_REQ", "SIDR_REP"]);
    assert_eq!(attr::name(attr::LAP), "LAP");
    assert_eq!(attr::name(0x1234), "?");
    assert_eq!(MadError::Attr.to_string(), "unsupported CM attribute");
}
